//! The summary table and the JSON report.

use std::fmt::Write as _;

use crate::sim::world::RunResult;

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
/// snapshots).
pub fn summary_table(rows: &[Summary], with_rate: bool) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<24} {:>5} {:>9} {:>5} {:>6} {:>10}",
        "scenario", "seeds", "messages", "keys", "faults", "violations"
    );
    if with_rate {
        let _ = write!(s, " {:>12}", "msgs/wall-s");
    }
    s.push('\n');
    let mut total = Summary {
        scenario: "total".into(),
        ..Summary::default()
    };
    for r in rows {
        let _ = write!(
            s,
            "{:<24} {:>5} {:>9} {:>5} {:>6} {:>10}",
            r.scenario, r.seeds, r.messages, r.keys, r.faults, r.violations
        );
        if with_rate {
            let _ = write!(s, " {:>12.0}", r.rate());
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
        "{:<24} {:>5} {:>9} {:>5} {:>6} {:>10}",
        total.scenario, total.seeds, total.messages, total.keys, total.faults, total.violations
    );
    if with_rate {
        let _ = write!(s, " {:>12.0}", total.rate());
    }
    s.push('\n');
    s
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
    fn table_has_a_total_row() {
        let rows = vec![Summary {
            scenario: "x".into(),
            seeds: 2,
            messages: 10,
            keys: 3,
            faults: 1,
            violations: 0,
            wall_secs: 0.5,
        }];
        let t = summary_table(&rows, true);
        assert!(t.lines().last().unwrap().starts_with("total"));
        assert!(t.contains("20"), "{t}"); // 10 messages / 0.5 s
    }
}
