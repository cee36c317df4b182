//! Every shipped scenario passes (with its `expect` lines), a scenario whose expectation is
//! wrong fails, and a fixed-seed summary of the default mix is a snapshot (counts that depend
//! only on the workload and fault streams, so a change in them shows as a diff).

use tests::sim::{
    builtin_names, default_mix, load, run_scenario, summary_table, RunOptions, Scenario, Summary,
    ViolationKind,
};

#[test]
fn every_shipped_scenario_passes() {
    for name in builtin_names() {
        let s = load(name).unwrap_or_else(|e| panic!("{e}"));
        let r = run_scenario(
            &s,
            &RunOptions {
                seed: 1,
                ..RunOptions::default()
            },
        )
        .expect("runs");
        assert!(
            r.violations.is_empty(),
            "{name}: {}\n{}",
            r.violations[0],
            r.log_tail.join("\n")
        );
    }
}

#[test]
fn shipped_files_on_disk_match_the_compiled_in_ones() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .expect("scenario dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sim"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    on_disk.sort();
    let mut shipped: Vec<String> = builtin_names().into_iter().map(String::from).collect();
    shipped.sort();
    assert_eq!(on_disk, shipped, "add new .sim files to sim/library.rs");
}

#[test]
fn known_issue_scenarios_parse() {
    // tests/scenarios/known-issues/*.sim reproduce gaps between crates (docs/SIMULATOR.md);
    // they are expected to fail and are not in the default mix. There may be none open (the
    // directory keeps a README).
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/known-issues");
    for e in std::fs::read_dir(dir).expect("known-issues dir").flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "sim") {
            load(&p.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn a_wrong_expectation_is_reported() {
    // f01 with the opposite expectation: c1 would have to start K's entry 1:3, but K moved to c2.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/f01-join.sim"
    ))
    .expect("file")
    .replace("expect nostart c1 1:3", "expect start c1 1:3");
    let s = Scenario::parse("f01-wrong", &text).expect("parses");
    let r = run_scenario(
        &s,
        &RunOptions {
            seed: 1,
            ..RunOptions::default()
        },
    )
    .expect("runs");
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert_eq!(r.violations[0].kind, ViolationKind::Expectation);
}

#[test]
fn fixed_seed_summary() {
    let mut results = Vec::new();
    for s in default_mix() {
        results.push(
            run_scenario(
                &s,
                &RunOptions {
                    seed: 42,
                    ..RunOptions::default()
                },
            )
            .expect("runs"),
        );
    }
    let walls = vec![0.0; results.len()];
    let table = summary_table(&Summary::group(&results, &walls), false);
    insta::assert_snapshot!(table);
}
