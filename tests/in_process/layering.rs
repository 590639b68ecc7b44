//! The layering rule, checked on the source: `src/pure` does no I/O (no processes, sockets,
//! HTTP or file system; parsing bytes is pure, reading them is not) and imports nothing
//! above it (`actors`, `drivers`, `local`, `cli`, `messages`, `supervision`). Unit tests
//! (a `#[cfg(test)]` module or a sibling `tests.rs`) may touch files, so they are not
//! read. A violation names the file, the line and the rule. `src/drivers` (the edges)
//! does not import `crate::actors`: the traits both sides meet at are `crate::seams`, the
//! shared debug record `crate::observability`. Also one rule, one place: the
//! epoch fencing rule (refusing a lower epoch, or an older generation of the same epoch) is
//! decided in `src/pure/deploy/fence.rs` only, which every deploy target uses.

use std::path::{Path, PathBuf};

/// What `src/pure` must not use, with the reason a violation reports.
const FORBIDDEN: &[(&str, &str)] = &[
    ("std::fs", "file system access belongs in src/drivers"),
    ("tokio::fs", "file system access belongs in src/drivers"),
    ("std::process", "processes belong in src/drivers"),
    ("tokio::process", "processes belong in src/drivers"),
    ("std::net::Tcp", "sockets belong in src/drivers"),
    ("std::net::Udp", "sockets belong in src/drivers"),
    ("std::os::unix::net", "sockets belong in src/drivers"),
    ("tokio::net", "sockets belong in src/drivers"),
    ("reqwest", "HTTP belongs in src/drivers"),
    ("tempfile", "scratch directories belong in src/drivers"),
    ("File::open", "file system access belongs in src/drivers"),
    ("File::create", "file system access belongs in src/drivers"),
    ("read_dir(", "file system access belongs in src/drivers"),
    ("Command::new", "processes belong in src/drivers"),
    ("crate::actors", "src/pure imports nothing above it"),
    ("crate::drivers", "src/pure imports nothing above it"),
    ("crate::local", "src/pure imports nothing above it"),
    ("crate::cli", "src/pure imports nothing above it"),
    ("crate::messages", "src/pure imports nothing above it"),
    ("crate::supervision", "src/pure imports nothing above it"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("the source folder reads");
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The violations in one file's text: (line, pattern, reason). Lines after the first
/// `#[cfg(test)]` and comment lines are not looked at.
fn violations(text: &str) -> Vec<(usize, &'static str, &'static str)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        for (pattern, reason) in FORBIDDEN {
            if code.contains(pattern) {
                found.push((number + 1, *pattern, *reason));
            }
        }
    }
    found
}

#[test]
fn src_pure_does_no_io_and_imports_nothing_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pure");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    assert!(files.len() > 20, "src/pure was found: {files:?}");
    let mut report = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
    {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for (line, pattern, reason) in violations(&text) {
            report.push(format!(
                "{}:{line}: uses `{pattern}`: {reason}",
                file.display()
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn the_check_finds_an_io_import_and_ignores_tests_and_comments() {
    let text = "use std::sync::Arc;\n// std::fs in a comment\nuse std::fs::read;\n#[cfg(test)]\nmod tests { use std::process::Command; }\n";
    assert_eq!(
        violations(text),
        vec![(3, "std::fs", "file system access belongs in src/drivers")]
    );
}

#[test]
fn src_drivers_import_nothing_from_the_actors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/drivers");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 10, "src/drivers was found: {files:?}");
    let mut report = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
    {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for (number, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if !code.starts_with("//") && code.contains("crate::actors") {
                report.push(format!(
                    "{}:{}: imports crate::actors: a driver meets the actors at crate::seams",
                    file.display(),
                    number + 1
                ));
            }
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// Where production code builds a fencing or staleness refusal itself
/// (`DeployError::Fenced { offered: …` or `DeployError::Stale { offered: …`), in one file's
/// text: the lines it starts on. A match on one (`Fenced { accepted, .. }`) is not a
/// decision; tests (after the first `#[cfg(test)]`) and comment lines are left out.
fn fencing_decisions(text: &str) -> Vec<usize> {
    let code: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .map(|l| {
            if l.trim_start().starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect();
    let mut found = Vec::new();
    for (number, line) in code.iter().enumerate() {
        for variant in ["DeployError::Fenced {", "DeployError::Stale {"] {
            for (at, _) in line.match_indices(variant) {
                let rest = &line[at + variant.len()..];
                let next = code.get(number + 1).copied().unwrap_or_default();
                let fields = if rest.trim().is_empty() { next } else { rest };
                if fields.trim_start().starts_with("offered:") {
                    found.push(number + 1);
                }
            }
        }
    }
    found
}

#[test]
fn the_fencing_rule_is_decided_in_one_place_that_every_target_uses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let fence = root.join("pure/deploy/fence.rs");
    let mut report = Vec::new();
    for file in files
        .iter()
        .filter(|f| **f != fence && f.file_name().is_some_and(|n| n != "tests.rs"))
    {
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for line in fencing_decisions(&text) {
            report.push(format!(
                "{}:{line}: decides a fencing refusal itself; use pure::deploy::fence::Fence",
                file.display()
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
    // Every target takes it from there: the local, Data Plane API and recording targets.
    for target in [
        "drivers/local/mod.rs",
        "drivers/dataplane/mod.rs",
        "pure/deploy/mod.rs",
    ] {
        let text = std::fs::read_to_string(root.join(target)).expect("a target reads");
        assert!(
            text.contains("fence.admit("),
            "{target} does not ask the Fence"
        );
    }
}

#[test]
fn the_fencing_check_finds_a_refusal_built_outside_the_fence_and_not_a_match_on_one() {
    let text = "if e < a {\n    return Err(DeployError::Fenced {\n        offered: e,\n    });\n}\nlet s = DeployError::Stale { offered: 1, deployed: 2 };\nmatches!(r, Err(DeployError::Stale { .. }));\nif let Err(DeployError::Fenced { accepted, .. }) = r {}\n// DeployError::Stale { offered: 3, deployed: 4 }\n#[cfg(test)]\nmod tests { const X: DeployError = DeployError::Stale { offered: 1, deployed: 2 }; }\n";
    assert_eq!(fencing_decisions(text), vec![2, 6]);
}
