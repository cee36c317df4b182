//! The shipped scenarios (`tests/scenarios/*.sim`), compiled in so `--scenario NAME` works
//! from anywhere.

use crate::sim::scenario::Scenario;

/// (name, text) of every shipped scenario.
const SHIPPED: &[(&str, &str)] = &[
    (
        "mix-key-shared",
        include_str!("../../scenarios/mix-key-shared.sim"),
    ),
    (
        "mix-key-shared-admin",
        include_str!("../../scenarios/mix-key-shared-admin.sim"),
    ),
    (
        "mix-key-shared-chunks",
        include_str!("../../scenarios/mix-key-shared-chunks.sim"),
    ),
    (
        "mix-key-shared-limits",
        include_str!("../../scenarios/mix-key-shared-limits.sim"),
    ),
    (
        "mix-key-shared-restarts",
        include_str!("../../scenarios/mix-key-shared-restarts.sim"),
    ),
    (
        "mix-autosplit",
        include_str!("../../scenarios/mix-autosplit.sim"),
    ),
    ("mix-shared", include_str!("../../scenarios/mix-shared.sim")),
    (
        "mix-shared-chunks",
        include_str!("../../scenarios/mix-shared-chunks.sim"),
    ),
    (
        "mix-key-shared-nack",
        include_str!("../../scenarios/mix-key-shared-nack.sim"),
    ),
    (
        "mix-key-shared-batch-nack",
        include_str!("../../scenarios/mix-key-shared-batch-nack.sim"),
    ),
    (
        "mix-key-shared-delayed",
        include_str!("../../scenarios/mix-key-shared-delayed.sim"),
    ),
    (
        "mix-shared-delayed",
        include_str!("../../scenarios/mix-shared-delayed.sim"),
    ),
    (
        "mix-zero-queue-batch",
        include_str!("../../scenarios/mix-zero-queue-batch.sim"),
    ),
    (
        "mix-shared-chunk-pressure",
        include_str!("../../scenarios/mix-shared-chunk-pressure.sim"),
    ),
    (
        "mix-key-shared-slow-reads",
        include_str!("../../scenarios/mix-key-shared-slow-reads.sim"),
    ),
    (
        "mix-key-shared-store-faults",
        include_str!("../../scenarios/mix-key-shared-store-faults.sim"),
    ),
    (
        "mix-shared-store-faults",
        include_str!("../../scenarios/mix-shared-store-faults.sim"),
    ),
    ("f01-join", include_str!("../../scenarios/f01-join.sim")),
    ("f02-leave", include_str!("../../scenarios/f02-leave.sim")),
    ("f03-ack", include_str!("../../scenarios/f03-ack.sim")),
    ("f04-nack", include_str!("../../scenarios/f04-nack.sim")),
    (
        "f05-redeliver-all",
        include_str!("../../scenarios/f05-redeliver-all.sim"),
    ),
    (
        "f06-read-loop",
        include_str!("../../scenarios/f06-read-loop.sim"),
    ),
    (
        "f07-replay-order",
        include_str!("../../scenarios/f07-replay-order.sim"),
    ),
    (
        "f08-mark-delete",
        include_str!("../../scenarios/f08-mark-delete.sim"),
    ),
    ("f09-chunks", include_str!("../../scenarios/f09-chunks.sim")),
    (
        "f10-restart",
        include_str!("../../scenarios/f10-restart.sim"),
    ),
    (
        "f11-delayed",
        include_str!("../../scenarios/f11-delayed.sim"),
    ),
    (
        "seed-000-draining-skip",
        include_str!("../../scenarios/seed-000-draining-skip.sim"),
    ),
    (
        "seed-001-orphan-chunk",
        include_str!("../../scenarios/seed-001-orphan-chunk.sim"),
    ),
    (
        "seed-002-nack",
        include_str!("../../scenarios/seed-002-nack.sim"),
    ),
];

/// Names of the shipped scenarios.
pub fn builtin_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|(n, _)| *n).collect()
}

/// A shipped scenario by name (`None` if there is none, or if it does not parse — a test
/// checks that every shipped one does).
pub fn builtin(name: &str) -> Option<Scenario> {
    let (n, text) = SHIPPED.iter().find(|(n, _)| *n == name)?;
    Scenario::parse(n, text).ok()
}

/// `NAME` of a shipped scenario, else a path to a `.sim` file.
pub fn load(name_or_file: &str) -> Result<Scenario, String> {
    if let Some((n, text)) = SHIPPED.iter().find(|(n, _)| *n == name_or_file) {
        return Scenario::parse(n, text).map_err(|e| format!("{n}: {e}"));
    }
    let path = std::path::Path::new(name_or_file);
    if path.is_dir() {
        return Err(format!(
            "`{name_or_file}` is a directory, not a scenario file (give one `.sim` file per \
             --scenario)"
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "`{name_or_file}` is neither a shipped scenario ({}) nor a readable file: {e}",
            builtin_names().join(", ")
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        format!(
            "`{name_or_file}` is not UTF-8 text (invalid byte at offset {}); a scenario file is \
             text",
            e.utf8_error().valid_up_to()
        )
    })?;
    Scenario::parse(name_or_file, &text).map_err(|e| format!("{name_or_file}: {e}"))
}

/// The default mix `cargo xtask sim` runs: every shipped scenario.
pub fn default_mix() -> Vec<Scenario> {
    builtin_names().into_iter().filter_map(builtin).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_parses() {
        for (n, text) in SHIPPED {
            if let Err(e) = Scenario::parse(n, text) {
                panic!("{n}: {e}");
            }
        }
    }
}
