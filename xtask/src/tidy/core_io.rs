//! What the broker's core may call, read from what the code calls rather than from words: the
//! `use` trees are expanded to full paths (`use std::{fs, sync::{Arc, Mutex as M}}` names
//! `std::fs` and `std::sync::Mutex`), and calls are matched in the code with comments and
//! `#[cfg(test)]` items taken out.
//!
//! * **No file IO, no blocking wait, no thread start** in the core: `std::fs`, `File`,
//!   `OpenOptions`, `tempfile`, sockets, `std::process`, `std::thread`, channels, `Condvar`,
//!   a blocking receive or wait, `Runtime::start`, the dispatch pool. The shell (`shell/`,
//!   `main.rs`) and the storage implementations (`storage/`, and the file stores of the topic
//!   backend, the topic catalog and the metadata) may.
//! * **Locks only shrink.** The core still locks (the topic's state, the registry): each file's
//!   lock sites (a `Mutex` or `RwLock` named, a lock taken) are counted and held to
//!   [`CORE_LOCKS`]. A file with more fails (a new lock in the core); a file with fewer fails too,
//!   until the table is lowered, so the allowance follows the code down.

/// Files of `broker/src` that may do IO: the shell and the storage implementations.
pub(crate) fn may_do_io(rel: &str) -> bool {
    rel.starts_with("shell/")
        || rel == "main.rs"
        || rel.starts_with("storage/")
        || rel == "topic/backend.rs"
        || rel == "topic/catalog.rs"
        || rel == "metadata/store.rs"
}

/// The lock sites each core file of `broker/src` may have today (none for a file not listed).
/// Lower an entry when a lock goes; never raise one.
pub(crate) const CORE_LOCKS: &[(&str, usize)] = &[
    ("admin/subscriptions.rs", 1),
    ("schema/mod.rs", 8),
    ("session/consume.rs", 4),
    ("state/mod.rs", 22),
    ("state/topics.rs", 6),
    ("stats/consumer.rs", 2),
    ("stats/metrics.rs", 1),
    ("stats/mod.rs", 8),
    ("stepped.rs", 8),
    ("sync.rs", 7),
    ("topic/appends.rs", 15),
    ("topic/mod.rs", 27),
    ("topic/retention.rs", 4),
    ("topic/subscription.rs", 14),
    ("topic/terminate.rs", 2),
];

/// Import paths the core must not use (a path equal to one, or under it).
const BANNED_PATHS: &[(&str, &str)] = &[
    ("std::fs", "file IO"),
    ("std::net::TcpStream", "sockets"),
    ("std::net::TcpListener", "sockets"),
    ("std::net::UdpSocket", "sockets"),
    ("std::net::ToSocketAddrs", "name resolution"),
    ("std::process", "processes"),
    ("std::thread", "threads"),
    ("std::sync::mpsc", "channels"),
    ("std::sync::Condvar", "a blocking wait"),
    ("std::sync::Barrier", "a blocking wait"),
    ("crossbeam_channel", "channels"),
    ("tempfile", "file IO"),
    ("parking_lot", "locks outside crate::sync"),
    (
        "crate::shell",
        "the shell (the core is driven by it, it does not call it)",
    ),
    ("dispatcher::DispatchPool", "threads"),
];

/// Calls and names the core must not have, in its code.
const BANNED_CALLS: &[(&str, &str)] = &[
    ("std::fs::", "file IO"),
    ("File::open", "file IO"),
    ("File::create", "file IO"),
    ("OpenOptions", "file IO"),
    ("to_socket_addrs(", "name resolution"),
    ("std::thread::", "threads"),
    ("std::process::Command", "processes"),
    ("Condvar", "a blocking wait"),
    (".recv()", "a blocking receive"),
    (".recv_timeout(", "a blocking receive"),
    (".wait(", "a blocking wait"),
    (".wait_timeout(", "a blocking wait"),
    ("thread::sleep", "a blocking wait"),
    ("thread::park", "a blocking wait"),
    ("Runtime::start(", "a dispatcher thread"),
    ("Runtime::start_with(", "a dispatcher thread"),
    ("start_pooled(", "the dispatch pool's threads"),
];

/// The code of a file as the checks read it: comment lines blank, `#[cfg(test)]` items blank
/// (line numbers kept).
pub(crate) fn product_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines.clone();
    let mut i = 0;
    while i < lines.len() {
        let body = lines[i].trim_start();
        if body.starts_with("//") {
            out[i] = "";
        } else if body.starts_with("#[cfg(test)]") {
            let indent = &lines[i][..lines[i].len() - body.len()];
            let end = super::end_of_item(&lines, i + 1, indent);
            for l in out.iter_mut().take(end).skip(i) {
                *l = "";
            }
            i = end;
            continue;
        }
        i += 1;
    }
    out
}

/// Every path the `use` declarations of `lines` import, their groups expanded and `as`
/// renames dropped, with the line each declaration starts on (0-based).
pub(crate) fn use_paths(lines: &[&str]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let body = lines[i].trim_start();
        let tree = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| body.strip_prefix(p));
        let Some(first) = tree else {
            i += 1;
            continue;
        };
        let start = i;
        let mut decl = first.to_owned();
        while !decl.contains(';') && i + 1 < lines.len() {
            i += 1;
            decl.push(' ');
            decl.push_str(lines[i].trim());
        }
        let decl = decl.split(';').next().unwrap_or("");
        for p in expand("", decl) {
            out.push((start, p));
        }
        i += 1;
    }
    out
}

/// The paths of one use tree under `prefix`.
fn expand(prefix: &str, tree: &str) -> Vec<String> {
    let tree = tree.trim().trim_start_matches("::");
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("").trim();
        return if path.is_empty() {
            Vec::new()
        } else {
            vec![format!("{prefix}{path}")]
        };
    };
    let head = tree[..open].trim().trim_end_matches("::");
    let inner = tree[open + 1..].trim_end().trim_end_matches('}');
    let base = if head.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}{head}::")
    };
    let (mut depth, mut from, mut out) = (0usize, 0usize, Vec::new());
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.extend(expand(&base, &inner[from..k]));
                from = k + 1;
            }
            _ => {}
        }
    }
    out.extend(expand(&base, &inner[from..]));
    out
}

/// Whether `path` is `banned` or under it (`std::fs::File`, `std::fs::self`).
fn under(path: &str, banned: &str) -> bool {
    path == banned
        || path
            .strip_prefix(banned)
            .is_some_and(|rest| rest.starts_with("::"))
}

/// What the core file `rel` (its `text`) calls that the core must not: one message each.
pub(crate) fn core_calls(rel: &str, text: &str) -> Vec<String> {
    if may_do_io(rel) {
        return Vec::new();
    }
    let lines = product_lines(text);
    let mut out = Vec::new();
    for (i, path) in use_paths(&lines) {
        for (banned, what) in BANNED_PATHS {
            if under(&path, banned) {
                out.push(format!(
                    "broker/src/{rel}:{}: the core imports `{path}` ({what}: the shell's, or a storage implementation's)",
                    i + 1
                ));
            }
        }
    }
    for (i, line) in lines.iter().enumerate() {
        for (call, what) in BANNED_CALLS {
            if line.contains(call) {
                out.push(format!(
                    "broker/src/{rel}:{}: the core calls `{call}` ({what}: the shell's, or a storage implementation's)",
                    i + 1
                ));
            }
        }
    }
    out
}

/// The lines of `text` (product code) that name a lock or take one: `Mutex`, `RwLock`, the
/// `crate::sync` helpers, `.lock()`, `.read()` and `.write()` without arguments.
pub(crate) fn lock_sites(text: &str) -> usize {
    let word = |line: &str, w: &str| {
        line.match_indices(w).any(|(k, _)| {
            let before = line[..k].chars().next_back();
            let after = line[k + w.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    };
    product_lines(text)
        .iter()
        .filter(|l| {
            word(l, "Mutex")
                || word(l, "RwLock")
                || word(l, "MutexGuard")
                || l.contains("crate::sync")
                || word(l, "lock")
                || l.contains(".read()")
                || l.contains(".write()")
        })
        .count()
}

/// The lock ratchet over the core files `counts` (relative path, lock sites).
pub(crate) fn lock_ratchet(counts: &[(String, usize)]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, n) in counts {
        if may_do_io(rel) {
            continue;
        }
        let allowed = CORE_LOCKS
            .iter()
            .find(|(f, _)| f == rel)
            .map_or(0, |(_, a)| *a);
        if *n > allowed {
            out.push(format!(
                "broker/src/{rel}: {n} lock sites, {allowed} allowed: no new lock in the core (own the state, or pass a message)"
            ));
        } else if *n < allowed {
            out.push(format!(
                "broker/src/{rel}: {n} lock sites, fewer than the {allowed} allowed: lower its entry in CORE_LOCKS (xtask/src/tidy/core_io.rs)"
            ));
        }
    }
    for (f, _) in CORE_LOCKS {
        if !counts.iter().any(|(rel, _)| rel == f) {
            out.push(format!(
                "CORE_LOCKS names broker/src/{f}, which is gone: remove its entry"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_expand_to_full_paths() {
        let lines = [
            "use std::{fs, io::{self, Read}};",
            "pub(crate) use std::sync::{",
            "    Arc,",
            "    Mutex as Latch,",
            "};",
            "use crate::topic::Topic;",
        ];
        let paths: Vec<String> = use_paths(&lines).into_iter().map(|(_, p)| p).collect();
        assert_eq!(
            paths,
            [
                "std::fs",
                "std::io::self",
                "std::io::Read",
                "std::sync::Arc",
                "std::sync::Mutex",
                "crate::topic::Topic"
            ]
        );
    }

    /// A planted `std::fs` call, in each form, fails; the same in a storage implementation or
    /// a test module does not.
    #[test]
    fn a_planted_fs_call_in_the_core_is_found() {
        for planted in [
            "fn f() { let _ = std::fs::read(\"x\"); }",
            "use std::fs;\nfn f() { let _ = fs::read(\"x\"); }",
            "use std::{fs::File as F, io};",
            "fn f() { let _ = File::open(\"x\"); }",
        ] {
            assert!(
                !core_calls("session/mod.rs", planted).is_empty(),
                "{planted}"
            );
            assert!(core_calls("storage/log.rs", planted).is_empty());
        }
        let in_tests = "fn f() {}\n#[cfg(test)]\nmod tests {\n    use std::fs;\n}\n";
        assert!(core_calls("session/mod.rs", in_tests).is_empty());
    }

    #[test]
    fn a_blocking_wait_or_a_thread_start_in_the_core_is_found() {
        for planted in [
            "fn f(rx: Receiver<u8>) { let _ = rx.recv(); }",
            "use std::sync::{Arc, Condvar};",
            "fn f() { let r = Runtime::start(cfg, c, l); }",
            "use crate::shell::ThreadRuntimes;",
            "// a comment may say std::fs::read\nuse std::thread;",
        ] {
            assert!(
                !core_calls("topic/subscription.rs", planted).is_empty(),
                "{planted}"
            );
        }
        assert!(core_calls("topic/subscription.rs", "// rx.recv() in a comment").is_empty());
    }

    /// A planted `Mutex` (named, aliased or taken) raises a file's count past its allowance;
    /// a file with fewer sites than allowed is told to lower the table.
    #[test]
    fn a_planted_mutex_in_the_core_is_found() {
        let clean = "fn f(x: &Arc<u8>) -> u8 { **x }\n";
        assert_eq!(lock_sites(clean), 0);
        for planted in [
            "use std::sync::Mutex;\n",
            "use std::sync::{Arc, Mutex as Latch};\n",
            "struct S { m: std::sync::RwLock<u8> }\n",
            "fn f(s: &S) { let _g = lock(&s.m); }\n",
            "fn f(s: &S) { let _g = s.ledger.write(); }\n",
        ] {
            let text = format!("{clean}{planted}");
            assert_eq!(lock_sites(&text), 1, "{planted}");
            let problems = lock_ratchet(&[("session/produce.rs".to_owned(), lock_sites(&text))]);
            assert!(
                problems.iter().any(|p| p.contains("no new lock")),
                "{planted}"
            );
        }
        let fewer = lock_ratchet(&[("topic/mod.rs".to_owned(), 1)]);
        assert!(fewer.iter().any(|p| p.contains("lower its entry")));
        assert!(lock_sites("fn unlock_block(x: Block) {}\n") == 0);
    }
}
