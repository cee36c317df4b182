//! The simulator's default mix over a small seed range: zero violations, and the same seed twice
//! gives the same event log.

use tests::sim::{default_mix, repro_command, run_scenario, RunOptions};

#[test]
fn default_mix_smoke_seeds_have_no_violations() {
    for s in default_mix() {
        for seed in 1..=2 {
            let r = run_scenario(
                &s,
                &RunOptions {
                    seed,
                    ..RunOptions::default()
                },
            )
            .unwrap_or_else(|e| panic!("{}: {e}", s.name));
            assert!(
                r.violations.is_empty(),
                "{}\nreproduce: {}\nlast events:\n{}",
                r.violations[0],
                repro_command(&s.name, seed, None),
                r.log_tail.join("\n")
            );
            assert!(r.messages > 0, "{} published nothing", s.name);
        }
    }
}

#[test]
fn same_seed_same_event_log_different_seed_different_log() {
    let s = tests::sim::builtin("mix-key-shared").expect("shipped");
    let run = |seed| {
        run_scenario(
            &s,
            &RunOptions {
                seed,
                keep_log: true,
                ..RunOptions::default()
            },
        )
        .expect("runs")
    };
    let (a, b, c) = (run(5), run(5), run(6));
    assert_eq!(a.log_hash, b.log_hash);
    assert_eq!(a.log, b.log, "the same seed must replay byte for byte");
    assert_ne!(a.log_hash, c.log_hash, "another seed must give another run");
}
