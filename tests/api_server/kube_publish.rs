//! The HAProxyCfg writer (`drivers::kube::publish::KubePublishSink`) against a real
//! kube-apiserver and etcd (the kit of `tests/support/kube.rs`, with the CRDs of
//! `deploy/crds/`; each test in a namespace of its own): the object it creates carries the
//! owner reference and the status; a large configuration is stored gzip+base64 and decodes
//! back; one too large even then is omitted, with `ContentPublished=False`, and the server
//! takes it; an unchanged spec is not applied again while the status changes; a sink the
//! server refuses says what to check once the refusal has lasted, and keeps retrying.
//!
//! The sink writes in the background, so each test polls the object (or the sink's write
//! counters) with a deadline.

use crate::kube_kit;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptor::drivers::kube::publish::KubePublishSink;
use haptor::pure::config::published::{
    CONTENT_PUBLISHED, CONTENT_TOO_LARGE, ENCODED_LIMIT, GZIP_BASE64, OMITTED, PUBLISHED,
    TEXT_LIMIT, decode_content,
};
use haptor::pure::config::{
    HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus, HAProxyTemplateConfig, InstanceStatus,
    config_from_value,
};
use haptor::seams::PublishSink;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use prometheus::{Registry, TextEncoder};
use serde_json::json;
use sha2::{Digest, Sha256};

use kube_kit::Kit;

/// The HAProxyCfg's name in every test.
const NAME: &str = "haptor-config";
/// How long a test waits for the sink to have written what it expects.
const DEADLINE: Duration = Duration::from_secs(20);

/// A sink writing `HAProxyCfg` `ns/NAME` through `client`, its counters in a registry of
/// its own.
struct Publishing {
    sink: KubePublishSink,
    task: tokio::task::JoinHandle<()>,
    registry: Registry,
}

impl Publishing {
    fn start(client: Client, ns: &str) -> Publishing {
        let (sink, task) = KubePublishSink::start(client, ns.to_string(), NAME.to_string());
        let registry = Registry::new();
        sink.register_metrics(&registry)
            .expect("the write counters register");
        Publishing {
            sink,
            task,
            registry,
        }
    }

    /// `haptor_kube_writes_total{object="haproxycfg",part,result}`.
    fn writes(&self, part: &str, result: &str) -> u64 {
        let text = TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .expect("the metrics encode");
        let series = format!(
            r#"haptor_kube_writes_total{{object="haproxycfg",part="{part}",result="{result}"}} "#
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    }

    /// Waits until at least `n` writes of `part` ended with `result`.
    async fn wait_for_writes(&self, part: &str, result: &str, n: u64) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while self.writes(part, result) < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} {part} write(s) with result {result} within {DEADLINE:?}; saw {}",
                self.writes(part, result)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        drop(self.sink);
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("the task ends once the sink is dropped")
            .expect("the task did not panic");
    }
}

/// Creates the HAProxyTemplateConfig `NAME` in `ns` and returns the owner reference to it
/// that `haptor run` gives the sink.
async fn owning_config(client: &Client, ns: &str) -> OwnerReference {
    let config = config_from_value(
        "test",
        json!({
            "apiVersion": "haptor.dev/v1alpha1",
            "kind": "HAProxyTemplateConfig",
            "metadata": { "name": NAME },
            "spec": { "haproxyConfig": { "template": "global\n  daemon\n" } },
        }),
    )
    .expect("a config");
    let created = Api::<HAProxyTemplateConfig>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &config)
        .await
        .expect("the config is created");
    OwnerReference {
        api_version: "haptor.dev/v1alpha1".into(),
        kind: "HAProxyTemplateConfig".into(),
        name: created.name_any(),
        uid: created.uid().expect("a stored object has a uid"),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn spec_with(content: String) -> HAProxyCfgSpec {
    let checksum = format!("sha256:{}", hex(&Sha256::digest(content.as_bytes())));
    HAProxyCfgSpec {
        path: "/etc/haproxy/haproxy.cfg".into(),
        content,
        checksum,
        ..HAProxyCfgSpec::default()
    }
}

/// A status of the named instances, each deployed with `checksum`.
fn status_of(instances: &[&str], checksum: &str) -> HAProxyCfgStatus {
    HAProxyCfgStatus {
        instances: instances
            .iter()
            .map(|name| InstanceStatus {
                name: name.to_string(),
                deployed_at: Some("2026-12-01T10:00:00Z".into()),
                checksum: Some(checksum.to_string()),
                ..InstanceStatus::default()
            })
            .collect(),
        ..HAProxyCfgStatus::default()
    }
}

/// A haproxy.cfg-like text of `len` bytes that compresses well.
fn compressible(len: usize) -> String {
    let mut out = String::from("global\n  daemon\n\nbackend web\n");
    let mut n = 0;
    while out.len() < len {
        out.push_str(&format!(
            "  server web-{n} 10.{}.{}.{}:8080 check weight 100\n",
            n / 65536 % 256,
            n / 256 % 256,
            n % 256
        ));
        n += 1;
    }
    out.truncate(len);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Text of `len` bytes that gzip barely compresses: the hex of a SHA-256 chain.
fn incompressible(len: usize) -> String {
    let mut out = String::with_capacity(len + 64);
    let mut digest = Sha256::digest(b"haptor");
    while out.len() < len {
        out.push_str(&hex(&digest));
        digest = Sha256::digest(digest);
    }
    out.truncate(len);
    out
}

/// Polls the HAProxyCfg until `done` holds, or fails naming the last state seen.
async fn wait_for_object(
    api: &Api<HAProxyCfg>,
    what: &str,
    done: impl Fn(&HAProxyCfg) -> bool,
) -> HAProxyCfg {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let current = api.get_opt(NAME).await.expect("the HAProxyCfg can be read");
        if let Some(object) = &current
            && done(object)
        {
            return object.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {DEADLINE:?}; the object is {:?}",
            current.map(|o| (o.metadata, o.status))
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn content_condition(object: &HAProxyCfg) -> Option<Condition> {
    object
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == CONTENT_PUBLISHED)
        .cloned()
}

fn has_instances(object: &HAProxyCfg, names: &[&str]) -> bool {
    object.status.as_ref().is_some_and(|s| {
        s.instances
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            == names
    })
}

#[tokio::test]
async fn the_sink_creates_the_haproxycfg_with_its_owner_reference_and_its_status() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("publish").await;
    let owner = owning_config(&client, &ns).await;
    let publishing = Publishing::start(client.clone(), &ns);
    publishing.sink.set_owner(owner.clone());
    let spec = spec_with("global\n  daemon\n".into());
    publishing
        .sink
        .publish(&spec, &status_of(&["haproxy-0"], &spec.checksum));

    let api = Api::<HAProxyCfg>::namespaced(client, &ns);
    let object = wait_for_object(&api, "the status is written", |o| {
        has_instances(o, &["haproxy-0"])
    })
    .await;
    assert_eq!(object.metadata.owner_references, Some(vec![owner]));
    assert_eq!(object.spec.content, spec.content);
    assert_eq!(object.spec.content_encoding, None);
    assert_eq!(object.spec.size, Some(16));
    assert_eq!(object.spec.checksum, spec.checksum);
    assert_eq!(object.spec.path, "/etc/haproxy/haproxy.cfg");
    let instance = &object.status.as_ref().expect("a status").instances[0];
    assert_eq!(instance.checksum.as_deref(), Some(spec.checksum.as_str()));
    let condition = content_condition(&object).expect("the ContentPublished condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", PUBLISHED)
    );
    // Both parts are haptor's: the object by an apply, the status by one through /status.
    let managers: Vec<(Option<&str>, Option<&str>, Option<&str>)> = object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.as_deref(),
                m.operation.as_deref(),
                m.subresource.as_deref(),
            )
        })
        .collect();
    assert!(
        managers.contains(&(Some("haptor"), Some("Apply"), None))
            && managers.contains(&(Some("haptor"), Some("Apply"), Some("status"))),
        "{managers:?}"
    );
    publishing.stop().await;
}

#[tokio::test]
async fn a_300_kib_configuration_is_stored_gzip_base64_and_decodes_back_to_the_original() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("publish-gzip").await;
    let publishing = Publishing::start(client.clone(), &ns);
    let content = compressible(300 * 1024);
    assert!(content.len() > TEXT_LIMIT);
    let spec = spec_with(content.clone());
    publishing
        .sink
        .publish(&spec, &status_of(&["haproxy-0"], &spec.checksum));

    let api = Api::<HAProxyCfg>::namespaced(client, &ns);
    let object = wait_for_object(&api, "the status is written", |o| {
        has_instances(o, &["haproxy-0"])
    })
    .await;
    assert_eq!(object.spec.content_encoding.as_deref(), Some(GZIP_BASE64));
    assert_eq!(object.spec.size, Some(300 * 1024));
    assert_eq!(object.spec.checksum, spec.checksum);
    assert!(
        object.spec.content.len() < content.len() / 4,
        "stored in {} bytes",
        object.spec.content.len()
    );
    assert_eq!(
        decode_content(&object.spec).expect("the stored content decodes"),
        content
    );
    let condition = content_condition(&object).expect("the ContentPublished condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", PUBLISHED)
    );
    assert!(
        condition.message.contains(GZIP_BASE64),
        "{}",
        condition.message
    );
    publishing.stop().await;
}

#[tokio::test]
async fn a_configuration_whose_compressed_form_exceeds_1_mib_is_omitted_with_a_content_published_false_condition()
 {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("publish-omitted").await;
    let publishing = Publishing::start(client.clone(), &ns);
    let size = 2 * 1024 * 1024;
    let spec = spec_with(incompressible(size));
    publishing
        .sink
        .publish(&spec, &status_of(&["haproxy-0"], &spec.checksum));

    let api = Api::<HAProxyCfg>::namespaced(client, &ns);
    let object = wait_for_object(&api, "the status is written", |o| {
        has_instances(o, &["haproxy-0"])
    })
    .await;
    assert_eq!(object.spec.content, "");
    assert_eq!(object.spec.content_encoding.as_deref(), Some(OMITTED));
    assert_eq!(object.spec.size, Some(size as u64));
    assert_eq!(object.spec.checksum, spec.checksum);
    assert!(decode_content(&object.spec).is_err());
    let condition = content_condition(&object).expect("the ContentPublished condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", CONTENT_TOO_LARGE)
    );
    assert!(
        condition.message.contains(&format!("{size} bytes"))
            && condition
                .message
                .contains(&format!("{ENCODED_LIMIT}-byte limit")),
        "{}",
        condition.message
    );
    assert_eq!(publishing.writes("spec", "failure"), 0);
    publishing.stop().await;
}

#[tokio::test]
async fn an_unchanged_spec_is_not_applied_again_while_only_the_status_changes() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("publish-unchanged").await;
    let owner = owning_config(&client, &ns).await;
    let publishing = Publishing::start(client.clone(), &ns);
    publishing.sink.set_owner(owner.clone());
    let spec = spec_with("global\n  daemon\n".into());
    publishing
        .sink
        .publish(&spec, &status_of(&["haproxy-0"], &spec.checksum));
    let api = Api::<HAProxyCfg>::namespaced(client.clone(), &ns);
    let first = wait_for_object(&api, "the first status is written", |o| {
        has_instances(o, &["haproxy-0"])
    })
    .await;
    assert_eq!(first.metadata.generation, Some(1));

    for instances in [
        &["haproxy-0", "haproxy-1"][..],
        &["haproxy-0", "haproxy-1", "haproxy-2"],
    ] {
        publishing
            .sink
            .publish(&spec, &status_of(instances, &spec.checksum));
        wait_for_object(&api, "the new status is written", |o| {
            has_instances(o, instances)
        })
        .await;
    }
    // The object can show a write before the sink has counted it: wait for the count.
    publishing.wait_for_writes("status", "success", 3).await;
    let after = api.get(NAME).await.expect("the HAProxyCfg");
    // The spec's generation stayed (the status subresource keeps status writes from
    // counting). The apiserver turns an identical apply into no change at all, so what
    // shows that none was sent is the sink's count of spec applies.
    assert_eq!(after.metadata.generation, Some(1));
    assert_eq!(publishing.writes("spec", "success"), 1);
    assert_eq!(publishing.writes("status", "success"), 3);
    // The condition held: its transition time is the first one.
    assert_eq!(
        content_condition(&after).map(|c| c.last_transition_time),
        content_condition(&first).map(|c| c.last_transition_time)
    );

    // A changed spec, and a changed owner, are applied.
    let changed = spec_with("global\n  daemon\n  maxconn 100\n".into());
    publishing
        .sink
        .publish(&changed, &status_of(&["haproxy-0"], &changed.checksum));
    let object = wait_for_object(&api, "the changed spec is applied", |o| {
        o.spec.checksum == changed.checksum && has_instances(o, &["haproxy-0"])
    })
    .await;
    assert_eq!(object.metadata.generation, Some(2));
    let mut other_owner = owner;
    other_owner.uid = "00000000-0000-4000-8000-000000000001".into();
    publishing.sink.set_owner(other_owner.clone());
    wait_for_object(&api, "the new owner is applied", |o| {
        o.metadata.owner_references.as_ref() == Some(&vec![other_owner.clone()])
    })
    .await;
    publishing.wait_for_writes("spec", "success", 3).await;
    assert_eq!(publishing.writes("spec", "success"), 3);
    publishing.stop().await;
}

/// Collects what a tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

// One thread: the sink's task runs where the test's log subscriber is the default.
#[tokio::test(flavor = "current_thread")]
async fn a_sink_without_rbac_tells_to_check_rbac_once_the_refusal_lasts_counts_the_failures_and_keeps_retrying()
 {
    let kit = Kit::shared();
    let ns = kit.temp_ns("publish-forbidden").await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _logs = tracing::subscriber::set_default(subscriber);
    let publishing = Publishing::start(kit.restricted().await, &ns);
    let spec = spec_with("global\n  daemon\n".into());
    publishing
        .sink
        .publish(&spec, &status_of(&["haproxy-0"], &spec.checksum));
    // The first attempt, then the retries 1 s and 3 s later: a refusal is told only once it
    // lasted two seconds (a restarted API server refuses for a moment), then as an error.
    publishing.wait_for_writes("spec", "failure", 2).await;
    assert!(
        !captured.text().contains("check RBAC"),
        "not yet: {}",
        captured.text()
    );
    publishing.wait_for_writes("spec", "failure", 3).await;
    assert_eq!(publishing.writes("spec", "success"), 0);
    assert_eq!(publishing.writes("status", "success"), 0);
    let logs = captured.text();
    assert!(
        logs.contains("ERROR")
            && logs.contains(&format!("HAProxyCfg {ns}/{NAME}"))
            && logs.contains("check RBAC")
            && logs.contains("retrying in"),
        "{logs}"
    );
    publishing.stop().await;
    let admin = Api::<HAProxyCfg>::namespaced(kit.admin().await, &ns);
    assert!(admin.get_opt(NAME).await.expect("a read").is_none());
}
