//! Repository hygiene (rust-analyzer's tidy): a test, so `cargo test` runs it (the `tidy` test
//! at the bottom of this file); `cargo xtask tidy` runs the same checks alone.
//!
//! * no placeholder macros (todo, unimplemented) and no ignore / should_panic test attributes
//!   in our code;
//! * only `sync.rs` names `std::sync` or `loom` in the loom-checked crates;
//! * library code (`crates/*/src`, tests excluded) never reads the clock (`Instant::now`,
//!   `SystemTime::now`), spawns threads (`thread::spawn`, `thread::Builder`, `thread::scope`),
//!   owns channels (`crossbeam_channel`, `mpsc`) or installs a tracing subscriber — except the
//!   runtime shell, `crates/dispatcher/src/runtime.rs` and its `runtime/` files. Harness code (the `tests` package,
//!   `crates/*/tests`, unit-test modules, benches) and `xtask` may;
//! * the broker's core (all of `broker/src` but `shell/` and `main.rs`) owns no socket, thread,
//!   channel or clock; by what its code calls (imports expanded), it does no file IO, blocking
//!   wait or thread start outside the storage implementations, and its locks only shrink
//!   ([`core_io`]); its files stay under 600 lines and its functions under 80; no
//!   `Result<_, String>`; no circle among its modules (test code aside);
//! * every repository path a doc names exists, and `docs/BROKER.md` says what the broker does
//!   with every command of `PulsarApi.proto`;
//! * every crate's top doc is its README (`#![doc = include_str!("../README.md")]`, with a
//!   ```` ```rust ```` example), and the README and `.ci/run` keep the two set-up commands.

use std::fs;
use std::path::{Path, PathBuf};

mod core_io;

/// How a published crate's `lib.rs` starts: its README is the crate documentation.
const README_DOC: &str = "#![doc = include_str!(\"../README.md\")]";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Splits `"a" + "b"` so this file does not trip its own checks.
fn pat(parts: &[&str]) -> String {
    parts.concat()
}

/// The workspace root (this crate's parent directory), whatever the current directory.
fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

pub(crate) fn run() -> anyhow::Result<()> {
    println!("$ tidy (xtask/src/tidy.rs)");
    let (files, problems) = check(&root())?;
    if problems.is_empty() {
        println!("tidy: ok ({files} Rust files)");
        Ok(())
    } else {
        for p in &problems {
            eprintln!("tidy: {p}");
        }
        anyhow::bail!("tidy found {} problem(s)", problems.len())
    }
}

/// Files that may own threads, channels and the clock: the runtime shell, and the harness.
fn may_do_io(rel: &str) -> bool {
    rel == "crates/dispatcher/src/runtime.rs"
        || rel.starts_with("crates/dispatcher/src/runtime/")
        || rel.contains("/tests/")
        || rel.ends_with("/tests.rs")
        || rel.contains("/benches/")
}

/// Runs every check from `root`; returns the number of Rust files scanned and the problems.
fn check(root: &Path) -> anyhow::Result<(usize, Vec<String>)> {
    let mut problems = Vec::new();

    let mut files = Vec::new();
    for d in ["crates", "tests", "xtask", "fuzz", "broker"] {
        rust_files(&root.join(d), &mut files);
    }
    let rel = |f: &Path| {
        f.strip_prefix(root)
            .unwrap_or(f)
            .to_string_lossy()
            .replace('\\', "/")
    };
    let banned = [
        pat(&["todo", "!("]),
        pat(&["unimplemented", "!("]),
        pat(&["#[", "ignore"]),
        pat(&["#[", "should_panic"]),
    ];
    for f in files.iter().filter(|f| !f.ends_with("xtask/src/tidy.rs")) {
        let text = fs::read_to_string(f)?;
        for (i, line) in text.lines().enumerate() {
            for b in &banned {
                if line.contains(b.as_str()) {
                    problems.push(format!("{}:{}: `{b}` is not allowed", rel(f), i + 1));
                }
            }
        }
    }

    // Library code: no clock, threads, channels or subscribers outside the runtime shell.
    let lib_banned = [
        (pat(&["Instant", "::now"]), "the clock"),
        (pat(&["SystemTime", "::now"]), "the clock"),
        (pat(&["thread", "::spawn"]), "threads"),
        (pat(&["thread", "::Builder"]), "threads"),
        (pat(&["thread", "::scope"]), "threads"),
        (pat(&["crossbeam", "_channel"]), "channels"),
        (pat(&["mpsc", "::"]), "channels"),
        (pat(&["tracing", "_subscriber"]), "a tracing subscriber"),
    ];
    let mut lib_files = Vec::new();
    rust_files(&root.join("crates"), &mut lib_files);
    for f in &lib_files {
        let r = rel(f);
        if !r.contains("/src/") || may_do_io(&r) {
            continue;
        }
        let text = fs::read_to_string(f)?;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (b, what) in &lib_banned {
                if line.contains(b.as_str()) {
                    problems.push(format!(
                        "{r}:{}: library code must not use `{b}` ({what} belong to the runtime shell, crates/dispatcher/src/runtime.rs and runtime/; time is passed in)",
                        i + 1
                    ));
                }
            }
        }
    }

    problems.extend(broker_checks(root, &lib_banned)?);
    problems.extend(doc_paths(root));
    problems.extend(command_table(root));

    // Loom-checked crates: only src/sync.rs names the primitives.
    for c in ["pending-acks", "draining-hashes"] {
        let mut fs_ = Vec::new();
        rust_files(&root.join("crates").join(c).join("src"), &mut fs_);
        for f in fs_ {
            if f.ends_with("sync.rs") {
                continue;
            }
            let text = fs::read_to_string(&f)?;
            for (i, line) in text.lines().enumerate() {
                if line.contains(&pat(&["std::", "sync"])) || line.contains(&pat(&["loom", "::"])) {
                    problems.push(format!(
                        "{}:{}: import sync primitives from `crate::sync` so loom can check them",
                        rel(&f),
                        i + 1
                    ));
                }
            }
        }
    }

    // Every crate's top doc is its README (shipped in the package, shown on crates.io), and the
    // README has an example, which the include makes a doctest.
    for e in fs::read_dir(root.join("crates"))?.flatten() {
        let lib = e.path().join("src/lib.rs");
        if let Ok(text) = fs::read_to_string(&lib) {
            let readme = fs::read_to_string(e.path().join("README.md")).unwrap_or_default();
            problems.extend(crate_doc(&rel(&e.path()), &text, &readme));
        }
    }

    // The two set-up commands.
    let readme = fs::read_to_string(root.join("README.md")).unwrap_or_default();
    for c in ["cargo xtask ci", "cargo xtask sim"] {
        if !readme.contains(c) {
            problems.push(format!("README.md: must show `{c}`"));
        }
    }
    let ci = fs::read_to_string(root.join(".ci/run")).unwrap_or_default();
    if !ci.contains("cargo xtask ci") {
        problems.push(".ci/run: must run `cargo xtask ci`".into());
    }
    if !root.join("docs/ARCHITECTURE.md").exists() {
        problems.push("docs/ARCHITECTURE.md is missing".into());
    }

    // The fuzz targets: `cargo xtask fuzz`'s list, fuzz/fuzz_targets/ and the stored corpora.
    let mut on_disk: Vec<String> = fs::read_dir(root.join("fuzz/fuzz_targets"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.strip_suffix(".rs").map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    on_disk.sort();
    let mut listed: Vec<String> = crate::fuzz::TARGETS.iter().map(|t| t.to_string()).collect();
    listed.sort();
    if on_disk != listed {
        problems.push(format!(
            "fuzz/fuzz_targets has {on_disk:?} but xtask/src/fuzz.rs lists {listed:?}"
        ));
    }
    for t in crate::fuzz::TARGETS {
        let corpus = root.join("fuzz/corpus").join(t);
        if fs::read_dir(&corpus).map_or(true, |mut d| d.next().is_none()) {
            problems.push(format!(
                "fuzz/corpus/{t}: a fuzz target needs a stored corpus"
            ));
        }
    }

    Ok((files.len(), problems))
}

/// Paths docs name that are not in this repository: generated ones (under `target/`) and
/// upstream files.
const DOC_PATHS_ELSEWHERE: &[&str] = &["pulsar-common/src/main/proto/PulsarApi.proto"];

/// Every repository path a doc names (a backticked path with a file extension or a trailing
/// `/`, or a Markdown link) exists, relative to the doc, the root, a crate, or a package's
/// `src`. CHANGELOG.md is history and may name what is gone.
fn doc_paths(root: &Path) -> Vec<String> {
    let mut docs: Vec<PathBuf> = vec![root.join("README.md"), root.join("fuzz/README.md")];
    let mut bases: Vec<PathBuf> = [
        "",
        "broker",
        "broker/src",
        "tests",
        "tests/src",
        "xtask/src",
        "fuzz",
    ]
    .iter()
    .map(|b| root.join(b))
    .collect();
    for dir in ["docs", "crates", "tests/interop"] {
        for e in fs::read_dir(root.join(dir)).into_iter().flatten().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "md") {
                docs.push(p.clone());
            }
            if p.join("README.md").exists() {
                docs.push(p.join("README.md"));
            }
            if dir == "crates" {
                bases.push(p.join("src"));
                bases.push(p);
            }
        }
    }
    let looks_like_path = |t: &str| {
        let ext = t.rsplit_once('.').map(|(_, e)| e);
        t.contains('/')
            && !t.contains("://")
            && !t.starts_with("target/")
            && !DOC_PATHS_ELSEWHERE.contains(&t)
            && (t.ends_with('/')
                || ext.is_some_and(|e| {
                    [
                        "rs", "md", "toml", "py", "java", "go", "sim", "proto", "json", "sh", "xml",
                    ]
                    .contains(&e)
                }))
    };
    let mut problems = Vec::new();
    for doc in &docs {
        let Ok(text) = fs::read_to_string(doc) else {
            continue;
        };
        let here = doc.parent().unwrap_or(root);
        let mut names: Vec<&str> = Vec::new();
        for (i, piece) in text.split('`').enumerate() {
            if i % 2 == 1 && !piece.contains(char::is_whitespace) {
                names.push(piece);
            }
        }
        let mut rest = text.as_str();
        while let Some(k) = rest.find("](") {
            rest = &rest[k + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            names.push(rest[..end].split('#').next().unwrap_or(""));
        }
        for name in names.into_iter().filter(|n| looks_like_path(n)) {
            if name.contains(['<', '$', '{']) {
                continue; // a placeholder, not a path
            }
            // A glob names its directory.
            let name = match name.find('*') {
                Some(k) => &name[..name[..k].rfind('/').map_or(0, |s| s + 1)],
                None => name,
            };
            let found = std::iter::once(here.join(name))
                .chain(bases.iter().map(|b| b.join(name)))
                .any(|p| p.exists());
            if !found {
                let rel = doc.strip_prefix(root).unwrap_or(doc).display().to_string();
                problems.push(format!(
                    "{rel}: names `{name}`, which is not in the repository"
                ));
            }
        }
    }
    problems
}

/// The commands of `BaseCommand`'s `Type` enum in the vendored `PulsarApi.proto`.
fn proto_commands(proto: &str) -> Vec<String> {
    let Some(message) = proto.find("message BaseCommand {") else {
        return Vec::new();
    };
    let Some(start) = proto[message..].find("enum Type {").map(|k| message + k) else {
        return Vec::new();
    };
    let body = &proto[start + "enum Type {".len()..];
    let body = &body[..body.find('}').unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| l.split("//").next())
        .filter_map(|l| l.split_once('='))
        .map(|(name, _)| name.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

/// `docs/BROKER.md`'s section "Every command of the protocol" names every command of the
/// protocol (what the broker does with it).
fn command_table(root: &Path) -> Vec<String> {
    let proto =
        fs::read_to_string(root.join("crates/wire/proto/PulsarApi.proto")).unwrap_or_default();
    let commands = proto_commands(&proto);
    if commands.is_empty() {
        return vec!["crates/wire/proto/PulsarApi.proto: no `enum Type` of commands found".into()];
    }
    let doc = fs::read_to_string(root.join("docs/BROKER.md")).unwrap_or_default();
    let heading = "## Every command of the protocol";
    let Some(at) = doc.find(heading) else {
        return vec![format!("docs/BROKER.md: no section `{heading}`")];
    };
    let section = &doc[at + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    commands
        .iter()
        .filter(|c| !section.contains(&format!("`{c}`")))
        .map(|c| {
            format!(
                "docs/BROKER.md: the command table does not say what the broker does with `{c}`"
            )
        })
        .collect()
}

/// Longest file in `broker/src`, in lines.
const BROKER_FILE_LINES: usize = 600;
/// Longest non-test function in `broker/src`, in lines.
const BROKER_FN_LINES: usize = 80;

/// The broker's shape: its core (everything outside `shell/` and `main.rs`) owns no socket,
/// thread, channel or clock; files and functions stay short; errors are typed; and its
/// top-level modules import each other without a circle.
fn broker_checks(root: &Path, lib_banned: &[(String, &str)]) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let src = root.join("broker/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let sockets = [
        (pat(&["Tcp", "Stream"]), "sockets"),
        (pat(&["Tcp", "Listener"]), "sockets"),
        (pat(&["Udp", "Socket"]), "sockets"),
    ];
    let mut edges: Vec<(String, String)> = Vec::new();
    let mut inner_edges: Vec<(String, String)> = Vec::new();
    let mut locks: Vec<(String, usize)> = Vec::new();
    let siblings = folder_modules(&files, &src);
    for f in &files {
        let rel = f
            .strip_prefix(&src)
            .unwrap_or(f)
            .to_string_lossy()
            .replace('\\', "/");
        let text = fs::read_to_string(f)?;
        let lines: Vec<&str> = text.lines().collect();
        let shell = rel.starts_with("shell/") || rel == "main.rs";
        let test_file = rel.ends_with("tests.rs") || rel.contains("/tests/");
        if lines.len() > BROKER_FILE_LINES {
            problems.push(format!(
                "broker/src/{rel}: {} lines; split it by concern (at most {BROKER_FILE_LINES})",
                lines.len()
            ));
        }
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if !shell && !test_file {
                for (b, what) in lib_banned
                    .iter()
                    .map(|(b, w)| (b.as_str(), *w))
                    .chain(sockets.iter().map(|(b, w)| (b.as_str(), *w)))
                {
                    if line.contains(b) {
                        problems.push(format!(
                            "broker/src/{rel}:{}: the broker's core must not use `{b}` ({what} belong to broker/src/shell/; time is passed in)",
                            i + 1
                        ));
                    }
                }
            }
            if string_error(line) {
                problems.push(format!(
                    "broker/src/{rel}:{}: a typed error, not `Result<_, String>`",
                    i + 1
                ));
            }
        }
        if !test_file {
            problems.extend(core_io::core_calls(&rel, &text));
            if !core_io::may_do_io(&rel) {
                locks.push((rel.clone(), core_io::lock_sites(&text)));
            }
        }
        if test_file {
            // Tests may reach anything (the shell's runtimes included): no module edges.
            continue;
        }
        let from = rel.split(['/', '.']).next().unwrap_or("").to_owned();
        let code = core_io::product_lines(&text).join("\n");
        for to in idents_after(&code, "crate::") {
            if to != from && !edges.contains(&(from.clone(), to.clone())) {
                edges.push((from.clone(), to));
            }
        }
        for edge in sibling_edges(&rel, &code, &siblings) {
            if !inner_edges.contains(&edge) {
                inner_edges.push(edge);
            }
        }
        problems.extend(long_functions(&rel, &lines));
    }
    problems.extend(core_io::lock_ratchet(&locks));
    if let Some(cycle) = find_cycle(&edges) {
        problems.push(format!(
            "broker/src: modules import each other in a circle: {}",
            cycle.join(" -> ")
        ));
    }
    if let Some(cycle) = find_cycle(&inner_edges) {
        problems.push(format!(
            "broker/src: modules of one folder import each other in a circle: {}",
            cycle.join(" -> ")
        ));
    }
    Ok(problems)
}

/// Each folder of `broker/src` (relative path, `""` for the top) and the modules in it: its
/// files but `mod.rs`, and its sub-folders.
fn folder_modules(files: &[PathBuf], src: &Path) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |folder: String, module: String| match out.iter_mut().find(|(f, _)| *f == folder)
    {
        Some((_, ms)) if !ms.contains(&module) => ms.push(module),
        Some(_) => {}
        None => out.push((folder, vec![module])),
    };
    for f in files {
        let rel = f
            .strip_prefix(src)
            .unwrap_or(f)
            .to_string_lossy()
            .replace('\\', "/");
        let parts: Vec<&str> = rel.split('/').collect();
        for k in 0..parts.len() {
            let folder = parts[..k].join("/");
            let module = parts[k].trim_end_matches(".rs");
            if module != "mod" {
                add(folder, module.to_owned());
            }
        }
    }
    out
}

/// The edges from file `rel`'s module to the other modules of its folder that its `code`
/// names: `super::b` (and `super::{b, …}`), or `crate::<folder>::b`. A folder's `mod.rs` is
/// their parent, not a sibling: its edges are not counted.
fn sibling_edges(
    rel: &str,
    code: &str,
    siblings: &[(String, Vec<String>)],
) -> Vec<(String, String)> {
    let Some((folder, file)) = rel.rsplit_once('/') else {
        return Vec::new();
    };
    let me = file.trim_end_matches(".rs");
    let Some((_, mods)) = siblings.iter().find(|(f, _)| f == folder) else {
        return Vec::new();
    };
    if me == "mod" {
        return Vec::new();
    }
    let crate_path = format!("crate::{}::", folder.replace('/', "::"));
    idents_after(code, "super::")
        .into_iter()
        .chain(idents_after(code, &crate_path))
        .filter(|to| to != me && mods.contains(to))
        .map(|to| (format!("{folder}/{me}"), format!("{folder}/{to}")))
        .collect()
}

/// Whether `line` names a `Result` whose error is a `String` (`io::Result<String>`, a string
/// that is the success value, is fine).
fn string_error(line: &str) -> bool {
    line.contains(&pat(&["Result", "<"])) && line.contains(&pat(&[", ", "String>"]))
}

/// Functions longer than [`BROKER_FN_LINES`], but those of `#[cfg(test)]` items (a test
/// module, wherever it stands, is skipped and the file checked on after it). rustfmt puts a
/// function's closing brace at the indentation of its `fn`.
fn long_functions(rel: &str, lines: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let body = lines[i].trim_start();
        let indent = &lines[i][..lines[i].len() - body.len()];
        if body.starts_with("#[cfg(test)]") {
            i = end_of_item(lines, i + 1, indent);
            continue;
        }
        let signature = [
            "fn ",
            "pub fn ",
            "pub(crate) fn ",
            "pub(super) fn ",
            "const fn ",
        ]
        .iter()
        .any(|p| body.starts_with(p));
        let close = format!("{indent}}}");
        let len = lines[i..].iter().position(|l| *l == close);
        if let (true, false, Some(len)) = (signature, body.ends_with(';'), len) {
            if len + 1 > BROKER_FN_LINES {
                let name: String = body
                    .split("fn ")
                    .nth(1)
                    .unwrap_or("")
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(format!(
                    "broker/src/{rel}:{}: `{name}` is {} lines; split it (at most {BROKER_FN_LINES})",
                    i + 1,
                    len + 1
                ));
            }
        }
        i += 1;
    }
    out
}

/// The index of the line after the item that starts at `from` (its attributes skipped) with
/// the indentation `indent`: the one line of an item that ends with `;` or `,`, else through
/// its closing brace.
fn end_of_item(lines: &[&str], from: usize, indent: &str) -> usize {
    let mut k = from;
    while k < lines.len() && lines[k].trim_start().starts_with("#[") {
        k += 1;
    }
    let Some(first) = lines.get(k) else {
        return lines.len();
    };
    if first.trim_end().ends_with(';') || first.trim_end().ends_with(',') {
        return k + 1;
    }
    let close = format!("{indent}}}");
    lines[k..]
        .iter()
        .position(|l| l.trim_end() == close || l.trim_end() == format!("{close};"))
        .map_or(lines.len(), |n| k + n + 1)
}

/// The first names of the paths that start with `prefix` in `code` (`crate::` gives the
/// top-level modules named): `crate::a::B`, and each item of a group, `crate::{a::B, c}`, also
/// across lines.
fn idents_after(code: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(k) = rest.find(prefix) {
        rest = &rest[k + prefix.len()..];
        let Some(group) = rest.trim_start().strip_prefix('{') else {
            found.push(ident(rest));
            continue;
        };
        // The group's items at its own depth: the first name of each.
        let (mut depth, mut item_start) = (0usize, 0usize);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    found.push(ident(&group[item_start..i]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    found.push(ident(&group[item_start..i]));
                    item_start = i + 1;
                }
                _ => {}
            }
        }
    }
    found.retain(|m| !m.is_empty() && m != "self");
    found
}

/// A circle in the module graph, if there is one, as the modules along it.
fn find_cycle(edges: &[(String, String)]) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &[(String, String)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(k) = path.iter().position(|p| p == n) {
            let mut c = path[k..].to_vec();
            c.push(n.to_owned());
            return Some(c);
        }
        if done.iter().any(|d| d == n) {
            return None;
        }
        path.push(n.to_owned());
        for (_, to) in edges.iter().filter(|(f, _)| f == n) {
            if let Some(c) = visit(to, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.push(n.to_owned());
        None
    }
    let mut done = Vec::new();
    for (from, _) in edges {
        if let Some(c) = visit(from, edges, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// A published crate's documentation is its README, with a Rust example: the problems of the
/// crate at `dir` whose `lib.rs` and README read `lib` and `readme`.
fn crate_doc(dir: &str, lib: &str, readme: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if !lib.trim_start().starts_with(README_DOC) {
        problems.push(format!(
            "{dir}/src/lib.rs: the crate doc must be the README: start with `{README_DOC}`"
        ));
    }
    if !readme.contains("```rust") {
        problems.push(format!("{dir}/README.md: no ```rust example"));
    }
    problems
}

#[cfg(test)]
mod tests {
    #[test]
    fn grouped_and_multi_line_imports_name_their_modules() {
        let code = "use crate::a::B;\nuse crate::{\n    b::{C, D},\n    c,\n    self,\n};\nlet x = crate::d::f(crate::{e});";
        assert_eq!(
            super::idents_after(code, "crate::"),
            ["a", "b", "c", "d", "e"]
        );
    }

    /// Files of one folder naming each other through `super::` or `crate::<folder>::` make
    /// edges; a name that is no module of the folder does not, nor does `mod.rs`.
    #[test]
    fn a_circle_inside_a_folder_is_found() {
        let files: Vec<std::path::PathBuf> = ["admin/mod.rs", "admin/a.rs", "admin/b.rs", "x.rs"]
            .iter()
            .map(|f| std::path::Path::new("/s").join(f))
            .collect();
        let siblings = super::folder_modules(&files, std::path::Path::new("/s"));
        let a = "use super::{b::f, json};\nsuper::helper();";
        let b = "crate::admin::a::g(); super::x::y();";
        let mut edges = super::sibling_edges("admin/a.rs", a, &siblings);
        edges.extend(super::sibling_edges("admin/b.rs", b, &siblings));
        edges.extend(super::sibling_edges(
            "admin/mod.rs",
            "super::a::f(); a::f();",
            &siblings,
        ));
        let e = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(edges, [e("admin/a", "admin/b"), e("admin/b", "admin/a")]);
        assert!(super::find_cycle(&edges).is_some());
    }

    #[test]
    fn a_circle_among_modules_is_found() {
        let e = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        let acyclic = [
            e("shell", "session"),
            e("session", "state"),
            e("shell", "state"),
        ];
        assert_eq!(super::find_cycle(&acyclic), None);
        let circle = [
            e("shell", "session"),
            e("session", "state"),
            e("state", "shell"),
        ];
        assert_eq!(
            super::find_cycle(&circle),
            Some(vec![
                "shell".into(),
                "session".into(),
                "state".into(),
                "shell".into()
            ])
        );
    }

    #[test]
    fn a_doc_naming_a_missing_path_is_found() {
        let root = std::env::temp_dir().join(format!("tidy-docs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("broker/src")).unwrap();
        std::fs::write(
            root.join("README.md"),
            "See `broker/src/conn.rs`, [the map](docs/MAP.md), `tests/*.sim` and `<x>/y.rs`.",
        )
        .unwrap();
        let found = super::doc_paths(&root);
        assert_eq!(found.len(), 3, "{found:?}");
        std::fs::write(root.join("broker/src/conn.rs"), "").unwrap();
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::write(root.join("docs/MAP.md"), "").unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        assert_eq!(super::doc_paths(&root), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_commands_come_from_the_proto() {
        let proto = "message BaseCommand {\n  enum Type {\n    CONNECT = 2; // first\n    SEND = 6;\n  }\n  required Type type = 1;\n}";
        assert_eq!(super::proto_commands(proto), ["CONNECT", "SEND"]);
        let real = std::fs::read_to_string(super::root().join("crates/wire/proto/PulsarApi.proto"))
            .unwrap();
        let all = super::proto_commands(&real);
        assert!(
            all.len() > 60 && all.contains(&"GET_SCHEMA".to_owned()),
            "{all:?}"
        );
    }

    #[test]
    fn a_string_error_is_found_and_a_string_value_is_not() {
        assert!(super::string_error("fn f() -> Result<(), String> {"));
        assert!(super::string_error(
            "    let r: Result<Vec<u8>, String> = x;"
        ));
        assert!(!super::string_error("fn f() -> io::Result<String> {"));
        assert!(!super::string_error(
            "fn f() -> Result<String, ParseError> {"
        ));
    }

    #[test]
    fn a_long_function_is_found() {
        let mut lines = vec!["fn short() {", "}", "pub(crate) fn long() {"];
        lines.extend(std::iter::repeat_n("    x();", super::BROKER_FN_LINES));
        lines.push("}");
        let found = super::long_functions("f.rs", &lines);
        assert_eq!(found.len(), 1);
        assert!(found[0].contains("`long`"), "{found:?}");
        // After a test module, functions are checked again; inside it they are not.
        let mut after = vec!["#[cfg(test)]", "mod tests {", "    fn long_test() {"];
        after.extend(std::iter::repeat_n("        x();", super::BROKER_FN_LINES));
        after.extend(["    }", "}", "#[cfg(test)]", "use x::Y;"]);
        after.extend(lines.iter().copied());
        let found = super::long_functions("f.rs", &after);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("`long`"), "{found:?}");
    }

    #[test]
    fn a_crate_doc_that_is_not_its_readme_is_found() {
        let readme = "# x\n\n```rust\nlet a = 1;\n```\n";
        let good = format!("{}\n\npub mod a;\n", super::README_DOC);
        assert!(super::crate_doc("crates/x", &good, readme).is_empty());
        let own_doc = "//! The x crate.\n\npub mod a;\n";
        let found = super::crate_doc("crates/x", own_doc, readme);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("crates/x/src/lib.rs"), "{found:?}");
        let found = super::crate_doc("crates/x", &good, "# x\n\nNo example.\n");
        assert_eq!(found, ["crates/x/README.md: no ```rust example"]);
    }

    /// `cargo test` runs tidy (rust-analyzer's way): a hygiene problem fails the test suite.
    #[test]
    fn tidy() {
        let (files, problems) = super::check(&super::root()).expect("tidy could read the tree");
        assert!(files > 0, "tidy found no Rust files");
        assert!(problems.is_empty(), "tidy:\n{}", problems.join("\n"));
    }

    #[test]
    fn the_runtime_shell_and_the_harness_may_do_io_and_the_core_may_not() {
        assert!(super::may_do_io("crates/dispatcher/src/runtime.rs"));
        assert!(super::may_do_io("crates/dispatcher/src/runtime/sink.rs"));
        assert!(super::may_do_io("crates/dispatcher/tests/runtime.rs"));
        assert!(super::may_do_io("crates/client/src/tests.rs"));
        assert!(!super::may_do_io("crates/dispatcher/src/driver.rs"));
        assert!(!super::may_do_io("crates/dispatcher/src/core/mod.rs"));
    }
}
