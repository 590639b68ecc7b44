//! The semantic phase against the real `haproxy` binary (`/usr/sbin/haproxy`, or the path in
//! `HAPTOR_HAPROXY_BIN`): scratch-directory layout, line numbers, exit codes, concurrency,
//! run failures and the validation cache.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use haptor::drivers::haproxy_check::{CheckerSettings, HaproxyChecker, binary_version};
use haptor::pure::haproxy::versions::HaproxyVersion;
use haptor::pure::rendered::{AuxFile, AuxKind, RenderedConfig};
use haptor::pure::validate::cache::ValidationCache;
use haptor::pure::validate::semantic::{CheckReport, SemanticCheckError};
use haptor::pure::validate::{ValidationError, ValidationPhase};

use support::haproxy_binary;

fn settings() -> CheckerSettings {
    CheckerSettings {
        binary: haproxy_binary(),
        ..CheckerSettings::default()
    }
}

fn checker() -> HaproxyChecker {
    HaproxyChecker::new(settings())
}

const HEAD: &str = "\
global
    default-path origin /etc/haproxy
    maxconn 100
defaults
    mode http
    timeout client 5s
    timeout server 5s
    timeout connect 5s
";

/// A frontend that routes by a host map loaded at parse time.
fn routing_config(map_path: &str) -> String {
    format!(
        "{HEAD}frontend fe
    bind 127.0.0.1:18080
    http-request set-var(txn.backend) req.hdr(host),lower,map({map_path},be_default)
    use_backend %[var(txn.backend)]
backend be_default
    server s1 127.0.0.1:8081
backend be_app
    server s1 127.0.0.1:8082
"
    )
}

fn with_map(haproxy_cfg: String, path: &str, content: &str) -> RenderedConfig {
    let mut rendered = RenderedConfig {
        haproxy_cfg,
        ..Default::default()
    };
    add_file(&mut rendered, AuxKind::Map, path, content);
    rendered
}

fn add_file(rendered: &mut RenderedConfig, kind: AuxKind, path: &str, content: &str) {
    let name = path.rsplit('/').next().unwrap_or(path).to_string();
    rendered.aux_files.insert(
        path.to_string(),
        AuxFile {
            kind,
            name,
            path: path.to_string(),
            content: content.to_string(),
        },
    );
}

fn rejection(result: Result<CheckReport, SemanticCheckError>) -> ValidationError {
    match result {
        Err(SemanticCheckError::Rejected(rejected)) => rejected,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// The 1-based line of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|line| line.contains(needle))
        .expect("needle present")
        + 1
}

fn assert_no_scratch_paths(problem_text: &str) {
    let temp = std::env::temp_dir();
    let temp = temp.to_string_lossy();
    assert!(
        !problem_text.contains("haptor-check-"),
        "scratch dir leaked: {problem_text}"
    );
    assert!(
        !problem_text.contains("haptor-cwd-"),
        "scratch dir leaked: {problem_text}"
    );
    assert!(
        !problem_text.contains(temp.trim_end_matches('/')),
        "temp dir leaked: {problem_text}"
    );
}

#[test]
fn a_config_loading_a_map_through_default_path_is_valid() {
    let rendered = with_map(
        routing_config("maps/hosts.map"),
        "maps/hosts.map",
        "app.example.com be_app\n",
    );
    let report = checker().check_blocking(&rendered).expect("valid");
    assert!(!report.no_listener);
    assert!(!report.from_cache);
}

#[test]
fn an_unknown_keyword_is_reported_on_its_rendered_line() {
    let text = routing_config("maps/hosts.map")
        .replace("    use_backend", "    frobnicate yes\n    use_backend");
    let rendered = with_map(text.clone(), "maps/hosts.map", "a b\n");
    let rejected = rejection(checker().check_blocking(&rendered));
    assert_eq!(rejected.phase, ValidationPhase::Semantic);
    let problem = rejected
        .problems
        .iter()
        .find(|p| p.message.contains("frobnicate"))
        .expect("named");
    assert_eq!(problem.phase, ValidationPhase::Semantic);
    assert_eq!(problem.file, "haproxy.cfg");
    assert_eq!(problem.line, Some(line_of(&text, "frobnicate")));
    for problem in &rejected.problems {
        assert_no_scratch_paths(&problem.message);
        assert_no_scratch_paths(&problem.file);
    }
}

#[test]
fn line_numbers_stay_right_when_the_default_path_line_is_inserted() {
    let text = routing_config("maps/hosts.map")
        .replace("    default-path origin /etc/haproxy\n", "")
        .replace("    use_backend", "    frobnicate yes\n    use_backend");
    assert!(!text.contains("default-path"));
    let rendered = with_map(text.clone(), "maps/hosts.map", "a b\n");
    let rejected = rejection(checker().check_blocking(&rendered));
    let problem = rejected
        .problems
        .iter()
        .find(|p| p.message.contains("frobnicate"))
        .expect("named");
    assert_eq!(problem.line, Some(line_of(&text, "frobnicate")));
}

#[test]
fn a_missing_map_file_fails_naming_the_map() {
    let rendered = RenderedConfig {
        haproxy_cfg: routing_config("maps/absent.map"),
        ..Default::default()
    };
    let rejected = rejection(checker().check_blocking(&rendered));
    let problem = rejected
        .problems
        .iter()
        .find(|p| p.message.contains("maps/absent.map"))
        .expect("map named");
    assert_eq!(
        problem.line,
        Some(line_of(&rendered.haproxy_cfg, "maps/absent.map"))
    );
    assert_no_scratch_paths(&problem.message);
}

#[test]
fn a_broken_map_line_is_reported() {
    let text = routing_config("maps/hosts.map").replace(",map(", ",map_reg(");
    let rendered = with_map(text, "maps/hosts.map", "foo( be_app\n");
    let rejected = rejection(checker().check_blocking(&rendered));
    assert!(
        rejected
            .problems
            .iter()
            .any(|p| p.message.contains("maps/hosts.map") && p.message.contains("foo("))
    );
}

#[test]
fn a_backends_only_config_is_valid_without_a_listener() {
    let text = format!("{HEAD}backend be_app\n    server s1 127.0.0.1:8082\n");
    let report = checker()
        .check_blocking(&RenderedConfig {
            haproxy_cfg: text,
            ..Default::default()
        })
        .expect("valid");
    assert!(report.no_listener);
}

#[test]
fn an_unresolvable_server_is_a_warning_on_its_line() {
    let text = format!(
        "{HEAD}backend be_app\n    server s1 127.0.0.1:8082\n    server s2 no-such-host.invalid:80\n"
    );
    let report = checker()
        .check_blocking(&RenderedConfig {
            haproxy_cfg: text.clone(),
            ..Default::default()
        })
        .expect("valid");
    let warning = report
        .warnings
        .iter()
        .find(|w| w.message.contains("no-such-host.invalid"))
        .expect("warned");
    assert_eq!(warning.file, "haproxy.cfg");
    assert_eq!(warning.line, Some(line_of(&text, "no-such-host.invalid")));
}

#[test]
fn concurrent_checks_do_not_see_each_others_files() {
    let checker = HaproxyChecker::new(CheckerSettings {
        max_concurrent: 4,
        ..settings()
    });
    // Both renders name maps/shared.map; only the first provides it. A shared directory
    // would let the second pass.
    let provides = with_map(
        routing_config("maps/shared.map"),
        "maps/shared.map",
        "a be_app\n",
    );
    let lacks = RenderedConfig {
        haproxy_cfg: routing_config("maps/shared.map"),
        ..Default::default()
    };
    let threads: Vec<_> = [(provides, true), (lacks, false)]
        .into_iter()
        .map(|(rendered, valid)| {
            let checker = checker.clone();
            std::thread::spawn(move || {
                for _ in 0..4 {
                    assert_eq!(checker.check_blocking(&rendered).is_ok(), valid);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no thread failed");
    }
}

#[test]
fn an_aux_path_that_climbs_out_is_refused() {
    let rendered = with_map(routing_config("maps/hosts.map"), "../escape.map", "a b\n");
    let rejected = rejection(checker().check_blocking(&rendered));
    assert_eq!(rejected.problems.len(), 1);
    assert_eq!(rejected.problems[0].file, "../escape.map");
    assert!(rejected.problems[0].message.contains(".."));
}

#[test]
fn an_absolute_aux_path_is_refused() {
    let rendered = with_map(routing_config("maps/hosts.map"), "/tmp/hosts.map", "a b\n");
    let rejected = rejection(checker().check_blocking(&rendered));
    assert!(rejected.problems[0].message.contains("absolute"));
}

#[test]
fn a_missing_binary_gives_an_actionable_message() {
    let binary = "/nonexistent/haproxy-for-haptor-tests";
    let checker = HaproxyChecker::new(CheckerSettings {
        binary: binary.into(),
        ..CheckerSettings::default()
    });
    let rendered = with_map(routing_config("maps/hosts.map"), "maps/hosts.map", "a b\n");
    let error = checker.check_blocking(&rendered).expect_err("cannot run");
    assert!(
        matches!(error, SemanticCheckError::BinaryNotFound { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(binary));
    assert!(message.contains("apt-get install haproxy"));
    assert!(message.contains("--haproxy-bin"));
    assert!(checker.version().is_err());
}

#[test]
fn the_version_is_read_from_the_binary() {
    let version = checker().version().expect("version");
    let mut parts = version.split('.');
    assert!(
        parts
            .next()
            .is_some_and(|major| major.parse::<u32>().is_ok()),
        "{version}"
    );
    let output = std::process::Command::new(haproxy_binary())
        .arg("-v")
        .output()
        .expect("haproxy -v runs");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&format!("version {version} ")),
        "{version}"
    );
}

#[test]
fn extra_environment_variables_reach_haproxy() {
    let text = format!(
        "{HEAD}frontend fe\n    bind \"127.0.0.1:${{HAPTOR_TEST_PORT}}\"\n    default_backend be\nbackend be\n    server s1 127.0.0.1:8082\n"
    );
    let rendered = RenderedConfig {
        haproxy_cfg: text,
        ..Default::default()
    };
    assert!(
        checker().check_blocking(&rendered).is_err(),
        "without the variable the port is empty"
    );
    let with_env = HaproxyChecker::new(CheckerSettings {
        env: vec![("HAPTOR_TEST_PORT".into(), "18081".into())],
        ..settings()
    });
    with_env
        .check_blocking(&rendered)
        .expect("valid with the variable");
}

#[test]
fn a_dynamic_use_backend_map_fails_outside_the_config_directory_with_a_hint_before_haproxy_3_0() {
    // The map appears only in the dynamic rule: a parse-time reference elsewhere would
    // load it first, and HAProxy reuses a loaded map by name.
    let text = routing_config("maps/hosts.map")
        .replace("    http-request set-var(txn.backend) req.hdr(host),lower,map(maps/hosts.map,be_default)\n", "")
        .replace("%[var(txn.backend)]", "%[req.hdr(host),lower,map(maps/hosts.map,be_default)]");
    assert_eq!(text.matches("maps/hosts.map").count(), 1);
    let rendered = with_map(text, "maps/hosts.map", "a be_app\n");
    let version = binary_version(&haproxy_binary()).expect("the tests' haproxy has a version");
    if version >= HaproxyVersion::V3_0 {
        // 3.0 opens the file of a dynamic rule relative to `default-path` too.
        checker()
            .check_blocking(&rendered)
            .expect("HAProxy 3.0 and later open it from the config directory");
        return;
    }
    let rejected = rejection(checker().check_blocking(&rendered));
    assert!(
        rejected
            .problems
            .iter()
            .any(|p| p.message.contains("set-var")),
        "{rejected}"
    );
    let lenient = HaproxyChecker::new(CheckerSettings {
        run_in_config_dir: true,
        ..settings()
    });
    lenient
        .check_blocking(&rendered)
        .expect("valid when run from the config directory");
}

/// Writes an executable shell script standing in for haproxy.
#[cfg(unix)]
fn fake_haproxy(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-haproxy");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[cfg(unix)]
#[test]
fn a_run_that_outlives_the_timeout_is_killed_and_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The script records its pid, then becomes `sleep` under that same pid.
    let pid_file = dir.path().join("pid");
    let binary = fake_haproxy(
        dir.path(),
        &format!("echo $$ > '{}'\nexec sleep 20", pid_file.display()),
    );
    let checker = HaproxyChecker::new(CheckerSettings {
        binary,
        timeout: Duration::from_secs(1),
        ..CheckerSettings::default()
    });
    let error = checker
        .check_blocking(&RenderedConfig::default())
        .expect_err("times out");
    assert!(
        matches!(
            error,
            SemanticCheckError::TimedOut { timeout } if timeout == Duration::from_secs(1)
        ),
        "{error:?}"
    );
    assert_eq!(error.to_string(), "haproxy -c timed out after 1s");
    let pid = std::fs::read_to_string(&pid_file).expect("the run recorded its pid");
    let pid = pid.trim();
    assert!(!pid.is_empty());
    // Killed and reaped: not running, and not left as a zombie either.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the timed-out run {pid} is still there"
    );
}

#[cfg(unix)]
#[test]
fn no_more_runs_than_allowed_overlap() {
    let dir = tempfile::tempdir().expect("temp dir");
    // mkdir is atomic: a second run inside the window finds the directory and fails.
    let lock = dir.path().join("running");
    let body = format!(
        "mkdir '{0}' 2>/dev/null || {{ echo '[ALERT]    (1) : config : overlapping run' >&2; exit 1; }}\nsleep 0.5\nrmdir '{0}'",
        lock.display()
    );
    let binary = fake_haproxy(dir.path(), &body);
    let run_three = |max_concurrent: usize| {
        let checker = HaproxyChecker::new(CheckerSettings {
            binary: binary.clone(),
            max_concurrent,
            ..CheckerSettings::default()
        });
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let checker = checker.clone();
                std::thread::spawn(move || {
                    checker.check_blocking(&RenderedConfig::default()).is_ok()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .filter(|ok| *ok)
            .count()
    };
    assert_eq!(run_three(1), 3);
    assert!(
        run_three(3) < 3,
        "unbounded runs overlap, so the fake detects it"
    );
}

#[tokio::test]
async fn the_async_check_gives_the_same_verdicts() {
    let checker = checker();
    let valid = with_map(
        routing_config("maps/hosts.map"),
        "maps/hosts.map",
        "a be_app\n",
    );
    assert!(checker.check(&valid).await.is_ok());
    let invalid = RenderedConfig {
        haproxy_cfg: routing_config("maps/absent.map"),
        ..Default::default()
    };
    let error = checker.check(&invalid).await.expect_err("missing map");
    assert!(
        matches!(error, SemanticCheckError::Rejected(_)),
        "{error:?}"
    );
}

fn cached_checker() -> (HaproxyChecker, Arc<ValidationCache>) {
    let cache = Arc::new(ValidationCache::new(8));
    (
        HaproxyChecker::new(CheckerSettings {
            cache: Some(Arc::clone(&cache)),
            ..settings()
        }),
        cache,
    )
}

#[test]
fn an_identical_render_is_served_from_the_cache() {
    let (checker, cache) = cached_checker();
    let rendered = with_map(
        routing_config("maps/hosts.map"),
        "maps/hosts.map",
        "a be_app\n",
    );
    let first = checker.check_blocking(&rendered).expect("valid");
    assert!(!first.from_cache);
    assert_eq!((cache.hits(), cache.misses()), (0, 1));
    let second = checker.check_blocking(&rendered).expect("valid");
    assert!(second.from_cache);
    assert_eq!(second.warnings, first.warnings);
    assert_eq!((cache.hits(), cache.misses()), (1, 1));
}

#[test]
fn a_changed_aux_file_misses_the_cache() {
    let (checker, cache) = cached_checker();
    let rendered = with_map(
        routing_config("maps/hosts.map"),
        "maps/hosts.map",
        "a be_app\n",
    );
    checker.check_blocking(&rendered).expect("valid");
    let changed = with_map(
        routing_config("maps/hosts.map"),
        "maps/hosts.map",
        "b be_app\n",
    );
    let report = checker.check_blocking(&changed).expect("valid");
    assert!(!report.from_cache);
    assert_eq!((cache.hits(), cache.misses()), (0, 2));
    assert_eq!(cache.len(), 2);
}

#[test]
fn a_failure_is_never_cached() {
    let (checker, cache) = cached_checker();
    let invalid = RenderedConfig {
        haproxy_cfg: routing_config("maps/absent.map"),
        ..Default::default()
    };
    assert!(checker.check_blocking(&invalid).is_err());
    assert!(checker.check_blocking(&invalid).is_err());
    assert_eq!((cache.hits(), cache.misses()), (0, 2));
    assert!(cache.is_empty());
}

#[tokio::test]
async fn the_async_check_uses_the_cache_too() {
    let (checker, cache) = cached_checker();
    let rendered = with_map(
        routing_config("maps/hosts.map"),
        "maps/hosts.map",
        "a be_app\n",
    );
    assert!(!checker.check(&rendered).await.expect("valid").from_cache);
    assert!(checker.check(&rendered).await.expect("valid").from_cache);
    assert_eq!((cache.hits(), cache.misses()), (1, 1));
}
