//! Unit tests of the local target.

use super::*;

#[test]
fn only_a_bare_line_break_acknowledges_a_silent_command() {
    assert!(silent("\n"));
    assert!(silent("\n\n"));
    assert!(!silent(""), "a dropped command answers nothing at all");
    assert!(!silent("No such server.\n\n"));
}

#[test]
fn the_prepared_map_version_is_read_from_its_reply() {
    assert_eq!(version_of("New version created: 12\n\n"), Some(12));
    assert_eq!(
        version_of("Unknown map identifier. Please use #<id> or <file>.\n"),
        None
    );
}

#[tokio::test]
async fn a_target_without_a_running_haproxy_is_unreachable_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let work_dir = WorkDir::new(dir.path()).expect("work dir");
    let target = LocalTarget::open("local", work_dir.clone()).expect("opens");
    let rendered = Arc::new(RenderedConfig {
        haproxy_cfg: "global\n".into(),
        ..RenderedConfig::default()
    });
    let request = DeployRequest {
        checksum: rendered.checksum(),
        rendered,
        epoch: 1,
        generation: 1,
        timeout: crate::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT,
    };
    let err = target.deploy(&request).await.expect_err("nothing runs");
    assert!(matches!(err, DeployError::Unreachable(_)), "{err}");
    assert!(!work_dir.config_file().exists());
    assert!(matches!(
        target.deployed_checksum().await,
        Err(DeployError::Unreachable(_))
    ));
}

#[tokio::test]
async fn an_unsafe_aux_path_is_rejected_before_anything_happens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let work_dir = WorkDir::new(dir.path()).expect("work dir");
    let target = LocalTarget::open("local", work_dir).expect("opens");
    let mut rendered = RenderedConfig {
        haproxy_cfg: "global\n".into(),
        ..RenderedConfig::default()
    };
    rendered.aux_files.insert(
        "../escape.map".into(),
        crate::pure::rendered::AuxFile {
            kind: crate::pure::rendered::AuxKind::Map,
            name: "escape.map".into(),
            path: "../escape.map".into(),
            content: String::new(),
        },
    );
    let request = DeployRequest {
        checksum: rendered.checksum(),
        rendered: Arc::new(rendered),
        epoch: 1,
        generation: 1,
        timeout: crate::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT,
    };
    let err = target.deploy(&request).await.expect_err("refused");
    assert!(
        matches!(&err, DeployError::Rejected(m) if m.contains("../escape.map")),
        "{err}"
    );
}
