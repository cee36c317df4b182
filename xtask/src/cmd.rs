//! Running commands: print each one, then run it and fail on a non-zero exit.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root (the parent of `xtask/`).
pub(crate) fn project_root() -> PathBuf {
    let dir = env!("CARGO_MANIFEST_DIR");
    PathBuf::from(dir)
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A `cargo` command using the same cargo that runs xtask.
pub(crate) fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Prints `$ <command>` (with the environment it sets) and runs it to completion.
pub(crate) fn sh(mut c: Command) -> anyhow::Result<()> {
    let envs: Vec<String> = c
        .get_envs()
        .filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), v.to_string_lossy())))
        .collect();
    let args: Vec<String> = c
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let prog = c.get_program().to_string_lossy().into_owned();
    let prog = if prog.ends_with("cargo") {
        "cargo".to_string()
    } else {
        prog
    };
    let prefix = if envs.is_empty() {
        String::new()
    } else {
        format!("{} ", envs.join(" "))
    };
    println!("$ {prefix}{prog} {}", args.join(" "));
    let status = c.status()?;
    if !status.success() {
        anyhow::bail!("command failed ({status}): {prog} {}", args.join(" "));
    }
    Ok(())
}
