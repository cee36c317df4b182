//! The summary table, the grouped violation report and the JSON report.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::sim::check::{Violation, ViolationKind};
use crate::sim::scenario::{Scenario, SubKind};
use crate::sim::world::{Legacy, RunResult};

/// An invariant a run checks (what the summary table's `checked` column names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// Per-key order (Key_Shared only).
    Order,
    /// No loss: every entry acked or dropped by a recorded operation at the end.
    Loss,
    /// No stall: the backlog keeps draining after the last step.
    Stall,
    /// The cursor's mark-delete never passes an entry neither acked nor dropped.
    Cursor,
    /// The dispatcher's structures agree with the simulator's reference model.
    Model,
    /// No message whose ack the broker accepted (a batch index included, a crash's lost acks
    /// excepted) is sent to a consumer again without being marked acked.
    Acked,
    /// No delayed message is sent before its deliver-at time (scenarios with delayed messages).
    Early,
    /// The scenario's `expect` lines hold.
    Expect,
}

impl Invariant {
    /// The short name in the table.
    pub fn short(self) -> &'static str {
        match self {
            Invariant::Order => "order",
            Invariant::Loss => "loss",
            Invariant::Stall => "stall",
            Invariant::Cursor => "cursor",
            Invariant::Model => "model",
            Invariant::Acked => "acked",
            Invariant::Early => "early",
            Invariant::Expect => "expect",
        }
    }

    /// What it means, for the legend under the table.
    pub fn meaning(self) -> &'static str {
        match self {
            Invariant::Order => "per-key order",
            Invariant::Loss => "no loss",
            Invariant::Stall => "no stall",
            Invariant::Cursor => "cursor never passes an unacked entry",
            Invariant::Model => "model agreement",
            Invariant::Acked => "acked messages never sent again unmarked",
            Invariant::Early => "no delayed message sent before its time",
            Invariant::Expect => "the scenario's expect lines",
        }
    }
}

/// Where a run ran: what it checks and how it is reproduced depend on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SimRuntime {
    /// The deterministic world: the dispatcher crate alone (`--runtime sim`).
    World,
    /// The dispatcher's threaded runtime (`--runtime threads`).
    Threads,
    /// The broker's core, `broker::stepped` (`--runtime broker`, the default).
    #[default]
    Broker,
}

impl SimRuntime {
    /// The name `--runtime` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            SimRuntime::World => "sim",
            SimRuntime::Threads => "threads",
            SimRuntime::Broker => "broker",
        }
    }

    /// The flag a command line needs to pick it: ` --runtime NAME`, or nothing for the default.
    pub fn flag(self) -> String {
        match self {
            SimRuntime::Broker => String::new(),
            other => format!(" --runtime {}", other.as_str()),
        }
    }
}

/// The invariants a run of `s` checks: on the deterministic world and through the broker every
/// one (per-key order on Key_Shared only; `early` when the scenario has delayed messages;
/// `expect` when it has such lines); on the threaded runtime per-key order, no loss, no stall
/// and the `expect` lines, as the threaded run checks them from its event log.
pub fn invariants_checked(s: &Scenario, runtime: SimRuntime) -> Vec<Invariant> {
    let mut v = Vec::new();
    if s.config.sub != SubKind::Shared {
        v.push(Invariant::Order);
    }
    v.push(Invariant::Loss);
    v.push(Invariant::Stall);
    if runtime != SimRuntime::Threads {
        v.push(Invariant::Cursor);
        v.push(Invariant::Model);
        v.push(Invariant::Acked);
        if s.has_delayed() {
            v.push(Invariant::Early);
        }
    }
    if !s.expects.is_empty() {
        v.push(Invariant::Expect);
    }
    v
}

/// Totals of one scenario over its seeds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Seeds run.
    pub seeds: u64,
    /// Messages published, summed over seeds.
    pub messages: u64,
    /// Distinct keys, the largest of any seed.
    pub keys: u64,
    /// Faults, summed over seeds.
    pub faults: u64,
    /// Violations, summed over seeds.
    pub violations: u64,
    /// Wall time spent, seconds (measured by the caller).
    pub wall_secs: f64,
    /// The invariants its runs checked (empty: the table leaves the column out).
    pub checked: Vec<Invariant>,
}

impl Summary {
    /// Groups results by scenario, in first-seen order. `walls[i]` is the wall time of
    /// `results[i]` in seconds.
    pub fn group(results: &[RunResult], walls: &[f64]) -> Vec<Summary> {
        let mut out: Vec<Summary> = Vec::new();
        for (i, r) in results.iter().enumerate() {
            let s = match out.iter_mut().position(|s| s.scenario == r.scenario) {
                Some(j) => &mut out[j],
                None => {
                    out.push(Summary {
                        scenario: r.scenario.clone(),
                        ..Summary::default()
                    });
                    let n = out.len() - 1;
                    &mut out[n]
                }
            };
            s.seeds += 1;
            s.messages += r.messages;
            s.keys = s.keys.max(r.keys);
            s.faults += r.faults;
            s.violations += r.violations.len() as u64;
            s.wall_secs += walls.get(i).copied().unwrap_or(0.0);
        }
        out
    }

    /// Fills in [`checked`](Self::checked) of every row from its scenario in `scenarios`.
    pub fn annotate(rows: &mut [Summary], scenarios: &[Scenario], runtime: SimRuntime) {
        for r in rows {
            if let Some(s) = scenarios.iter().find(|s| s.name == r.scenario) {
                r.checked = invariants_checked(s, runtime);
            }
        }
    }

    /// Simulated messages per wall second.
    pub fn rate(&self) -> f64 {
        if self.wall_secs > 0.0 {
            self.messages as f64 / self.wall_secs
        } else {
            0.0
        }
    }
}

/// The human summary table. `with_rate: false` leaves out the wall-clock column (for
/// snapshots). When a row says what it [`checked`](Summary::checked), a `checked` column and a
/// legend naming each invariant follow.
pub fn summary_table(rows: &[Summary], with_rate: bool) -> String {
    let mut s = String::new();
    let with_checked = rows.iter().any(|r| !r.checked.is_empty());
    // The name column fits the longest name (a scenario given by path can be long).
    let w = rows
        .iter()
        .map(|r| r.scenario.chars().count())
        .max()
        .unwrap_or(0)
        .max(24);
    let _ = write!(
        s,
        "{:<w$} {:>5} {:>9} {:>5} {:>6} {:>10}",
        "scenario", "seeds", "messages", "keys", "faults", "violations"
    );
    if with_rate {
        let _ = write!(s, " {:>12}", "msgs/wall-s");
    }
    if with_checked {
        s.push_str("  checked");
    }
    s.push('\n');
    let mut total = Summary {
        scenario: "total".into(),
        ..Summary::default()
    };
    for r in rows {
        let _ = write!(
            s,
            "{:<w$} {:>5} {:>9} {:>5} {:>6} {:>10}",
            r.scenario, r.seeds, r.messages, r.keys, r.faults, r.violations
        );
        if with_rate {
            let _ = write!(s, " {:>12.0}", r.rate());
        }
        if with_checked {
            let names: Vec<&str> = r.checked.iter().map(|i| i.short()).collect();
            let _ = write!(s, "  {}", names.join(","));
        }
        s.push('\n');
        total.seeds += r.seeds;
        total.messages += r.messages;
        total.keys = total.keys.max(r.keys);
        total.faults += r.faults;
        total.violations += r.violations;
        total.wall_secs += r.wall_secs;
    }
    let _ = write!(
        s,
        "{:<w$} {:>5} {:>9} {:>5} {:>6} {:>10}",
        total.scenario, total.seeds, total.messages, total.keys, total.faults, total.violations
    );
    if with_rate {
        let _ = write!(s, " {:>12.0}", total.rate());
    }
    s.push('\n');
    if with_checked {
        let mut seen: Vec<Invariant> = rows.iter().flat_map(|r| r.checked.clone()).collect();
        seen.sort();
        seen.dedup();
        let legend: Vec<String> = seen
            .iter()
            .map(|i| format!("{} = {}", i.short(), i.meaning()))
            .collect();
        let _ = writeln!(s, "checked: {}", legend.join("; "));
    }
    s
}

/// How [`violation_report`] prints.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReportStyle {
    /// The legacy switch of the runs (goes into repro lines).
    pub legacy: Option<Legacy>,
    /// Print every violation in full, not only the first.
    pub all: bool,
    /// Where the runs ran.
    pub runtime: SimRuntime,
}

/// `1-3 7 9-12`: sorted seeds with runs of consecutive seeds collapsed, at most `max` items.
pub fn seed_ranges(seeds: &[u64], max: usize) -> String {
    let mut v = seeds.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut items: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        items.push(if j > i {
            format!("{}-{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    if items.len() > max {
        let more = items.len() - max;
        items.truncate(max);
        items.push(format!("… ({more} more)"));
    }
    items.join(" ")
}

/// The command that reruns `r` (with `--runtime` when it did not run through the broker).
pub fn repro_line(r: &RunResult, style: &ReportStyle) -> String {
    let base = crate::sim::repro_command(&r.scenario, r.seed, style.legacy);
    format!("{base}{}", style.runtime.flag())
}

fn full_violation(
    out: &mut String,
    r: &RunResult,
    v: &Violation,
    scenarios: &[Scenario],
    style: &ReportStyle,
    with_tail: bool,
) {
    let rt = style.runtime.as_str();
    let _ = writeln!(
        out,
        "VIOLATION [{} seed={} runtime={rt}] {v}",
        r.scenario, r.seed
    );
    if v.kind == ViolationKind::Expectation {
        let line = scenarios
            .iter()
            .find(|s| s.name == r.scenario)
            .and_then(|s| s.expect_line_of(&v.detail));
        if let Some((n, text)) = line {
            let _ = writeln!(out, "  failed expectation: line {n}: {text}");
        }
    }
    let note = if style.runtime == SimRuntime::Threads {
        "   (the workload; the threads decide the interleaving)"
    } else {
        ""
    };
    let _ = writeln!(out, "  reproduce: {}{note}", repro_line(r, style));
    if with_tail && !r.log_tail.is_empty() {
        out.push_str("  last events before it:\n");
        let from = r.log_tail.len().saturating_sub(15);
        for l in &r.log_tail[from..] {
            let _ = writeln!(out, "    {l}");
        }
    }
}

/// The violations of `results`, grouped: the first in full (its repro line, the `expect` line
/// of a failed expectation, the last events), then one line per violation kind with how many
/// more there are and in which scenarios and seeds. `style.all` prints every violation in full
/// instead. Empty when there is none.
pub fn violation_report(
    results: &[RunResult],
    scenarios: &[Scenario],
    style: &ReportStyle,
) -> String {
    let mut out = String::new();
    let all: Vec<(&RunResult, &Violation)> = results
        .iter()
        .flat_map(|r| r.violations.iter().map(move |v| (r, v)))
        .collect();
    let Some(&(r0, v0)) = all.first() else {
        return out;
    };
    if style.all {
        for (i, &(r, v)) in all.iter().enumerate() {
            // A run's last events once, after its last violation.
            let same_run_next = all
                .get(i + 1)
                .is_some_and(|(n, _)| n.scenario == r.scenario && n.seed == r.seed);
            full_violation(&mut out, r, v, scenarios, style, !same_run_next);
        }
        return out;
    }
    full_violation(&mut out, r0, v0, scenarios, style, true);
    let rest = &all[1..];
    if rest.is_empty() {
        return out;
    }
    // kind → (count, scenario in first-seen order → seeds).
    type PerScenario = Vec<(String, Vec<u64>)>;
    let mut by_kind: BTreeMap<ViolationKind, (usize, PerScenario)> = BTreeMap::new();
    for &(r, v) in rest {
        let e = by_kind.entry(v.kind).or_default();
        e.0 += 1;
        match e.1.iter_mut().find(|(s, _)| *s == r.scenario) {
            Some((_, seeds)) => seeds.push(r.seed),
            None => e.1.push((r.scenario.clone(), vec![r.seed])),
        }
    }
    let _ = writeln!(
        out,
        "{} more violation(s), by kind (--all-violations prints each in full):",
        rest.len()
    );
    for (kind, (n, per)) in by_kind {
        let places: Vec<String> = per
            .iter()
            .map(|(s, seeds)| format!("{s} seeds {}", seed_ranges(seeds, 8)))
            .collect();
        let _ = writeln!(out, "  {:<13} {n:>5}  {}", kind.as_str(), places.join("; "));
    }
    out
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The JSON report: every run with its counts, event-log hash and violations (each with its
/// repro command), plus the per-scenario summary.
pub fn json_report(
    results: &[RunResult],
    walls: &[f64],
    legacy: Option<&str>,
    repro: impl Fn(&RunResult) -> String,
) -> String {
    let mut s = String::from("{\n");
    let _ = writeln!(
        s,
        "  \"legacy\": {},",
        legacy.map(esc).unwrap_or_else(|| "null".into())
    );
    s.push_str("  \"summary\": [\n");
    let rows = Summary::group(results, walls);
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            s,
            "    {{\"scenario\": {}, \"seeds\": {}, \"messages\": {}, \"keys\": {}, \"faults\": {}, \"violations\": {}, \"wall_secs\": {:.3}, \"messages_per_wall_sec\": {:.0}}}",
            esc(&r.scenario), r.seeds, r.messages, r.keys, r.faults, r.violations, r.wall_secs, r.rate()
        );
        s.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
    }
    s.push_str("  ],\n  \"runs\": [\n");
    for (i, r) in results.iter().enumerate() {
        let _ = write!(
            s,
            "    {{\"scenario\": {}, \"seed\": {}, \"messages\": {}, \"entries\": {}, \"keys\": {}, \"faults\": {}, \"events\": {}, \"sim_time_ms\": {}, \"event_log_hash\": \"{:016x}\", \"wall_secs\": {:.3}, \"violations\": [",
            esc(&r.scenario), r.seed, r.messages, r.entries, r.keys, r.faults, r.events, r.sim_time, r.log_hash,
            walls.get(i).copied().unwrap_or(0.0)
        );
        for (j, v) in r.violations.iter().enumerate() {
            let _ = write!(
                s,
                "{{\"kind\": {}, \"at_ms\": {}, \"key\": {}, \"positions\": [{}], \"consumers\": [{}], \"detail\": {}, \"reproduce\": {}}}",
                esc(v.kind.as_str()),
                v.at,
                v.key.as_deref().map(esc).unwrap_or_else(|| "null".into()),
                v.positions.iter().map(|p| esc(p)).collect::<Vec<_>>().join(", "),
                v.consumers.iter().map(|c| esc(c)).collect::<Vec<_>>().join(", "),
                esc(&v.detail),
                esc(&repro(r))
            );
            if j + 1 < r.violations.len() {
                s.push_str(", ");
            }
        }
        s.push_str("]}");
        s.push_str(if i + 1 < results.len() { ",\n" } else { "\n" });
    }
    s.push_str("  ]\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_strings() {
        assert_eq!(esc("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }

    #[test]
    fn table_has_a_total_row_and_a_legend() {
        let rows = vec![Summary {
            scenario: "x".into(),
            seeds: 2,
            messages: 10,
            keys: 3,
            faults: 1,
            violations: 0,
            wall_secs: 0.5,
            checked: vec![Invariant::Loss, Invariant::Stall],
        }];
        let t = summary_table(&rows, true);
        assert!(t.lines().rev().nth(1).unwrap().starts_with("total"), "{t}");
        assert!(t.contains("20"), "{t}"); // 10 messages / 0.5 s
        assert!(t.contains("  loss,stall\n"), "{t}");
        assert!(
            t.ends_with("checked: loss = no loss; stall = no stall\n"),
            "{t}"
        );
    }

    #[test]
    fn seeds_collapse_into_ranges() {
        assert_eq!(seed_ranges(&[5, 1, 2, 3, 9, 10], 8), "1-3 5 9-10");
        assert_eq!(seed_ranges(&[1, 3, 5, 7], 2), "1 3 … (2 more)");
    }
}
