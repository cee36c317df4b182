//! Benchmark harness and workload registry for `cargo xtask bench`.
//!
//! A [`Workload`] is one row of the table: it names its id, unit and Pulsar baseline and provides
//! a `round` closure that runs the workload once and returns the figure for that round (for
//! example ns/op). The harness runs warm-up rounds, then measured rounds, and reports the median,
//! min and max. Workloads live one area per file and are listed in [`all`].
//!
//! Benchmarks never assert times; correctness checks inside a workload (such as W5b's exact
//! count of blocked calls) return an error instead, which fails the run.

use std::fmt::Write as _;

pub mod broker;
pub mod chunk_assignor;
pub mod client;
pub mod cursor;
pub mod delayed;
pub mod dispatcher;
pub mod draining_hashes;
pub mod floors;
pub mod pending_acks;
pub mod rng;
pub mod selectors;

/// How a workload's figure compares with its baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Smaller is better (time per op, bytes per entry).
    Lower,
    /// Larger is better (throughput).
    Higher,
}

/// One benchmark row.
pub struct Workload {
    /// Workload id from docs/BENCHMARKS.md, e.g. `W1`.
    pub id: &'static str,
    /// Unit of the figure a round returns, e.g. `ns/op`.
    pub unit: &'static str,
    /// Pulsar (Java) median from docs/BENCHMARKS.md, when there is one.
    pub baseline: Option<f64>,
    /// The goal from docs/BENCHMARKS.md, when there is one.
    pub goal: Option<f64>,
    /// Whether lower or higher figures are better.
    pub better: Better,
    /// Runs the workload once and returns its figure, or an error if a built-in check failed.
    pub round: Box<dyn FnMut() -> Result<f64, String>>,
}

impl Workload {
    /// A lower-is-better workload.
    pub fn lower(
        id: &'static str,
        unit: &'static str,
        baseline: Option<f64>,
        goal: Option<f64>,
        round: impl FnMut() -> Result<f64, String> + 'static,
    ) -> Self {
        Self::new(id, unit, baseline, goal, Better::Lower, round)
    }

    /// A higher-is-better workload (throughput).
    pub fn higher(
        id: &'static str,
        unit: &'static str,
        baseline: Option<f64>,
        goal: Option<f64>,
        round: impl FnMut() -> Result<f64, String> + 'static,
    ) -> Self {
        Self::new(id, unit, baseline, goal, Better::Higher, round)
    }

    fn new(
        id: &'static str,
        unit: &'static str,
        baseline: Option<f64>,
        goal: Option<f64>,
        better: Better,
        round: impl FnMut() -> Result<f64, String> + 'static,
    ) -> Self {
        Workload {
            id,
            unit,
            baseline,
            goal,
            better,
            round: Box::new(round),
        }
    }
}

/// Harness settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Measured rounds per workload.
    pub rounds: usize,
    /// Unmeasured warm-up rounds per workload.
    pub warmup: usize,
    /// Only run workloads whose id starts with one of these (all when empty).
    pub filter: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            rounds: 15,
            warmup: 3,
            filter: Vec::new(),
        }
    }
}

/// A measured row.
#[derive(Clone, Debug)]
pub struct Row {
    /// Workload id.
    pub id: &'static str,
    /// Unit of the figures.
    pub unit: &'static str,
    /// Median of the measured rounds.
    pub median: f64,
    /// Smallest round.
    pub min: f64,
    /// Largest round.
    pub max: f64,
    /// Pulsar baseline, if any.
    pub baseline: Option<f64>,
    /// Goal, if any.
    pub goal: Option<f64>,
    /// Whether lower is better.
    pub better: Better,
}

impl Row {
    /// `median / baseline`: below 1 means smaller than Pulsar's figure.
    pub fn ratio(&self) -> Option<f64> {
        self.baseline.map(|b| self.median / b)
    }

    /// Whether the median meets the goal.
    pub fn meets_goal(&self) -> Option<bool> {
        self.goal.map(|g| match self.better {
            Better::Lower => self.median <= g,
            Better::Higher => self.median >= g,
        })
    }
}

/// Every workload, in table order. Each area's file contributes its own rows.
pub fn all() -> Vec<Workload> {
    let mut w = Vec::new();
    // Areas register here, one line each (kept in workload-id order).
    w.extend(pending_acks::workloads());
    w.extend(draining_hashes::workloads());
    w.extend(selectors::workloads());
    w.extend(chunk_assignor::workloads());
    w.extend(cursor::workloads());
    w.extend(dispatcher::workloads());
    w.extend(delayed::workloads());
    w.extend(client::workloads());
    w.extend(broker::workloads());
    w.extend(floors::workloads());
    let _ = &mut w;
    w
}

/// Median of a slice (sorted in place).
pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Runs one workload under the settings.
pub fn measure(w: &mut Workload, s: &Settings) -> Result<Row, String> {
    for _ in 0..s.warmup {
        (w.round)().map_err(|e| format!("{}: {e}", w.id))?;
    }
    let mut xs = Vec::with_capacity(s.rounds.max(1));
    for _ in 0..s.rounds.max(1) {
        xs.push((w.round)().map_err(|e| format!("{}: {e}", w.id))?);
    }
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Ok(Row {
        id: w.id,
        unit: w.unit,
        median: median(&mut xs),
        min,
        max,
        baseline: w.baseline,
        goal: w.goal,
        better: w.better,
    })
}

fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The human table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<12} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}  goal",
        "id", "unit", "median", "min", "max", "pulsar", "ratio", "goal"
    );
    for r in rows {
        let base = r.baseline.map(fmt_num).unwrap_or_else(|| "-".into());
        let ratio = r
            .ratio()
            .map(|x| format!("{x:.3}"))
            .unwrap_or_else(|| "-".into());
        let goal = r.goal.map(fmt_num).unwrap_or_else(|| "-".into());
        let met = match r.meets_goal() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "",
        };
        let _ = writeln!(
            out,
            "{:<10} {:<12} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}  {met}",
            r.id,
            r.unit,
            fmt_num(r.median),
            fmt_num(r.min),
            fmt_num(r.max),
            base,
            ratio,
            goal
        );
    }
    out.push_str("ratio = median / Pulsar baseline (below 1: smaller than Pulsar's figure)\n");
    out
}

fn json_num(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v}"),
        _ => "null".into(),
    }
}

/// The JSON report: an array of `{ "id", "unit", "median", "min", "max", "baseline", "ratio" }`.
pub fn json(rows: &[Row]) -> String {
    let mut out = String::from("[\n");
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            out,
            "  {{ \"id\": \"{}\", \"unit\": \"{}\", \"median\": {}, \"min\": {}, \"max\": {}, \"baseline\": {}, \"ratio\": {}, \"goal\": {} }}",
            r.id,
            r.unit,
            json_num(Some(r.median)),
            json_num(Some(r.min)),
            json_num(Some(r.max)),
            json_num(r.baseline),
            json_num(r.ratio()),
            json_num(r.goal)
        );
        out.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
    }
    out.push_str("]\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn json_has_the_contract_fields() {
        let row = Row {
            id: "W1",
            unit: "ns/op",
            median: 10.0,
            min: 9.0,
            max: 12.0,
            baseline: Some(213.0),
            goal: Some(25.0),
            better: Better::Lower,
        };
        let j = json(&[row]);
        for f in [
            "\"id\"",
            "\"unit\"",
            "\"median\"",
            "\"min\"",
            "\"max\"",
            "\"baseline\"",
            "\"ratio\"",
        ] {
            assert!(j.contains(f), "{f} missing in {j}");
        }
    }
}
