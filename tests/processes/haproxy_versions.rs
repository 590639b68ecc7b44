//! HAProxy version awareness through the `haptor` binary: `--haproxy-version` chooses what
//! the schema check accepts (a `crt-store` section needs 3.0), its default is the version of
//! the haproxy binary, and `haproxy -c` runs only with a checker of the target's version
//! (`--haproxy-checker VERSION=PATH`): a mismatch is reported and nothing is checked. The
//! checker here is a fake `haproxy` script that claims 3.0.5 and records every run but `-v`.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use support::{haptor, text};

const WITH_CRT_STORE: &str = "global\n    maxconn 100\ncrt-store web\n    load crt site.pem\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nfrontend fe\n    bind :8080\n    default_backend be\nbackend be\n    server s1 127.0.0.1:8081\n";

/// A fake haproxy claiming `version`; every run other than `-v` appends its arguments to
/// the returned log file.
fn fake_haproxy(dir: &Path, version: &str) -> (PathBuf, PathBuf) {
    let binary = dir.join(format!("haproxy-{version}"));
    let runs = dir.join(format!("haproxy-{version}.runs"));
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = \"-v\" ]; then\n  echo \"HAProxy version {version} 2024/09/19 - https://haproxy.org/\"\n  exit 0\nfi\necho \"$@\" >> '{}'\nexit 0\n",
        runs.display()
    );
    std::fs::write(&binary, script).expect("write the fake haproxy");
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755))
        .expect("make the fake haproxy executable");
    (binary, runs)
}

fn config_file(dir: &Path) -> PathBuf {
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, WITH_CRT_STORE).expect("write the config");
    path
}

fn utf8(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn lint_refuses_a_crt_store_section_for_2_6_naming_the_line_and_accepts_it_for_3_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = config_file(dir.path());
    let name = utf8(&file);

    let old = haptor(&["lint", "--haproxy-version", "2.6", name]);
    let out = text(&old);
    assert_eq!(old.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "{name}:3: unknown keyword 'crt-store': the 'crt-store' section needs HAProxy 3.0 or later; the target runs 2.6"
        )),
        "{out}"
    );

    let new = haptor(&["lint", "--haproxy-version", "3.0", name]);
    let out = text(&new);
    assert!(new.status.success(), "{out}");
    assert!(out.contains("1 file(s) checked, no problems"), "{out}");

    let bad = haptor(&["lint", "--haproxy-version", "three", name]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}

#[test]
fn without_a_version_lint_judges_for_the_haproxy_binary_found_else_2_6() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = config_file(dir.path());
    let (fake, _) = fake_haproxy(dir.path(), "3.0.5");

    let with_3_0 = haptor(&["lint", "--haproxy-bin", utf8(&fake), utf8(&file)]);
    assert!(with_3_0.status.success(), "{}", text(&with_3_0));

    let missing = dir.path().join("no-such-haproxy");
    let without = haptor(&["lint", "--haproxy-bin", utf8(&missing), utf8(&file)]);
    let out = text(&without);
    assert_eq!(without.status.code(), Some(1), "{out}");
    assert!(out.contains("the target runs 2.6"), "{out}");
}

#[test]
fn a_checker_of_another_version_than_the_target_is_reported_as_a_mismatch_and_never_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = config_file(dir.path());
    let (fake, runs) = fake_haproxy(dir.path(), "3.0.5");
    let checker = format!("3.0={}", utf8(&fake));

    // lint --haproxy: the only checker is 3.0, the target 2.6.
    let lint = haptor(&[
        "lint",
        "--haproxy",
        "--haproxy-version",
        "2.6",
        "--haproxy-checker",
        &checker,
        utf8(&file),
    ]);
    let out = text(&lint);
    assert_eq!(lint.status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "the target runs HAProxy 2.6, but no haproxy -c checker of that version is configured (checkers: 3.0 ({}))",
            fake.display()
        )),
        "{out}"
    );
    assert!(!runs.exists(), "the 3.0 checker ran for a 2.6 target");

    // A checker configured for 2.6 whose `haproxy -v` says 3.0.5 is no 2.6 checker either.
    let mislabelled = format!("2.6={}", utf8(&fake));
    let lint = haptor(&[
        "lint",
        "--haproxy",
        "--haproxy-version",
        "2.6",
        "--haproxy-checker",
        &mislabelled,
        utf8(&file),
    ]);
    let out = text(&lint);
    assert_eq!(lint.status.code(), Some(2), "{out}");
    assert!(out.contains("whose haproxy -v says 3.0.5"), "{out}");
    assert!(!runs.exists(), "the mislabelled checker ran");

    // validate: the example's haproxy_valid assertion fails with the mismatch, unchecked.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ingress/config.yaml");
    let validate = haptor(&[
        "validate",
        "-f",
        utf8(&example),
        "--haproxy-version",
        "2.6",
        "--haproxy-checker",
        &checker,
        "--test",
        "haproxy-accepts-the-config",
    ]);
    let out = text(&validate);
    assert_eq!(validate.status.code(), Some(1), "{out}");
    assert!(out.contains("FAIL haproxy-accepts-the-config"), "{out}");
    assert!(
        out.contains(
            "the target runs HAProxy 2.6, but no haproxy -c checker of that version is configured"
        ),
        "{out}"
    );
    assert!(!runs.exists(), "the 3.0 checker ran for a 2.6 target");

    // The checker of the target's version is the one that runs.
    let lint = haptor(&[
        "lint",
        "--haproxy",
        "--haproxy-version",
        "3.0",
        "--haproxy-checker",
        &checker,
        utf8(&file),
    ]);
    assert!(lint.status.success(), "{}", text(&lint));
    let ran = std::fs::read_to_string(&runs).expect("the 3.0 checker ran");
    assert!(ran.starts_with("-c -dr -f "), "{ran}");
}

const WITH_LATER_KEYWORDS: &str = "global\n    cpu-policy performance\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nfrontend fe\n    bind 127.0.0.1:8080\n    guid fe-1\n    default_backend be\nbackend be\n    bind-process 1\n    server s1 127.0.0.1:8081\n";

#[test]
fn lint_judges_keywords_by_the_target_s_line_naming_the_line_that_added_or_dropped_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("haproxy.cfg");
    std::fs::write(&file, WITH_LATER_KEYWORDS).expect("write the config");
    let name = utf8(&file);
    let lint = |version: &str| text(&haptor(&["lint", "--haproxy-version", version, name]));

    let old = lint("2.6");
    assert!(
        old.contains(&format!(
            "{name}:2: unknown keyword 'cpu-policy' in 'global' section: it needs HAProxy 3.2 or later; the target runs 2.6"
        )),
        "{old}"
    );
    assert!(
        old.contains(&format!(
            "{name}:10: unknown keyword 'guid' in 'frontend' section: it needs HAProxy 3.0 or later; the target runs 2.6"
        )),
        "{old}"
    );
    assert!(!old.contains(":13:"), "2.6 has bind-process: {old}");

    let lts = lint("3.0");
    assert!(!lts.contains(":10:"), "3.0 has guid: {lts}");
    assert!(lts.contains(&format!("{name}:2: ")), "{lts}");
    assert!(
        lts.contains(&format!(
            "{name}:13: 'bind-process' is no longer supported in a 'backend' section: HAProxy 2.6 had it, the target runs 3.0"
        )),
        "{lts}"
    );

    let newest = lint("3.2");
    assert!(newest.contains("1 problem(s)"), "{newest}");
    assert!(newest.contains(&format!("{name}:13: ")), "{newest}");
}
