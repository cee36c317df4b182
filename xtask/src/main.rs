//! `cargo xtask`: the project's automation, one file per subcommand.
//!
//! * `ci`: everything CI checks (fmt, clippy, tests with snapshots locked, a quick loom run, tidy).
//! * `loom [crate] [--preemptions N]`: the full loom models in release mode.
//! * `bench [ids…] [--quick] [--return-memory]`: the benchmark table and
//!   `target/bench/results.json`.
//! * `sim [args…]`: the deterministic simulator.
//! * `tidy`: repository hygiene checks alone.
//! * `interop [--suite NAME[,NAME…]] [--keep-logs] [python scenario…]`: the broker against the stock
//!   clients, one suite per client family and version (tests/interop).
//! * `fuzz [TARGET…] [--time S] [--list] [--ci]`: coverage-guided fuzzing of the byte parsers
//!   (fuzz/).
//!
//! * `deps`: the dependency policy of `deny.toml` (licences, one version of each crate, banned
//!   crates, versioned dependencies of published crates).
//! * `versus-pulsar [--pulsar 5.0.1|4.0.7] [--only seeds]`: Apache Pulsar standalone and our
//!   broker side by side, the same Java programs against both (tests/versus); not in `ci`.
//! * `crates`: each published crate packaged and verified (`cargo package`), and its docs built
//!   with warnings denied.
//!
//! Every subcommand prints each command it runs.

mod bench;
mod ci;
mod cmd;
mod crates;
mod deps;
mod fuzz;
mod interop;
mod loom;
mod sim;
mod tidy;
mod versus;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let sub = args.next().unwrap_or_else(|| "help".into());
    let rest: Vec<String> = args.collect();
    std::env::set_current_dir(cmd::project_root())?;
    match sub.as_str() {
        "ci" => ci::run(&rest),
        "loom" => loom::run(&rest),
        "bench" => bench::run(&rest),
        "sim" => sim::run(&rest),
        "tidy" => tidy::run(),
        "interop" => interop::run(&rest),
        "fuzz" => fuzz::run(&rest),
        "deps" => deps::run(),
        "crates" => crates::run(),
        "versus-pulsar" => versus::run(&rest),
        "help" | "--help" | "-h" => {
            println!("usage: cargo xtask <ci | loom [crate] [--preemptions N] | bench [ids…] [--quick] [--return-memory] | sim [args…] | tidy | interop [--suite NAME[,NAME…]] [--keep-logs] [python scenario…] | fuzz [TARGET…] [--time S] [--list] [--ci] | deps | crates | versus-pulsar [--pulsar VERSION] [--only seeds]>");
            Ok(())
        }
        other => anyhow::bail!("unknown xtask subcommand `{other}` (try `cargo xtask help`)"),
    }
}
