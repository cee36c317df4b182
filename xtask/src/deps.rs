//! `cargo xtask deps`: the dependency policy of `deny.toml` checked over `cargo metadata`.
//!
//! `deny.toml` is in cargo-deny's format (`cargo deny check licenses bans` reads it); this check
//! applies the same rules without installing cargo-deny (a three-minute build on the CI machine):
//!
//! * `[licenses] allow`: every package's SPDX `license` expression must be satisfied by the
//!   allowed licences (a package with only a `license-file` fails: say its licence in the policy
//!   by adding it to the graph's allow list after reading the file);
//! * `[bans] multiple-versions = "deny"`: one version of each crate, less the `skip` entries
//!   (`name@version`); a `skip` entry that matches nothing fails, so the list cannot go stale;
//! * `[bans] deny`: crates that must not be in the graph;
//! * `[bans] wildcards = "deny"`: a publishable workspace crate's dependencies carry version
//!   requirements (with `allow-wildcard-paths`, unpublished crates may have bare path ones).
//!
//! A key it does not check is an error, so the policy says nothing this check ignores.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use serde_json::Value;

use crate::cmd::{cargo, project_root};

/// The rules read from `deny.toml`.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    all_features: bool,
    allow: BTreeSet<String>,
    deny_duplicates: bool,
    deny_wildcards: bool,
    allow_wildcard_paths: bool,
    /// `name@version` entries exempt from the duplicate rule.
    skip: BTreeSet<String>,
    /// Crate names that must not appear.
    banned: BTreeSet<String>,
}

/// The keys this check understands, per table.
const KNOWN: &[(&str, &[&str])] = &[
    ("graph", &["all-features"]),
    ("licenses", &["allow"]),
    (
        "bans",
        &[
            "multiple-versions",
            "wildcards",
            "allow-wildcard-paths",
            "skip",
            "deny",
        ],
    ),
];

impl Policy {
    /// Parses the policy; any table or key outside [`KNOWN`] is an error.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Policy> {
        let doc: toml::Table = toml::from_str(text).context("deny.toml is not valid TOML")?;
        for (table, value) in &doc {
            let keys = KNOWN
                .iter()
                .find(|(t, _)| t == table)
                .map(|(_, k)| *k)
                .with_context(|| {
                    format!("deny.toml: table [{table}] is not checked by xtask deps")
                })?;
            let value = value
                .as_table()
                .with_context(|| format!("deny.toml: [{table}] is not a table"))?;
            if let Some(k) = value.keys().find(|k| !keys.contains(&k.as_str())) {
                anyhow::bail!("deny.toml: [{table}] {k} is not checked by xtask deps");
            }
        }
        let get = |table: &str, key: &str| doc.get(table).and_then(|t| t.get(key));
        let flag = |table: &str, key: &str| get(table, key).and_then(toml::Value::as_bool);
        let deny = |key: &str| match get("bans", key).and_then(toml::Value::as_str) {
            None | Some("allow") | Some("warn") => Ok(false),
            Some("deny") => Ok(true),
            Some(other) => anyhow::bail!("deny.toml: [bans] {key} = {other:?}"),
        };
        Ok(Policy {
            all_features: flag("graph", "all-features").unwrap_or(false),
            allow: strings(get("licenses", "allow"), None)?,
            deny_duplicates: deny("multiple-versions")?,
            deny_wildcards: deny("wildcards")?,
            allow_wildcard_paths: flag("bans", "allow-wildcard-paths").unwrap_or(false),
            skip: strings(get("bans", "skip"), Some("crate"))?,
            banned: strings(get("bans", "deny"), Some("crate"))?,
        })
    }
}

/// An array of strings, or of tables whose `field` is the string (cargo-deny accepts both).
fn strings(v: Option<&toml::Value>, field: Option<&str>) -> anyhow::Result<BTreeSet<String>> {
    let Some(v) = v else {
        return Ok(BTreeSet::new());
    };
    let arr = v.as_array().context("deny.toml: expected an array")?;
    arr.iter()
        .map(|item| {
            let s = match (item, field) {
                (toml::Value::String(s), _) => Some(s.as_str()),
                (toml::Value::Table(t), Some(f)) => t.get(f).and_then(toml::Value::as_str),
                _ => None,
            };
            s.map(str::to_owned)
                .with_context(|| format!("deny.toml: unexpected entry {item:?}"))
        })
        .collect()
}

/// Every rule broken by the package graph `meta` (`cargo metadata --format-version 1` output).
pub(crate) fn check(policy: &Policy, meta: &Value) -> Vec<String> {
    let packages = meta["packages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut problems = Vec::new();
    let mut versions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().unwrap_or("?");
        let version = p["version"].as_str().unwrap_or("?");
        versions.entry(name).or_default().insert(version);
        if let Some(why) = licence_problem(policy, p["license"].as_str()) {
            problems.push(format!("licence: {name}@{version}: {why}"));
        }
        if policy.banned.contains(name) {
            problems.push(format!("banned: {name}@{version} is in the graph"));
        }
        let id = p["id"].as_str().unwrap_or("");
        if policy.deny_wildcards && members.contains(id) {
            problems.extend(wildcards(policy, p));
        }
    }
    if policy.deny_duplicates {
        problems.extend(duplicates(policy, &versions));
    }
    problems
}

/// Why `license` is not allowed, or `None` when the allowed licences satisfy it.
fn licence_problem(policy: &Policy, license: Option<&str>) -> Option<String> {
    let Some(text) = license else {
        return Some("no SPDX `license` expression".into());
    };
    let expr = match spdx::Expression::parse_mode(text, spdx::ParseMode::LAX) {
        Ok(e) => e,
        Err(e) => return Some(format!("`{text}` is not an SPDX expression ({e})")),
    };
    let ok = expr.evaluate(|req| match &req.license {
        spdx::LicenseItem::Spdx { id, .. } => policy.allow.contains(id.name),
        spdx::LicenseItem::Other(_) => false,
    });
    (!ok).then(|| format!("`{text}` is not satisfied by the allowed licences"))
}

/// The duplicate-version rule, and `skip` entries that match nothing.
fn duplicates(policy: &Policy, versions: &BTreeMap<&str, BTreeSet<&str>>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (name, vs) in versions {
        let kept: Vec<&&str> = vs
            .iter()
            .filter(|v| {
                let key = format!("{name}@{v}");
                let skipped = policy.skip.contains(&key);
                if skipped {
                    used.insert(key);
                }
                !skipped
            })
            .collect();
        if kept.len() > 1 {
            let list: Vec<&str> = kept.iter().map(|v| **v).collect();
            problems.push(format!(
                "duplicate: {name} in versions {} (skip all but one in deny.toml with a reason, or align them)",
                list.join(", ")
            ));
        }
    }
    for stale in policy.skip.difference(&used) {
        problems.push(format!("stale skip: {stale} is not in the graph"));
    }
    problems
}

/// A publishable member's dependencies without a version requirement.
fn wildcards(policy: &Policy, package: &Value) -> Vec<String> {
    // `publish: []` (publish = false) marks an unpublished crate; `null` is publishable.
    let private = package["publish"].as_array().is_some_and(Vec::is_empty);
    if private && policy.allow_wildcard_paths {
        return Vec::new();
    }
    let name = package["name"].as_str().unwrap_or("?");
    package["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["req"].as_str() == Some("*"))
        .map(|d| {
            format!(
                "wildcard: {name} depends on {} without a version requirement",
                d["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// `cargo xtask deps`.
pub(crate) fn run() -> anyhow::Result<()> {
    let root = project_root();
    let text = std::fs::read_to_string(root.join("deny.toml")).context("reading deny.toml")?;
    let policy = Policy::parse(&text)?;
    let mut c = cargo();
    c.args(["metadata", "--format-version", "1", "--locked"]);
    if policy.all_features {
        c.arg("--all-features");
    }
    println!("$ cargo metadata --format-version 1 --locked --all-features (deny.toml's graph)");
    let out = c.output().context("running cargo metadata")?;
    anyhow::ensure!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).context("cargo metadata's JSON")?;
    let problems = check(&policy, &meta);
    let n = meta["packages"].as_array().map_or(0, Vec::len);
    if problems.is_empty() {
        println!("deps: {n} packages, licences and bans ok (deny.toml)");
        return Ok(());
    }
    for p in &problems {
        println!("deps: {p}");
    }
    anyhow::bail!("deps: {} problem(s) in {n} packages", problems.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
[graph]
all-features = true
[licenses]
allow = ["MIT", "Apache-2.0"]
[bans]
multiple-versions = "deny"
wildcards = "deny"
allow-wildcard-paths = true
skip = [{ crate = "syn@1.0.0", reason = "old" }]
deny = [{ crate = "openssl-sys", reason = "rustls" }]
"#;

    fn pkg(name: &str, version: &str, license: &str) -> Value {
        serde_json::json!({"name": name, "version": version, "license": license,
            "id": format!("{name} {version}"), "publish": null, "dependencies": []})
    }

    fn meta(packages: Vec<Value>, members: &[&str]) -> Value {
        serde_json::json!({"packages": packages, "workspace_members": members})
    }

    #[test]
    fn a_clean_graph_passes() {
        let p = Policy::parse(POLICY).unwrap();
        let m = meta(
            vec![
                pkg("a", "1.0.0", "MIT OR Apache-2.0"),
                pkg("syn", "1.0.0", "MIT/Apache-2.0"),
                pkg("syn", "2.0.0", "MIT"),
            ],
            &[],
        );
        assert_eq!(check(&p, &m), Vec::<String>::new());
    }

    #[test]
    fn each_rule_fails_when_broken() {
        let p = Policy::parse(POLICY).unwrap();
        let mut member = pkg("ours", "0.1.0", "Apache-2.0");
        member["dependencies"] = serde_json::json!([{"name": "a", "req": "*"}]);
        let m = meta(
            vec![
                pkg("gpl", "1.0.0", "GPL-3.0-only"),
                pkg("both", "1.0.0", "(MIT OR Apache-2.0) AND LGPL-2.1-only"),
                pkg("a", "1.0.0", "MIT"),
                pkg("a", "2.0.0", "MIT"),
                pkg("openssl-sys", "0.9.0", "MIT"),
                member,
            ],
            &["ours 0.1.0"],
        );
        let problems = check(&p, &m);
        let has = |s: &str| problems.iter().any(|p| p.starts_with(s));
        assert!(has("licence: gpl@1.0.0"), "{problems:#?}");
        assert!(has("licence: both@1.0.0"), "{problems:#?}");
        assert!(
            has("duplicate: a in versions 1.0.0, 2.0.0"),
            "{problems:#?}"
        );
        assert!(has("banned: openssl-sys@0.9.0"), "{problems:#?}");
        assert!(has("wildcard: ours depends on a"), "{problems:#?}");
        assert!(has("stale skip: syn@1.0.0"), "{problems:#?}");
        assert_eq!(problems.len(), 6, "{problems:#?}");
    }

    #[test]
    fn an_unpublished_crate_may_use_bare_paths_and_unknown_keys_are_refused() {
        let p = Policy::parse(POLICY).unwrap();
        let mut private = pkg("harness", "0.1.0", "Apache-2.0");
        private["publish"] = serde_json::json!([]);
        private["dependencies"] = serde_json::json!([{"name": "ours", "req": "*"}]);
        let m = meta(
            vec![private, pkg("syn", "1.0.0", "MIT")],
            &["harness 0.1.0"],
        );
        assert_eq!(check(&p, &m), Vec::<String>::new());

        let err = Policy::parse("[advisories]\nignore = []\n").unwrap_err();
        assert!(err.to_string().contains("[advisories]"), "{err}");
        let err = Policy::parse("[licenses]\nallow = []\nexceptions = []\n").unwrap_err();
        assert!(err.to_string().contains("exceptions"), "{err}");
    }
}
