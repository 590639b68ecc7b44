//! Faults injected into real processes, and what haptor does about them: the `haptor local`
//! binary SIGKILLed while a reload it asked for is still in flight (the haproxy master held
//! with SIGSTOP), haproxy SIGKILLed during a reload, the master socket deleted under a
//! running haproxy, the manifest folder deleted and recreated, and, in a cluster, the real
//! kube-apiserver stopped and started again under a running `haptor run`. Every test sends
//! real HTTP through the real haproxy (or reads what the real API server holds) to show the
//! routes keep answering or converge, and counts reloads — the master's own count in `show
//! proc`, haptor's "deployed with a reload" log lines, `haptor_deployments_total` and, in a
//! cluster, `haptor_reconciliations_total` — so that "no duplicate reload" and "no spurious
//! reload" are checked, not assumed. The in-cluster test needs the peers
//! `scripts/test-peers kube-apiserver etcd` builds (`TEST_ASSET_KUBE_APISERVER`,
//! `TEST_ASSET_ETCD`).

use crate::haptor_run;
use crate::kube_kit;
use crate::local;

use std::path::Path;
use std::time::{Duration, Instant};

use local::{Local, Setup, backend, eventually, get, pid_alive, sample, signal};

/// A backend's port.
fn port(name: &'static str) -> u16 {
    backend(name).port
}

/// A Service `name` with an EndpointSlice to `backend_port` and an Ingress for `host`: its
/// annotation gives it a backend of its own (a plain Service would take a pool member at
/// runtime), so deploying it takes one reload.
fn new_app(name: &str, host: &str, backend_port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default, annotations: {{haproxy.org/timeout-server: 30s}}}}\nspec:\n  ports: [{{name: http, port: 80}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: {name}}}\nports: [{{name: http, port: {backend_port}}}]\nendpoints:\n  - addresses: [\"127.0.0.1\"]\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: {host}\n      http:\n        paths:\n          - {{path: /, pathType: Prefix, backend: {{service: {{name: {name}, port: {{number: 80}}}}}}}}\n"
    )
}

/// The body `host` answers with, if it answers 200.
fn body(local: &Local, host: &str) -> Option<String> {
    get(local.http, host, "/")
        .filter(|(status, _)| *status == 200)
        .map(|(_, body)| body)
}

/// Waits until `host` answers with `backend`'s greeting.
fn wait_routed(local: &Local, host: &str, backend: &str, timeout: Duration) {
    let expected = format!("hello from {backend}\n");
    eventually(&format!("{host} routed to {backend}"), timeout, || {
        (body(local, host).as_deref() == Some(expected.as_str())).then_some(())
    });
}

/// How many deployments haptor logged as reloading haproxy (its log spans every run of the
/// folder).
fn reloading_deployments(local: &Local) -> usize {
    local.log_text().matches("deployed with a reload").count()
}

/// `haptor_deployments_total` of the local instance (succeeded and failed ones).
fn deployments(local: &Local) -> f64 {
    sample(
        &local.metrics_text(),
        "haptor_deployments_total{instance=\"local\"}",
    )
    .unwrap_or(0.0)
}

/// The master's reload count and its current worker, from `show proc`; `None` while the
/// master CLI does not answer (for a moment after each reload, while the master executes
/// itself again, it refuses connections).
fn master_state(work: &Path) -> Option<(u32, u32)> {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(work.join("master.sock")).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"show proc\n").ok()?;
    stream.shutdown(std::net::Shutdown::Write).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let info = haptor::drivers::local::parse_show_proc(&reply)?;
    Some((info.reloads, info.current_worker?))
}

/// Sends `signal` to every pid at once.
fn signal_all(pids: &[String], signal: &str) {
    std::process::Command::new("kill")
        .arg(signal)
        .args(pids)
        .status()
        .expect("kill runs");
}

/// Watches the work directory's `haproxy.cfg` from a thread of its own and sends `signal`
/// to `pids` the moment it mentions `marker`, i.e. as soon as the deployment that writes it
/// has written its files and is about to reload (or reloading). Returns the thread, which
/// gives whether it saw the marker within 30 s.
fn on_config_written(
    work: &Path,
    marker: &str,
    pids: Vec<String>,
    signal: &'static str,
) -> std::thread::JoinHandle<bool> {
    let config = work.join("haproxy.cfg");
    let marker = marker.to_string();
    std::thread::spawn(move || {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if std::fs::read_to_string(&config).is_ok_and(|text| text.contains(&marker)) {
                signal_all(&pids, signal);
                return true;
            }
            std::thread::yield_now();
        }
        false
    })
}

/// Requests `host` every 20 ms from a thread of its own until stopped; counts the answers
/// from one of `backends` and everything else.
struct Prober {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(usize, Vec<String>)>>,
}

impl Prober {
    fn start(http: u16, host: &'static str, backends: &'static [&'static str]) -> Prober {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let expected: Vec<String> = backends
            .iter()
            .map(|b| format!("hello from {b}\n"))
            .collect();
        let thread = std::thread::spawn(move || {
            let (mut answered, mut failures) = (0, Vec::new());
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                match get(http, host, "/") {
                    Some((200, body)) if expected.contains(&body) => answered += 1,
                    other => failures.push(format!("{other:?}")),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (answered, failures)
        });
        Prober {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops it: (answered by a backend, every other outcome).
    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("the prober")
    }

    /// Stops probing and fails the test if any request went unanswered `during` what the
    /// test did; prints how many were answered.
    fn assert_all_answered(self, during: &str) {
        let (answered, failures) = self.finish();
        eprintln!(
            "{during}: {answered} requests answered, {} not",
            failures.len()
        );
        assert!(
            failures.is_empty(),
            "{} of {} requests failed {during}: {failures:?}",
            failures.len(),
            answered + failures.len()
        );
    }
}

/// Stays in the loop until `check` has held for `period` (checked every 100 ms); fails the
/// test the first time it does not, naming `what`.
fn holds_for(what: &str, period: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let started = Instant::now();
    while started.elapsed() < period {
        if let Err(why) = check() {
            panic!(
                "{what} stopped holding after {:?}: {why}",
                started.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_haptor_killed_while_its_reload_is_in_flight_converges_after_a_restart_without_reloading_the_config_already_on_disk()
 {
    let (a, b) = (port("app-a"), port("app-b"));
    let mut local = Setup::quickstart(a, b).start();
    local.wait_ready(Duration::from_secs(60));
    wait_routed(&local, "a.localhost", "app-a", Duration::from_secs(30));
    let work = local.work();

    // A deployment that takes one reload; the master is stopped the moment its files are
    // written, so the reload hangs unconfirmed. A master fast enough to finish before the
    // stop lands is let go and the next app tried.
    let mut caught = None;
    for name in ["app-d", "app-e", "app-f", "app-g"] {
        let host = format!("{}.localhost", &name[4..]);
        let master = local.master_pid();
        let logged = reloading_deployments(&local);
        let watcher = on_config_written(&work, name, vec![master.clone()], "-STOP");
        local.write(&format!("{name}.yaml"), &new_app(name, &host, a));
        assert!(
            watcher.join().expect("the watcher"),
            "haptor wrote no haproxy.cfg naming {name}"
        );
        std::thread::sleep(Duration::from_millis(1500));
        if reloading_deployments(&local) == logged {
            caught = Some((name, host, master));
            break;
        }
        eprintln!("the reload to {name} finished before the master stopped; trying another");
        signal(&master, "-CONT");
        wait_routed(&local, &host, "app-a", Duration::from_secs(30));
    }
    let (name, host, orphan) = caught.expect("one of four reloads was caught in flight");
    let desired = std::fs::read_to_string(work.join("haproxy.cfg")).expect("haproxy.cfg");
    assert!(desired.contains(name), "the files on disk are the new ones");
    let reloads_logged = reloading_deployments(&local);

    // haptor dies mid-deployment; the master, let go, finishes whatever it had received.
    signal(&local.pid(), "-KILL");
    let _ = local.child.wait();
    signal(&orphan, "-CONT");
    assert!(pid_alive(&orphan), "SIGKILL leaves haproxy running");

    let prober = Prober::start(local.http, "a.localhost", &["app-a"]);
    local.respawn();
    eventually(
        "the orphaned haproxy stopped and replaced",
        Duration::from_secs(40),
        || {
            let master = local.master_pid();
            (!pid_alive(&orphan) && pid_alive(&master) && master != orphan).then_some(())
        },
    );
    local.wait_ready(Duration::from_secs(60));
    // The new haproxy started beside the orphan, which was soft-stopped: no request refused.
    prober.assert_all_answered("while the restarted haptor replaced the orphan");
    // Converged: the change that was in flight serves, and so does everything before it.
    wait_routed(&local, &host, "app-a", Duration::from_secs(30));
    wait_routed(&local, "a.localhost", "app-a", Duration::from_secs(30));
    wait_routed(&local, "b.localhost", "app-b", Duration::from_secs(30));

    // The new haproxy started on the files the killed haptor had written, which are already
    // the render: the restarted haptor's first deployment changes nothing and reloads
    // nothing, and the drift checks (every 500 ms) find nothing to repair.
    let (reloads, worker) = eventually("the new master to answer", Duration::from_secs(30), || {
        master_state(&work)
    });
    holds_for(
        "no reload after the restart",
        Duration::from_secs(4),
        || {
            let now = master_state(&work).ok_or("the master CLI does not answer")?;
            if now != (reloads, worker) {
                return Err(format!(
                    "show proc went from {:?} to {now:?}",
                    (reloads, worker)
                ));
            }
            let logged = reloading_deployments(&local);
            if logged != reloads_logged {
                return Err(format!(
                    "haptor logged {} reloading deployment(s) after the restart",
                    logged - reloads_logged
                ));
            }
            Ok(())
        },
    );
    assert_eq!(reloads, 0, "the new master never reloaded");
    assert!(
        deployments(&local) >= 1.0,
        "the restarted haptor deployed (an unchanged deployment)"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("haproxy.cfg")).expect("haproxy.cfg"),
        desired,
        "the files on disk stayed as the killed haptor wrote them"
    );
    eprintln!(
        "caught {name}'s reload in flight; after the restart: master reloads {reloads}, \
         reloading deployments logged over both runs {reloads_logged}"
    );
}

#[test]
fn haproxy_killed_during_a_reload_is_started_again_by_haptor_the_failure_is_reported_and_the_change_lands_with_one_reload()
 {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = Setup::quickstart(a, b).start();
    local.wait_ready(Duration::from_secs(60));
    wait_routed(&local, "a.localhost", "app-a", Duration::from_secs(30));
    let work = local.work();
    let master = local.master_pid();
    let (_, worker) = eventually("show proc", Duration::from_secs(30), || master_state(&work));
    let logged = reloading_deployments(&local);

    // The whole haproxy (master and worker) is killed the moment the reload's files are
    // written.
    let watcher = on_config_written(
        &work,
        "app-d",
        vec![master.clone(), worker.to_string()],
        "-KILL",
    );
    local.write("app-d.yaml", &new_app("app-d", "d.localhost", b));
    assert!(
        watcher.join().expect("the watcher"),
        "haptor wrote no haproxy.cfg naming app-d"
    );

    let restarted = eventually(
        "haptor to start a new haproxy",
        Duration::from_secs(30),
        || {
            let now = local.master_pid();
            (now != master && pid_alive(&now)).then_some(now)
        },
    );
    assert!(!pid_alive(&master), "the killed master is gone");
    // The change lands and every old route answers again.
    wait_routed(&local, "d.localhost", "app-b", Duration::from_secs(60));
    wait_routed(&local, "a.localhost", "app-a", Duration::from_secs(30));
    wait_routed(&local, "b.localhost", "app-b", Duration::from_secs(30));

    let log = local.log_text();
    assert!(
        log.contains("haproxy exited; starting it again"),
        "haptor noticed its haproxy died:\n{log}"
    );
    let errors = local.debug_get("/debug/vars/errors");
    assert!(
        errors.contains("haproxy exited"),
        "the death is reported in /debug/vars/errors: {errors}"
    );

    // Exactly one reloading deployment took the change (the interrupted one, confirmed by
    // the new haproxy, or its retry), and nothing reloads after it.
    let settled = eventually("the new master to answer", Duration::from_secs(30), || {
        master_state(&work)
    });
    holds_for(
        "nothing more to reload",
        Duration::from_secs(4),
        || match master_state(&work) {
            Some(now) if now == settled => Ok(()),
            other => Err(format!("show proc went from {settled:?} to {other:?}")),
        },
    );
    assert!(
        settled.0 <= 1,
        "the new master reloaded at most once (the retried deployment): {settled:?}"
    );
    assert_eq!(
        reloading_deployments(&local),
        logged + 1,
        "one reloading deployment took the change"
    );
    let failures = sample(
        &local.metrics_text(),
        "haptor_deployment_errors_total{error=\"unreachable\",instance=\"local\"}",
    )
    .unwrap_or(0.0);
    eprintln!(
        "haproxy {master} killed during the reload, {restarted} started; its reloads {}, \
         failed deployments (unreachable) {failures}",
        settled.0
    );
}

#[test]
fn a_deleted_master_socket_is_reported_and_haproxy_is_started_again_so_the_next_deployments_land() {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = Setup::quickstart(a, b).start();
    local.wait_ready(Duration::from_secs(60));
    wait_routed(&local, "a.localhost", "app-a", Duration::from_secs(30));
    let work = local.work();
    let master = local.master_pid();

    let prober = Prober::start(local.http, "a.localhost", &["app-a"]);
    std::fs::remove_file(work.join("master.sock")).expect("the master socket is there");
    // haproxy itself keeps serving meanwhile.
    wait_routed(&local, "a.localhost", "app-a", Duration::from_secs(5));
    let errors = eventually(
        "the missing socket in /debug/vars/errors",
        Duration::from_secs(20),
        || {
            let errors = local.debug_get("/debug/vars/errors");
            errors.contains("master.sock").then_some(errors)
        },
    );
    assert!(errors.contains("haproxy"), "{errors}");
    let restarted = eventually(
        "a new haproxy with a master socket",
        Duration::from_secs(30),
        || {
            let now = local.master_pid();
            (now != master && pid_alive(&now) && master_state(&work).is_some()).then_some(now)
        },
    );
    eventually(
        "the unreachable master stopped gracefully",
        Duration::from_secs(30),
        || (!pid_alive(&master)).then_some(()),
    );
    // The new haproxy started beside the old one, which was soft-stopped: not one request
    // went unanswered.
    prober.assert_all_answered("during the takeover");

    // A change needing a reload and one going through the runtime API both land.
    local.write("app-d.yaml", &new_app("app-d", "d.localhost", b));
    wait_routed(&local, "d.localhost", "app-b", Duration::from_secs(30));
    local.move_first_endpoint_port(a, b);
    wait_routed(&local, "a.localhost", "app-b", Duration::from_secs(30));
    let (reloads, _) = eventually("show proc", Duration::from_secs(30), || master_state(&work));
    assert_eq!(
        reloads, 1,
        "the new master reloaded once, for the new backend"
    );
    eprintln!("master {master} lost its socket; {restarted} took over; its reloads {reloads}");
}

#[test]
fn a_deleted_manifest_folder_keeps_the_last_good_routes_serving_and_its_recreation_is_converged_on()
{
    let (a, b) = (port("app-a"), port("app-b"));
    let local = Setup::quickstart(a, b).start();
    local.wait_ready(Duration::from_secs(60));
    wait_routed(&local, "a.localhost", "app-a", Duration::from_secs(30));
    let dir = local.dir.clone();
    let files: Vec<(std::ffi::OsString, String)> = std::fs::read_dir(&dir)
        .expect("the folder")
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).expect("a manifest");
            (e.file_name(), text)
        })
        .collect();
    assert!(files.len() >= 3, "the quickstart's manifests and config");
    let master = local.master_pid();
    let logged = reloading_deployments(&local);

    // The whole folder goes, haptor's work directory (in it) included.
    let prober = Prober::start(local.http, "a.localhost", &["app-a", "app-b"]);
    std::fs::remove_dir_all(&dir).expect("rm -rf the folder");
    let errors = eventually(
        "the missing folder reported",
        Duration::from_secs(30),
        || {
            let errors = local.debug_get("/debug/vars/errors");
            errors.contains("cannot read the folder").then_some(errors)
        },
    );
    // While it is gone, the last good routes keep answering: nothing is taken as deleted.
    holds_for(
        "the last good routes answering",
        Duration::from_secs(3),
        || {
            for (host, backend) in [("a.localhost", "app-a"), ("b.localhost", "app-b")] {
                let answer = body(&local, host);
                if answer.as_deref() != Some(format!("hello from {backend}\n").as_str()) {
                    return Err(format!("{host} answered {answer:?}"));
                }
            }
            Ok(())
        },
    );
    assert_eq!(
        errors.matches("cannot read the folder").count(),
        1,
        "the missing folder is reported once, not on every scan: {errors}"
    );
    assert_eq!(
        reloading_deployments(&local),
        logged,
        "nothing was deployed while the folder was gone"
    );
    assert_eq!(
        local.log_text().matches("cannot read the folder").count(),
        1,
        "the missing folder is logged once, not on every scan (10 a second)"
    );

    // The folder comes back with its files (written beside it, then moved into place) and
    // one change: app-a's endpoints now at app-b's port.
    let staging = dir.with_file_name("staging");
    std::fs::create_dir(&staging).expect("mkdir");
    for (file, text) in &files {
        let text = if file == "apps.yaml" {
            text.replacen(
                &format!("ports: [{{name: http, port: {a}}}]"),
                &format!("ports: [{{name: http, port: {b}}}]"),
                1,
            )
        } else {
            text.clone()
        };
        std::fs::write(staging.join(file), text).expect("write a manifest");
    }
    std::fs::rename(&staging, &dir).expect("the folder recreated");
    wait_routed(&local, "a.localhost", "app-b", Duration::from_secs(60));
    wait_routed(&local, "b.localhost", "app-b", Duration::from_secs(30));
    // haptor's work directory is back, with a master answering on its socket.
    let work = local.work();
    eventually(
        "the work directory restored",
        Duration::from_secs(30),
        || master_state(&work),
    );
    eventually(
        "the old haproxy soft-stopped",
        Duration::from_secs(30),
        || (!pid_alive(&master)).then_some(()),
    );
    prober.assert_all_answered("while the folder was gone and haproxy was replaced");
    // And a later change lands as usual.
    local.write("app-d.yaml", &new_app("app-d", "d.localhost", a));
    wait_routed(&local, "d.localhost", "app-a", Duration::from_secs(30));
    eprintln!(
        "master {master} before, {} after; reloading deployments {} before, {} after",
        local.master_pid(),
        logged,
        reloading_deployments(&local)
    );
    for line in local.log_text().lines().filter(|l| {
        [
            "deployed with",
            "deployed without",
            "haproxy started",
            "gracefully",
            "wrote the last",
            "is gone",
        ]
        .iter()
        .any(|m| l.contains(m))
    }) {
        eprintln!("  {line}");
    }
}

mod in_cluster {
    use std::time::Duration;

    use haptor::pure::config::HAProxyCfg;
    use k8s_openapi::api::core::v1::Service;
    use kube::Client;
    use kube::api::{Api, PostParams};
    use serde_json::json;

    use super::haptor_run::{Replica, create_ingress, library_config, no_election, wait_for};
    use super::kube_kit::{Kit, KitOptions};

    async fn rendered(replica: &Replica) -> Option<String> {
        replica
            .get(replica.debug, "/debug/vars/rendered")
            .await
            .map(|(_, body)| body)
    }

    /// The published HAProxyCfg's resourceVersion and checksum, once its publication is
    /// complete. One publication of a new configuration is two writes, the spec and then the
    /// status (whose `ContentPublished` message gives the new size): between them the
    /// object is half-published, and this answers `None`.
    async fn published(client: &Client, ns: &str) -> Option<(String, String)> {
        let cfg = Api::<HAProxyCfg>::namespaced(client.clone(), ns)
            .get_opt("haptor-config")
            .await
            .ok()??;
        let size = format!("({} bytes", cfg.spec.size?);
        let status_follows_spec = cfg
            .status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == "ContentPublished" && c.message.contains(&size));
        status_follows_spec.then_some((cfg.metadata.resource_version?, cfg.spec.checksum))
    }

    async fn renders(replica: &Replica) -> f64 {
        replica
            .metric("haptor_reconciliations_total")
            .await
            .unwrap_or(-1.0)
    }

    /// A kit of its own (its apiserver is stopped and started again on the same port and
    /// etcd), a namespace with Service `web`, its EndpointSlice and Ingress `web.example`,
    /// the Ingress library as config, and `haptor run` on it.
    async fn restart_world(prefix: &str) -> (Kit, Client, String, Replica) {
        let kit = Kit::start_with(KitOptions::default());
        let client = kit.admin().await;
        let ns = kit.temp_ns(prefix).await;
        let service: Service = serde_json::from_value(json!({
            "metadata": { "name": "web" },
            "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] },
        }))
        .expect("a Service");
        Api::<Service>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &service)
            .await
            .expect("the Service is created");
        kit.endpoint_slice(&ns, "web", &["10.244.0.5"], 8080)
            .await
            .expect("the EndpointSlice is created");
        create_ingress(&client, &ns, "web", "haptor", "web.example").await;
        Api::<haptor::pure::config::HAProxyTemplateConfig>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &library_config(&ns, no_election()))
            .await
            .expect("the config is created");
        let replica = Replica::start(kit.admin_kubeconfig(), &ns, "solo");
        (kit, client, ns, replica)
    }

    #[tokio::test]
    async fn an_api_server_restarted_under_a_running_controller_resumes_its_watches_loses_no_change_and_renders_nothing_new()
     {
        let (kit, client, ns, replica) = restart_world("fault-restart").await;
        wait_for("web.example published", &[&replica], || async {
            let (_, checksum) = published(&client, &ns).await?;
            let rendered = rendered(&replica).await?;
            (rendered.contains("web.example") && !checksum.is_empty()).then_some(())
        })
        .await;
        wait_for("ready", &[&replica], || async {
            (replica.readyz().await?.0 == 200).then_some(())
        })
        .await;
        // Settled: no render for a second and a half.
        let mut before = renders(&replica).await;
        loop {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let now = renders(&replica).await;
            if now == before {
                break;
            }
            before = now;
        }
        let published_before = published(&client, &ns).await.expect("the HAProxyCfg");

        // The apiserver goes away right after a change (the watch may or may not have
        // delivered it) and stays away for a few seconds, then comes back.
        create_ingress(&client, &ns, "last-before", "haptor", "last-before.example").await;
        let stopped_in = kit.stop_apiserver(Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(4)).await;
        let started_in = kit.start_apiserver();
        eprintln!(
            "kube-apiserver stopped in {:.1} s, ready again in {:.1} s",
            stopped_in.as_secs_f64(),
            started_in.as_secs_f64()
        );
        let client = kit.admin().await;
        wait_for("the change made before the stop", &[&replica], || async {
            rendered(&replica)
                .await
                .filter(|r| r.contains("last-before.example"))
        })
        .await;
        let after_change = wait_for(
            "the render of that change to be published",
            &[&replica],
            || async {
                let now = published(&client, &ns).await?;
                (now.1 != published_before.1).then_some(now)
            },
        )
        .await;
        // The render is counted through an event the Metrics actor takes from its queue in
        // its own time: the HAProxyCfg can show it first. Wait for the count.
        wait_for("the render of that change counted", &[&replica], || async {
            (renders(&replica).await >= before + 1.0).then_some(())
        })
        .await;
        let renders_after = renders(&replica).await;
        let log_before_quiet = replica.log_text().len();

        // Once resumed, the watches bring nothing new: no render, no publication.
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(
            renders(&replica).await,
            renders_after,
            "nothing was rendered again after the watches resumed:\n{}",
            &replica.log_text()[log_before_quiet..]
        );
        assert_eq!(
            published(&client, &ns).await,
            Some(after_change.clone()),
            "the HAProxyCfg was not written again"
        );
        assert!(
            renders_after - before <= 1.0,
            "one render for the one change, none for the resumed watches: {before} -> \
             {renders_after}"
        );

        // And a change after the restart is seen and published.
        create_ingress(&client, &ns, "after", "haptor", "after.example").await;
        wait_for("the change after the restart", &[&replica], || async {
            let now = published(&client, &ns).await?;
            let rendered = rendered(&replica).await?;
            (rendered.contains("after.example") && now.1 != after_change.1).then_some(())
        })
        .await;
        assert_eq!(
            replica.readyz().await.map(|r| r.0),
            Some(200),
            "the replica stayed ready"
        );
        eprintln!(
            "renders: {before} before the restart, {renders_after} after it (one change), \
             {} after the next change",
            renders(&replica).await
        );
    }

    /// A change made the moment a restarted apiserver answers again is seen: the watches
    /// resume by themselves. How long that takes is decided by the watches' retry
    /// (`drivers::kube::watch_retry`), not by the server, and is printed as a figure (about
    /// 2 s with it, about 21 s with kube-rs's default back-off after this 8 s outage).
    #[tokio::test]
    async fn a_change_made_as_soon_as_a_restarted_api_server_answers_is_seen_and_the_log_says_when_the_watches_resumed()
     {
        let (kit, _, ns, replica) = restart_world("fault-resume").await;
        wait_for("web.example rendered", &[&replica], || async {
            rendered(&replica)
                .await
                .filter(|r| r.contains("web.example"))
        })
        .await;

        // Down long enough for the watches to retry several times, then back.
        kit.stop_apiserver(Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(8)).await;
        kit.start_apiserver();
        let answering = std::time::Instant::now();
        let client = kit.admin().await;
        create_ingress(&client, &ns, "after", "haptor", "after.example").await;
        wait_for(
            "the change made as the apiserver answered",
            &[&replica],
            || async {
                rendered(&replica)
                    .await
                    .filter(|r| r.contains("after.example"))
            },
        )
        .await;
        let seen = answering.elapsed();
        eprintln!(
            "figures: a change made as the restarted apiserver answered was rendered {:.1} s later",
            seen.as_secs_f64()
        );
        // The log says when the watches actually resumed, not only that they failed.
        let log = replica.log_text();
        let resumed = log
            .lines()
            .find(|l| l.contains("the watch of ingresses resumed after"))
            .unwrap_or_else(|| panic!("no resumption is logged:\n{log}"));
        eprintln!("figures: {}", resumed.trim());
    }
}
