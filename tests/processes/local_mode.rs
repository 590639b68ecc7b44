//! `haptor local` end to end, as a user runs it: the binary on a temp copy of the quickstart,
//! real haproxy, real HTTP and HTTPS traffic to backends started by the test, and the folder
//! edited while it runs. Ports are picked free so tests can run side by side; the Ingress
//! library is used with its listen addresses moved to those ports.

use crate::local;
use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use local::{
    Local, Setup, backend, eventually, get, pid_alive, sample, signal, worker_and_reloads,
};

/// A backend's port.
fn port(name: &'static str) -> u16 {
    backend(name).port
}

fn start(app_a: u16, app_b: u16) -> Local {
    Setup::quickstart(app_a, app_b).start()
}

#[test]
fn haptor_local_routes_reconfigures_live_and_stops_cleanly() {
    let (a, b) = (port("app-a"), port("app-b"));
    let mut local = start(a, b);

    // Routing by host and path; unknown hosts get 404.
    let body = eventually("a.localhost routed", Duration::from_secs(30), || {
        get(local.http, "a.localhost", "/").filter(|(s, _)| *s == 200)
    });
    assert_eq!(body.1, "hello from app-a\n");
    assert_eq!(
        get(local.http, "a.localhost", "/api/x").map(|r| r.1),
        Some("hello from app-b\n".into())
    );
    assert_eq!(
        get(local.http, "b.localhost", "/").map(|r| r.1),
        Some("hello from app-b\n".into())
    );
    assert_eq!(
        get(local.http, "nope.localhost", "/").map(|r| r.0),
        Some(404)
    );

    // Editing an EndpointSlice moves traffic without a reload.
    let before = worker_and_reloads(&local.work());
    let counted = |reason: &str| {
        sample(
            &local.metrics_text(),
            &format!("haptor_reloads_total{{instance=\"local\",reason=\"{reason}\"}}"),
        )
        .unwrap_or(0.0)
    };
    let structural_before = counted("structural");
    local.move_first_endpoint_port(a, b);
    eventually(
        "a.localhost moved to app-b",
        Duration::from_secs(30),
        || get(local.http, "a.localhost", "/").filter(|(_, body)| body == "hello from app-b\n"),
    );
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "an endpoint change must not reload haproxy"
    );

    // A new Ingress to an existing Service only adds map entries: no reload at all.
    local.write(
        "new-route.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: c, namespace: default}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: c.localhost\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: app-b, port: {number: 80}}}}\n",
    );
    eventually("c.localhost routed", Duration::from_secs(30), || {
        get(local.http, "c.localhost", "/").filter(|(s, _)| *s == 200)
    });
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "a route to an existing backend is added live"
    );

    // A new Ingress with a new Service whose annotation gives it a backend of its own (a
    // plain one would take a pool member at runtime): exactly one reload.
    local.write(
        "new-app.yaml",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: app-d, namespace: default, annotations: {{haproxy.org/timeout-server: 7s}}}}\nspec:\n  ports: [{{name: http, port: 80}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: app-d-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: app-d}}\nports: [{{name: http, port: {a}}}]\nendpoints:\n  - addresses: [\"127.0.0.1\"]\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: d, namespace: default}}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: d.localhost\n      http:\n        paths:\n          - {{path: /, pathType: Prefix, backend: {{service: {{name: app-d, port: {{number: 80}}}}}}}}\n"
        ),
    );
    eventually("d.localhost routed", Duration::from_secs(30), || {
        get(local.http, "d.localhost", "/").filter(|(_, body)| body == "hello from app-a\n")
    });
    let after = worker_and_reloads(&local.work());
    assert_ne!(after.0, before.0, "a new worker serves after the reload");
    let reloads = |r: &str| r.parse::<u64>().unwrap_or(u64::MAX);
    assert_eq!(
        reloads(&after.1),
        reloads(&before.1) + 1,
        "exactly one reload"
    );
    // haptor counts it, with its reason; the endpoint and map changes before counted nothing.
    let structural = eventually("the reload counted", Duration::from_secs(30), || {
        Some(counted("structural")).filter(|n| *n > structural_before)
    });
    assert_eq!(structural, structural_before + 1.0);
    for other in ["runtime_refused", "runtime_unreachable", "state_unknown"] {
        assert_eq!(counted(other), 0.0, "{other}");
    }

    // TLS with the Secret's certificate, chosen by SNI.
    let output = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{}", local.https),
            "-servername",
            "secure.example",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs (scripts/test installs it)");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("CN = secure.example") || text.contains("CN=secure.example"),
        "{text}"
    );

    // A broken template: reported with template and line, old routes keep answering.
    let config = std::fs::read_to_string(local.dir.join("config.yaml")).expect("config");
    let broken = config.replacen(
        "    template: |\n      global\n",
        "    template: |\n      global\n      {{no_such_helper 1}}\n",
        1,
    );
    assert_ne!(config, broken, "the test breaks the haproxy.cfg template");
    local.write("config.yaml", &broken);
    let errors = eventually(
        "the template error in /debug/vars/errors",
        Duration::from_secs(30),
        || {
            let errors = local.debug_get("/debug/vars/errors");
            errors.contains("haproxy.cfg").then_some(errors)
        },
    );
    assert!(
        errors.contains("line 2"),
        "the error names the template line: {errors}"
    );
    assert_eq!(
        get(local.http, "b.localhost", "/").map(|r| r.1),
        Some("hello from app-b\n".into())
    );

    // The deployed haproxy.cfg edited behind haptor's back: the DriftMonitor restores it.
    let cfg_path = local.work().join("haproxy.cfg");
    let deployed = std::fs::read_to_string(&cfg_path).expect("deployed config");
    std::fs::write(&cfg_path, format!("{deployed}\n# edited by hand\n")).expect("tamper");
    eventually("the drift to be repaired", Duration::from_secs(30), || {
        (std::fs::read_to_string(&cfg_path).ok()? == deployed).then_some(())
    });

    // haproxy killed behind haptor's back: haptor starts it again and it serves the last config.
    let killed = local.master_pid();
    let killed_worker = worker_and_reloads(&local.work()).0;
    Command::new("kill")
        .args(["-9", &killed, &killed_worker])
        .status()
        .expect("kill -9");
    eventually("haproxy restarted", Duration::from_secs(30), || {
        let master = local.master_pid();
        (master != killed && pid_alive(&master)).then_some(())
    });
    eventually("routes answer again", Duration::from_secs(30), || {
        get(local.http, "d.localhost", "/").filter(|(s, _)| *s == 200)
    });

    // SIGINT stops everything, haproxy included.
    let master = local.master_pid();
    let workers = worker_and_reloads(&local.work()).0;
    assert!(pid_alive(&master));
    let pid = local.child.id().to_string();
    Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill -INT");
    let status = eventually("haptor local to exit", Duration::from_secs(20), || {
        local.child.try_wait().ok().flatten()
    });
    assert!(status.success(), "exit status {status}");
    eventually("haproxy gone", Duration::from_secs(30), || {
        (!pid_alive(&master) && !pid_alive(&workers)).then_some(())
    });
}

#[test]
fn a_malformed_manifest_is_reported_with_file_and_line_and_the_rest_keeps_serving() {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    eventually("a.localhost routed", Duration::from_secs(30), || {
        get(local.http, "a.localhost", "/").filter(|(s, _)| *s == 200)
    });
    local.write(
        "ingresses.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: [broken\n",
    );
    let errors = eventually("the manifest error", Duration::from_secs(30), || {
        let errors = local.debug_get("/debug/vars/errors");
        errors.contains("ingresses.yaml:").then_some(errors)
    });
    assert!(errors.contains("malformed YAML"), "{errors}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into()),
        "the last good Ingresses keep serving"
    );
}

#[test]
fn a_manifest_truncated_and_written_again_in_place_changes_nothing_and_keeps_serving() {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    eventually("a.localhost routed", Duration::from_secs(30), || {
        get(local.http, "a.localhost", "/").filter(|(s, _)| *s == 200)
    });
    let reconciliations =
        || sample(&local.metrics_text(), "haptor_reconciliations_total").expect("reconciliations");
    // The baseline once the count has stood still for a second: the start's reconciliations
    // can still be on their way to /metrics on a loaded machine.
    let before = eventually(
        "the reconciliations to settle",
        Duration::from_secs(30),
        || {
            let count = reconciliations();
            std::thread::sleep(Duration::from_secs(1));
            (reconciliations() == count).then_some(count)
        },
    );
    // As a shell's `>` or an editor writing in place does: the file is empty for a moment,
    // long enough for a scan or two (they run every 100 ms) to read it so.
    let text = local.read("ingresses.yaml");
    local.write("ingresses.yaml", "");
    std::thread::sleep(Duration::from_millis(150));
    local.write("ingresses.yaml", &text);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into()),
    );
    assert_eq!(
        reconciliations(),
        before,
        "the moment the file was empty reached no render"
    );
    // Emptied for good, its Ingresses go.
    local.write("ingresses.yaml", "");
    eventually(
        "a.localhost no longer routed",
        Duration::from_secs(30),
        || get(local.http, "a.localhost", "/").filter(|(s, _)| *s != 200),
    );
}

/// The quickstart's TLS Secret with a certificate haproxy cannot load (the PEM markers are
/// there, the body is not a certificate): `haproxy -c` rejects the render it ends up in.
fn with_broken_certificate(tls: &str) -> String {
    use base64::Engine;
    let broken = base64::engine::general_purpose::STANDARD.encode(
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
    );
    let mut lines: Vec<String> = tls.lines().map(String::from).collect();
    for line in &mut lines {
        if line.trim_start().starts_with("tls.crt:") {
            *line = format!("  tls.crt: {broken}");
        }
    }
    assert_ne!(lines.join("\n"), tls.trim_end(), "the test breaks tls.crt");
    lines.join("\n") + "\n"
}

#[test]
fn readyz_waits_for_the_first_deployment_naming_it_and_turns_ready_once_haproxy_took_the_config() {
    let (a, b) = (port("app-a"), port("app-b"));
    let mut setup = Setup::quickstart(a, b);
    // Before haptor starts: the folder's certificate is broken, so no render is deployable.
    let tls = std::fs::read_to_string(local::repo("examples/quickstart/tls.yaml"))
        .expect("quickstart tls");
    setup.files = vec![("tls.yaml".into(), with_broken_certificate(&tls))];
    let local = setup.start();
    let body = eventually(
        "/readyz naming the instance it waits for",
        Duration::from_secs(30),
        || {
            let (status, body) = local.debug_json("/readyz")?;
            let waiting = body["waiting_for"].to_string();
            (status == 503 && waiting.contains("first deployment to instances: local"))
                .then_some(body)
        },
    );
    assert_eq!(body["status"], "not ready", "{body}");
    let errors = eventually(
        "the rejected render in /debug/vars/errors",
        Duration::from_secs(30),
        || {
            let errors = local.debug_get("/debug/vars/errors");
            errors.contains("semantic").then_some(errors)
        },
    );
    assert!(
        errors.contains("secure-tls"),
        "names the Secret's file: {errors}"
    );
    assert_eq!(local.debug_json("/readyz").map(|r| r.0), Some(503));

    // The Secret repaired: haproxy takes the config and readiness follows.
    local.write("tls.yaml", &tls);
    local.wait_ready(Duration::from_secs(60));
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into()),
        "ready means routed"
    );
    eventually("haptor to say it is ready", Duration::from_secs(30), || {
        local.stdout().contains("haptor local: ready").then_some(())
    });
}

#[test]
fn a_resource_change_that_haproxy_rejects_is_reported_and_the_old_routes_keep_serving_until_the_next_good_change()
 {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    let deployed_before = std::fs::read_to_string(local.work().join("haproxy.cfg")).expect("cfg");

    // An object change, not a template change: the Secret's certificate breaks.
    let tls = local.read("tls.yaml");
    local.write("tls.yaml", &with_broken_certificate(&tls));
    let errors = eventually(
        "the rejected render in /debug/vars/errors",
        Duration::from_secs(30),
        || {
            let errors = local.debug_get("/debug/vars/errors");
            errors.contains("semantic").then_some(errors)
        },
    );
    assert!(errors.contains("secure-tls"), "{errors}");
    assert!(
        errors.contains("haproxy.cfg:"),
        "the error names the config line: {errors}"
    );
    assert!(
        local
            .log_text()
            .contains("reconciliation failed; the last good configuration keeps serving"),
        "the log says so"
    );
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into()),
        "the old routes keep answering"
    );
    assert_eq!(
        std::fs::read_to_string(local.work().join("haproxy.cfg")).expect("cfg"),
        deployed_before,
        "nothing of the rejected render was deployed"
    );
    assert_eq!(local.debug_json("/readyz").map(|r| r.0), Some(200));

    // The next good change deploys: the certificate repaired and a new route.
    local.write("tls.yaml", &tls);
    local.write(
        "new-route.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: c, namespace: default}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: c.localhost\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: app-b, port: {number: 80}}}}\n",
    );
    eventually("c.localhost routed", Duration::from_secs(30), || {
        get(local.http, "c.localhost", "/").filter(|(_, body)| body == "hello from app-b\n")
    });
}

#[test]
fn changing_the_watched_resources_rebuilds_the_iteration_and_deploys_the_new_config_while_ready() {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    // A few reconciliations in the first iteration, so a reset state shows.
    let apps = local.read("apps.yaml");
    for (from, to, answer) in [(a, b, "hello from app-b\n"), (b, a, "hello from app-a\n")] {
        local.move_first_endpoint_port(from, to);
        eventually("a.localhost moved", Duration::from_secs(30), || {
            get(local.http, "a.localhost", "/").filter(|(_, body)| body == answer)
        });
    }
    assert_eq!(local.read("apps.yaml"), apps);
    let (_, state) = local.debug_json("/debug/vars/state").expect("state");
    let reconciliations_before = state["reconciliations"].as_u64().unwrap_or_default();
    assert!(reconciliations_before >= 3, "{state}");

    let config = local.read("config.yaml");
    let rebuilt = config
        .replacen(
            "  watchedResourcesIgnoreFields:\n",
            "  watchedResourcesIgnoreFields:\n    - metadata.labels.rebuild-marker\n",
            1,
        )
        .replacen(
            "  watchedResources:\n",
            "  watchedResources:\n    configmaps:\n      apiVersion: v1\n      resources: configmaps\n      indexBy: [\"metadata.namespace\", \"metadata.name\"]\n",
            1,
        )
        .replacen("maxconn 4096", "maxconn 4097", 1);
    assert_ne!(config, rebuilt);
    let written = Instant::now();
    local.write("config.yaml", &rebuilt);
    let cfg = local.work().join("haproxy.cfg");
    let mut readiness = Vec::new();
    eventually(
        "the new iteration's config deployed",
        Duration::from_secs(30),
        || {
            readiness.push(local.debug_json("/readyz").map(|r| r.0));
            std::fs::read_to_string(&cfg)
                .ok()?
                .contains("maxconn 4097")
                .then_some(())
        },
    );
    eprintln!(
        "figure: watched resources changed -> new config deployed in {} ms",
        written.elapsed().as_millis()
    );
    assert!(
        readiness.iter().all(|r| *r == Some(200)),
        "readiness held through the rebuild: {readiness:?}"
    );
    eventually("a route still answers", Duration::from_secs(30), || {
        get(local.http, "a.localhost", "/").filter(|(s, _)| *s == 200)
    });
    // The new iteration's debug vars: its resources (configmaps among them) and a fresh state.
    let (_, resources) = local
        .debug_json("/debug/vars/resources")
        .expect("resources");
    assert!(resources.get("configmaps").is_some(), "{resources}");
    let (_, state) = local.debug_json("/debug/vars/state").expect("state");
    assert!(
        state["reconciliations"].as_u64().unwrap_or(u64::MAX) < reconciliations_before,
        "state restarted with the iteration: {state}"
    );
    // The Metrics actor counts the new index's sync from its queue in its own time: the
    // routes can answer first.
    eventually(
        "the configmaps counted in /metrics",
        Duration::from_secs(30),
        || {
            sample(
                &local.metrics_text(),
                "haptor_resources{resource=\"configmaps\"}",
            )
        },
    );
}

#[test]
fn in_place_config_changes_apply_at_once_log_level_and_drift_interval() {
    let (a, b) = (port("app-a"), port("app-b"));
    let mut setup = Setup::quickstart(a, b);
    setup.spec_prefix = "  dataplane:\n    driftPreventionInterval: 1h\n".into();
    setup.env = vec![("LOG_LEVEL".into(), "warn".into())];
    let local = setup.start();
    local.wait_ready(Duration::from_secs(60));
    let config = local.read("config.yaml");

    // logging.level: debug, in place (the watches stay the same): debug lines appear.
    let debug = config.replacen("spec:\n", "spec:\n  logging:\n    level: debug\n", 1);
    local.write("config.yaml", &debug);
    eventually("debug lines in the log", Duration::from_secs(30), || {
        local.log_text().contains("DEBUG").then_some(())
    });

    // An emptied level falls back to LOG_LEVEL (warn): an endpoint change logs nothing at
    // info or debug any more.
    let emptied = config.replacen("spec:\n", "spec:\n  logging:\n    level: \"\"\n", 1);
    local.write("config.yaml", &emptied);
    eventually("the config accepted", Duration::from_secs(30), || {
        let (_, config) = local.debug_json("/debug/vars/config")?;
        (config["logging"]["level"] == "").then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    let logged = local.log_text().len();
    local.move_first_endpoint_port(a, b);
    eventually(
        "a.localhost moved to app-b",
        Duration::from_secs(30),
        || get(local.http, "a.localhost", "/").filter(|(_, body)| body == "hello from app-b\n"),
    );
    let after = local.log_text();
    let new_lines = &after[logged..];
    assert!(
        !new_lines.contains(" INFO ") && !new_lines.contains(" DEBUG "),
        "the level fell back to LOG_LEVEL=warn: {new_lines}"
    );
    assert!(
        !after.contains('\u{1b}'),
        "no terminal colour codes in a log file"
    );

    // driftPreventionInterval from 1h to 300ms, in place: a hand edit is repaired.
    let drift = emptied.replacen(
        "driftPreventionInterval: 1h",
        "driftPreventionInterval: 300ms",
        1,
    );
    local.write("config.yaml", &drift);
    eventually("the interval accepted", Duration::from_secs(30), || {
        let (_, config) = local.debug_json("/debug/vars/config")?;
        (config["dataplane"]["driftPreventionInterval"] == "300ms").then_some(())
    });
    let cfg_path = local.work().join("haproxy.cfg");
    let deployed = std::fs::read_to_string(&cfg_path).expect("deployed config");
    std::fs::write(&cfg_path, format!("{deployed}\n# edited by hand\n")).expect("tamper");
    eventually("the drift to be repaired", Duration::from_secs(30), || {
        (std::fs::read_to_string(&cfg_path).ok()? == deployed).then_some(())
    });
}

#[test]
fn a_deployment_that_hangs_past_the_deployment_timeout_fails_backs_off_and_is_retried() {
    let (a, b) = (port("app-a"), port("app-b"));
    let mut setup = Setup::quickstart(a, b);
    setup.spec_prefix = "  dataplane:\n    deploymentTimeout: 2s\n".into();
    let local = setup.start();
    local.wait_ready(Duration::from_secs(60));
    let master = local.master_pid();
    let worker = worker_and_reloads(&local.work()).0;
    // haproxy stops answering: its master CLI and runtime socket accept connections but
    // never reply.
    signal(&master, "-STOP");
    signal(&worker, "-STOP");
    local.move_first_endpoint_port(a, b);
    let errors = eventually(
        "the timed-out deployment in /debug/vars/errors",
        Duration::from_secs(20),
        || {
            let errors = local.debug_get("/debug/vars/errors");
            errors.contains("deploymentTimeout").then_some(errors)
        },
    );
    assert!(errors.contains("deploy:local"), "{errors}");
    signal(&worker, "-CONT");
    signal(&master, "-CONT");
    eventually(
        "the retried deployment moves a.localhost",
        Duration::from_secs(30),
        || get(local.http, "a.localhost", "/").filter(|(_, body)| body == "hello from app-b\n"),
    );
}

#[test]
fn the_running_quickstart_reports_metrics_events_and_debug_vars_after_a_change() {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    // The Metrics actor counts events from its queue in its own time: ready can show first.
    let ingresses = eventually("the ingresses counted", Duration::from_secs(30), || {
        sample(
            &local.metrics_text(),
            "haptor_resources{resource=\"ingresses\"}",
        )
    });
    local.move_first_endpoint_port(a, b);
    local.write(
        "new-route.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: c, namespace: default}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: c.localhost\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: app-b, port: {number: 80}}}}\n",
    );
    eventually("c.localhost routed", Duration::from_secs(30), || {
        get(local.http, "c.localhost", "/").filter(|(s, _)| *s == 200)
    });
    let least = [
        (
            "haptor_change_to_deploy_seconds_count{instance=\"local\"}",
            1.0,
        ),
        ("haptor_deployments_total{instance=\"local\"}", 2.0),
        ("haptor_deployment_duration_seconds_count", 2.0),
        ("haptor_reconciliations_total", 2.0),
        ("haptor_validations_total", 1.0),
        ("haptor_leader_is_leader", 1.0),
    ];
    // The route answers before its deployment returns, and the Metrics actor counts the
    // deployment from its queue after that: wait for the counts, not only the new Ingress.
    let started = Instant::now();
    let metrics = loop {
        let metrics = local.metrics_text();
        let counted = sample(&metrics, "haptor_resources{resource=\"ingresses\"}")
            == Some(ingresses + 1.0)
            && least.iter().all(|(series, at_least)| {
                sample(&metrics, series).unwrap_or_default() >= *at_least
            });
        if counted || started.elapsed() > Duration::from_secs(30) {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        sample(&metrics, "haptor_resources{resource=\"ingresses\"}"),
        Some(ingresses + 1.0),
        "the change counted in /metrics:\n{metrics}"
    );
    for (series, at_least) in least {
        let value = sample(&metrics, series).unwrap_or_default();
        assert!(value >= at_least, "{series} = {value}:\n{metrics}");
    }
    // The endpoint move skipped haproxy -c and is counted as such, not as a validation.
    assert!(
        sample(&metrics, "haptor_validations_skipped_total").unwrap_or_default() >= 1.0,
        "{metrics}"
    );
    let (_, state) = local.debug_json("/debug/vars/state").expect("state");
    assert!(state["last_deployed_checksum"].is_string(), "{state}");
    assert_eq!(state["all_indexes_synced"], true, "{state}");
    let (_, rendered) = local.debug_json("/debug/vars/rendered").expect("rendered");
    // The TLS Secret's private key is deployed but never shown.
    let shown = rendered.to_string();
    assert!(
        !shown.contains("PRIVATE KEY-----\\nMI") && shown.contains("<redacted private key sha256:"),
        "{shown}"
    );
    let deployed_pem = std::fs::read_dir(local.work().join("ssl"))
        .expect("the certificates directory")
        .flatten()
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap_or_default())
        .collect::<String>();
    assert!(
        deployed_pem.contains("PRIVATE KEY-----"),
        "haproxy gets the key"
    );
    assert!(
        rendered["haproxy.cfg"]
            .as_str()
            .is_some_and(|c| c.contains("frontend http")),
        "{rendered}"
    );
    // The commentator relates the deployment to the change that caused it.
    let log = eventually(
        "the commentator's line about the EndpointSlice change",
        Duration::from_secs(30),
        || {
            let log = local.log_text();
            log.contains("after the endpointslices change default/app-a-1")
                .then_some(log)
        },
    );
    assert!(log.contains("deployment to local finished"), "{log}");
}

/// `config` with its haproxy.cfg template opening a block it never closes: a config that
/// does not compile, so it is rejected.
fn with_unclosed_block(config: &str) -> String {
    let broken = config.replacen(
        "    template: |\n      global\n",
        "    template: |\n      global\n      {{#if runtime_socket}}\n",
        1,
    );
    assert_ne!(broken, config, "the test breaks the haproxy.cfg template");
    broken
}

/// The unresolved errors of `source` in `/debug/vars/errors`.
fn unresolved(local: &Local, source: &str) -> Vec<serde_json::Value> {
    local
        .debug_json("/debug/vars/errors")
        .and_then(|(_, errors)| errors.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["source"] == source && e["resolved"] != true)
        .collect()
}

#[test]
fn a_config_fixed_after_a_rejection_is_logged_accepted_with_its_errors_resolved_and_deleting_it_falls_back_to_the_embedded_library()
 {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    let good = local.read("config.yaml");

    // Rejected, then put back as it was: the config in use is accepted again, and says so.
    local.write("config.yaml", &with_unclosed_block(&good));
    let rejected = eventually(
        "the rejection in /debug/vars/errors",
        Duration::from_secs(30),
        || unresolved(&local, "config").pop(),
    );
    let logged = local.log_text().len();
    local.write("config.yaml", &good);
    eventually(
        "'configuration accepted' in the log",
        Duration::from_secs(30),
        || {
            local.log_text()[logged..]
                .contains("configuration accepted after a rejection")
                .then_some(())
        },
    );
    let (_, errors) = local.debug_json("/debug/vars/errors").expect("errors");
    let record = errors
        .as_array()
        .and_then(|errors| errors.iter().find(|e| e["message"] == rejected["message"]))
        .cloned()
        .unwrap_or_default();
    assert_eq!(record["resolved"], true, "{errors}");
    assert_eq!(
        record["resolution"], "a later configuration was accepted",
        "{errors}"
    );
    assert!(
        record["resolved_at_ms"].as_u64() >= rejected["at_ms"].as_u64(),
        "{errors}"
    );
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into())
    );

    // Rejected again, then deleted: the embedded Ingress library is the config now.
    local.write("config.yaml", &with_unclosed_block(&good));
    eventually("the second rejection", Duration::from_secs(30), || {
        (!unresolved(&local, "config").is_empty()).then_some(())
    });
    let logged = local.log_text().len();
    std::fs::remove_file(local.dir.join("config.yaml")).expect("delete config.yaml");
    eventually(
        "the embedded library in use",
        Duration::from_secs(30),
        || {
            let (_, config) = local.debug_json("/debug/vars/config")?;
            config.to_string().contains("127.0.0.1:18080").then_some(())
        },
    );
    let log = local.log_text();
    let since = &log[logged..];
    assert!(
        since.contains(
            "the folder holds no HAProxyTemplateConfig any more; using the embedded Ingress library"
        ),
        "{since}"
    );
    eventually(
        "'configuration accepted' in the log",
        Duration::from_secs(30),
        || {
            local.log_text()[logged..]
                .contains("configuration accepted after a rejection")
                .then_some(())
        },
    );
    assert!(
        unresolved(&local, "config").is_empty(),
        "{}",
        local.debug_get("/debug/vars/errors")
    );
}

#[test]
fn a_folder_without_a_config_is_served_with_the_embedded_ingress_library() {
    let (a, b) = (port("app-a"), port("app-b"));
    let mut setup = Setup::quickstart(a, b);
    setup.library_in_folder = false;
    let local = setup.start();
    local.wait_ready(Duration::from_secs(60));
    assert!(
        local
            .log_text()
            .contains("no HAProxyTemplateConfig in the folder; using the embedded Ingress library"),
        "{}",
        local.log_text()
    );
    // Ready means the routes are served: no retry. The library binds its default
    // 127.0.0.1:18080, so another listener there with SO_REUSEPORT (any haproxy) would take
    // a share of the connections; the message shows what was deployed.
    let diagnosis = || {
        format!(
            "{}\n--- deployed haproxy.cfg\n{}",
            local.log_text(),
            std::fs::read_to_string(local.work().join("haproxy.cfg")).unwrap_or_default()
        )
    };
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into()),
        "{}",
        diagnosis()
    );
    assert_eq!(
        get(local.http, "b.localhost", "/").map(|r| r.1),
        Some("hello from app-b\n".into()),
        "{}",
        diagnosis()
    );
    // haptor local renders for its haproxy's line: the library's 3.0+ setting is deployed
    // on 3.0 and later only (2.6's haproxy would refuse it).
    let line = support::haproxy_line();
    let deployed = std::fs::read_to_string(local.work().join("haproxy.cfg")).expect("cfg");
    assert_eq!(
        deployed.contains("\n  tune.h2.fe.glitches-threshold 1000\n"),
        line >= haptor::pure::haproxy::HaproxyVersion::V3_0,
        "HAProxy {line}: {}",
        diagnosis()
    );
}

#[test]
fn sigterm_stops_haptor_and_its_haproxy() {
    let (a, b) = (port("app-a"), port("app-b"));
    let mut local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    let master = local.master_pid();
    let worker = worker_and_reloads(&local.work()).0;
    assert!(pid_alive(&master) && pid_alive(&worker));
    signal(&local.pid(), "-TERM");
    let status = eventually("haptor local to exit", Duration::from_secs(20), || {
        local.child.try_wait().ok().flatten()
    });
    assert!(status.success(), "exit status {status}");
    eventually("haproxy gone", Duration::from_secs(30), || {
        (!pid_alive(&master) && !pid_alive(&worker)).then_some(())
    });
    assert!(local.stdout().contains("haptor local: stopping"));
}

#[test]
fn a_restart_after_sigkill_takes_over_the_orphaned_haproxy_with_a_higher_epoch() {
    let (a, b) = (port("app-a"), port("app-b"));
    let mut local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    let epoch = |local: &Local| -> u64 {
        std::fs::read_to_string(local.work().join("haptor-epoch"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let first_epoch = epoch(&local);
    assert!(first_epoch >= 1);
    let orphan = local.master_pid();
    signal(&local.pid(), "-KILL");
    let _ = local.child.wait();
    assert!(pid_alive(&orphan), "SIGKILL leaves haproxy running");
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into()),
        "the orphan still serves"
    );

    local.respawn();
    eventually(
        "the orphan stopped and replaced",
        Duration::from_secs(30),
        || {
            let master = local.master_pid();
            (!pid_alive(&orphan) && pid_alive(&master) && master != orphan).then_some(())
        },
    );
    local.wait_ready(Duration::from_secs(60));
    assert_eq!(
        epoch(&local),
        first_epoch + 1,
        "the new run leads a newer epoch"
    );
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into())
    );
}

#[test]
fn a_tls_secret_with_dots_in_its_name_is_served_over_https_by_haptor_local() {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));

    // The quickstart's Secret again, named as most TLS Secrets are: after their host.
    let tls = local
        .read("tls.yaml")
        .replace(
            "secretName: secure-tls",
            "secretName: www.secure.example-tls",
        )
        .replace("name: secure-tls", "name: www.secure.example-tls")
        .replace("name: secure,", "name: dotted,");
    assert!(tls.contains("name: www.secure.example-tls"), "{tls}");
    local.write("dotted-tls.yaml", &tls);
    std::fs::remove_file(local.dir.join("tls.yaml")).expect("the old TLS file goes");

    let stored = local.work().join("ssl/default_www_secure_example-tls.pem");
    eventually(
        "the certificate under the name the configuration names",
        Duration::from_secs(30),
        || stored.is_file().then_some(()),
    );
    let body = eventually("HTTPS by SNI", Duration::from_secs(30), || {
        let output = Command::new("curl")
            .args(["-sk", "--max-time", "3", "--resolve"])
            .arg(format!("secure.example:{}:127.0.0.1", local.https))
            .arg(format!("https://secure.example:{}/", local.https))
            .stdin(Stdio::null())
            .output()
            .expect("curl runs (scripts/test installs it)");
        let body = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.success() && body.starts_with("hello from")).then_some(body)
    });
    assert!(body.starts_with("hello from app-"), "{body}");
    let config = std::fs::read_to_string(local.work().join("haproxy.cfg")).expect("haproxy.cfg");
    let crt_lists: Vec<String> = std::fs::read_dir(local.work().join("general"))
        .expect("general files")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .collect();
    assert!(
        crt_lists
            .iter()
            .any(|l| l.contains("ssl/default_www_secure_example-tls.pem")),
        "{crt_lists:?}\n{config}"
    );
}

#[test]
fn a_haproxy_c_that_cannot_run_is_counted_as_such_and_not_as_a_failed_validation() {
    let (a, b) = (port("app-a"), port("app-b"));
    // A haproxy that runs, reports its version and serves, but whose `haproxy -c` is killed
    // before it says anything about the configuration.
    let scripts = tempfile::tempdir().expect("a temp dir");
    let wrapper = scripts.path().join("haproxy");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -c ] && kill -KILL $$; done\nexec {} \"$@\"\n",
            support::haproxy_binary().display()
        ),
    )
    .expect("the wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("executable");
    let mut setup = local::Setup::quickstart(a, b);
    setup
        .env
        .push(("HAPROXY_BIN".into(), wrapper.display().to_string()));
    let local = setup.start();

    let unavailable = eventually(
        "haptor_checker_unavailable_total",
        Duration::from_secs(60),
        || sample(&local.metrics_text(), "haptor_checker_unavailable_total").filter(|n| *n >= 1.0),
    );
    assert!(unavailable >= 1.0);
    let metrics = local.metrics_text();
    assert_eq!(
        sample(
            &metrics,
            "haptor_validation_errors_total{phase=\"semantic\"}"
        )
        .unwrap_or(0.0),
        0.0,
        "a check that could not run refused nothing:\n{metrics}"
    );
    let log = local.log_text();
    assert!(
        log.contains("haproxy -c could not run, so the render was neither accepted nor refused"),
        "{log}"
    );
}

/// The quickstart's app-a Service with a second EndpointSlice whose one endpoint listens on
/// `port`.
fn second_app_a_slice(port: u16) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: app-a-2\n  namespace: default\n  labels: {{kubernetes.io/service-name: app-a}}\naddressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints:\n  - addresses: [\"127.0.0.1\"]\n    conditions: {{ready: true}}\n"
    )
}

#[test]
fn an_endpoint_beyond_the_deployed_servers_is_added_and_deleted_at_runtime_and_kept_across_a_reload()
 {
    let (a, b) = (port("app-a"), port("app-b"));
    let extra = backend("app-a-extra");
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    let servers = || local::master_cli(&local.work(), "@1 show servers state svc_default_app-a_80");
    assert_eq!(
        servers().matches("SRV_").count(),
        1,
        "dynamic servers: the backend holds exactly its endpoint, no placeholder\n{}",
        servers()
    );
    let before = worker_and_reloads(&local.work());

    // A second endpoint: `add server`, no reload, and traffic reaches it.
    local.write("more-endpoints.yaml", &second_app_a_slice(extra.port));
    eventually("the added server answers", Duration::from_secs(30), || {
        let _ = get(local.http, "a.localhost", "/");
        (extra.requests.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(())
    });
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "a new endpoint must not reload haproxy\n{}",
        local.log_text()
    );
    let deployed = std::fs::read_to_string(local.work().join("haproxy.cfg")).expect("cfg");
    assert!(
        deployed.contains(&format!("server SRV_2 127.0.0.1:{}", extra.port)),
        "the config on disk holds the added server, so a reload keeps it\n{deployed}"
    );

    // A reload (a new Ingress with its own annotation backend) keeps both servers serving.
    local.write(
        "reloading.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: own\n  namespace: default\n  annotations: {haproxy.org/timeout-server: 7s}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: own.localhost\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: app-b, port: {number: 80}}}}\n",
    );
    eventually("the reload happened", Duration::from_secs(30), || {
        (worker_and_reloads(&local.work()).0 != before.0).then_some(())
    });
    let after_reload = worker_and_reloads(&local.work());
    assert_eq!(
        servers().matches("SRV_").count(),
        2,
        "the reloaded haproxy runs both servers\n{}",
        servers()
    );

    // The endpoint leaves: `del server`, no reload, and traffic stays on app-a.
    std::fs::remove_file(local.dir.join("more-endpoints.yaml")).expect("remove");
    eventually("the server is deleted", Duration::from_secs(30), || {
        (!servers().contains("SRV_2")).then_some(())
    });
    let served = extra.requests.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..10 {
        assert_eq!(
            get(local.http, "a.localhost", "/").map(|r| r.1),
            Some("hello from app-a\n".into())
        );
    }
    assert_eq!(
        extra.requests.load(std::sync::atomic::Ordering::SeqCst),
        served,
        "nothing reaches a deleted server"
    );
    assert_eq!(
        worker_and_reloads(&local.work()),
        after_reload,
        "a leaving endpoint must not reload haproxy\n{}",
        local.log_text()
    );
}

/// A self-signed certificate and key for `host`, base64 for a Secret's data.
fn self_signed(host: &str) -> (String, String) {
    use base64::Engine;
    let (cert, key) = support::self_signed_pem(host);
    let encode = |pem: String| base64::engine::general_purpose::STANDARD.encode(pem);
    (encode(cert), encode(key))
}

/// An Ingress serving `host` over TLS from Secret `<name>-tls`, with that Secret.
fn tls_ingress(name: &str, host: &str, (cert, key): &(String, String)) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  ingressClassName: haptor\n  tls:\n    - hosts: [{host}]\n      secretName: {name}-tls\n  rules:\n    - host: {host}\n      http:\n        paths:\n          - {{path: /, pathType: Prefix, backend: {{service: {{name: app-a, port: {{number: 80}}}}}}}}\n---\napiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\nmetadata: {{name: {name}-tls, namespace: default}}\ndata:\n  tls.crt: {cert}\n  tls.key: {key}\n"
    )
}

/// The serial number of the certificate HAProxy presents for `host` on `port`.
fn served_serial(port: u16, host: &str) -> Option<String> {
    support::served_serial(&format!("127.0.0.1:{port}"), host)
}

/// The serial number of a base64 PEM certificate.
fn serial_of(cert_base64: &str) -> String {
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(cert_base64)
        .expect("base64");
    support::serial_of_pem(&String::from_utf8_lossy(&pem))
}

#[test]
fn a_new_tls_host_and_a_rotated_certificate_are_served_without_a_reload() {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    let default_serial = eventually("the default certificate", Duration::from_secs(30), || {
        served_serial(local.https, "nothing.example")
    });
    let before = worker_and_reloads(&local.work());

    // A new Ingress with a TLS host: its certificate is created in HAProxy's store and a
    // crt-list line names it.
    let first = self_signed("fresh.example");
    local.write("fresh.yaml", &tls_ingress("fresh", "fresh.example", &first));
    eventually(
        "fresh.example's certificate served",
        Duration::from_secs(30),
        || (served_serial(local.https, "fresh.example")? == serial_of(&first.0)).then_some(()),
    );
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "a new TLS host must not reload haproxy\n{}",
        local.log_text()
    );

    // The Secret rotated: the new certificate is served to new handshakes.
    let second = self_signed("fresh.example");
    local.write(
        "fresh.yaml",
        &tls_ingress("fresh", "fresh.example", &second),
    );
    eventually(
        "the rotated certificate served",
        Duration::from_secs(30),
        || (served_serial(local.https, "fresh.example")? == serial_of(&second.0)).then_some(()),
    );
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "a certificate rotation must not reload haproxy\n{}",
        local.log_text()
    );
    let stored = std::fs::read_to_string(local.work().join("ssl/default_fresh-tls.pem"))
        .expect("the certificate file");
    assert!(
        stored.contains(
            String::from_utf8_lossy(
                &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &second.0)
                    .expect("base64")
            )
            .trim()
        ),
        "the file holds the rotated certificate, so a reload keeps it"
    );

    // The host goes: its line and certificate leave; the default certificate answers.
    std::fs::remove_file(local.dir.join("fresh.yaml")).expect("remove");
    eventually("fresh.example gone", Duration::from_secs(30), || {
        (served_serial(local.https, "fresh.example")? == default_serial).then_some(())
    });
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "a TLS host leaving must not reload haproxy\n{}",
        local.log_text()
    );
}

#[test]
fn the_folder_is_watched_with_inotify_and_changes_written_in_place_renamed_or_in_a_new_subfolder_are_served()
 {
    let (a, b) = (port("app-a"), port("app-b"));
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    let log = local.log_text();
    assert!(log.contains("the folder is watched with inotify"), "{log}");
    assert!(
        !log.contains("polled every"),
        "the watch was made, so nothing is polled\n{log}"
    );
    assert!(
        local.stdout().contains("with inotify"),
        "{}",
        local.stdout()
    );
    let answer = |host: &str| get(local.http, host, "/").map(|r| r.1);

    // An EndpointSlice written in place.
    local.move_first_endpoint_port(a, b);
    eventually(
        "a.localhost moved to app-b",
        Duration::from_secs(30),
        || (answer("a.localhost") == Some("hello from app-b\n".into())).then_some(()),
    );
    // And back, written to a temporary file renamed over the manifest, as tools write.
    let back = local.read("apps.yaml").replacen(
        &format!("ports: [{{name: http, port: {b}}}]"),
        &format!("ports: [{{name: http, port: {a}}}]"),
        1,
    );
    std::fs::write(local.dir.join("apps.yaml.tmp"), back).expect("write");
    std::fs::rename(local.dir.join("apps.yaml.tmp"), local.dir.join("apps.yaml")).expect("rename");
    eventually("a.localhost back on app-a", Duration::from_secs(30), || {
        (answer("a.localhost") == Some("hello from app-a\n".into())).then_some(())
    });

    // A subfolder made while haptor runs, and a manifest written into it.
    std::fs::create_dir(local.dir.join("more")).expect("mkdir");
    local.write(
        "more/c.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: c, namespace: default}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: c.localhost\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: app-b, port: {number: 80}}}}\n",
    );
    eventually("c.localhost served", Duration::from_secs(30), || {
        (answer("c.localhost") == Some("hello from app-b\n".into())).then_some(())
    });
    let log = local.log_text();
    assert!(
        !log.contains("polled every"),
        "the watch reported no error\n{log}"
    );
}

/// A Service `name` with one endpoint at 127.0.0.1:`port` and an Ingress for `host` to it.
fn new_service_with_ingress(name: &str, host: &str, port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  ports: [{{name: http, port: 80, targetPort: {port}}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: {name}}}\naddressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints:\n  - addresses: [\"127.0.0.1\"]\n    conditions: {{ready: true}}\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: {host}\n      http:\n        paths:\n          - {{path: /, pathType: Prefix, backend: {{service: {{name: {name}, port: {{number: 80}}}}}}}}\n"
    )
}

#[test]
fn a_new_service_and_its_ingress_take_a_pool_backend_and_are_served_without_a_reload() {
    let (a, b) = (port("app-a"), port("app-b"));
    let fresh = backend("fresh");
    let local = start(a, b);
    local.wait_ready(Duration::from_secs(60));
    let before = worker_and_reloads(&local.work());

    local.write(
        "fresh.yaml",
        &new_service_with_ingress("fresh", "fresh.localhost", fresh.port),
    );
    let body = eventually("fresh.localhost served", Duration::from_secs(30), || {
        get(local.http, "fresh.localhost", "/").filter(|(status, _)| *status == 200)
    });
    assert_eq!(body.1, "hello from fresh\n");
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "a new Service with its Ingress must not reload haproxy\n{}",
        local.log_text()
    );
    let services_map =
        std::fs::read_to_string(local.work().join("maps/services.map")).expect("services.map");
    assert!(
        services_map.contains("default/fresh/80 pool_1"),
        "the new Service took the first pool member:\n{services_map}"
    );

    // A structural change reloads; the Service keeps its member, so it is served the same.
    local.write(
        "reloading.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: own\n  namespace: default\n  annotations: {haproxy.org/timeout-server: 7s}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: own.localhost\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: app-b, port: {number: 80}}}}\n",
    );
    eventually("the reload happened", Duration::from_secs(30), || {
        (worker_and_reloads(&local.work()).0 != before.0).then_some(())
    });
    let after_reload = worker_and_reloads(&local.work());
    let deployed = std::fs::read_to_string(local.work().join("haproxy.cfg")).expect("cfg");
    assert!(
        deployed.contains(&format!(
            "backend pool_1\n  option forwardfor\n  server SRV_1 127.0.0.1:{}",
            fresh.port
        )),
        "the reloaded configuration keeps the member's server\n{deployed}"
    );
    assert_eq!(
        get(local.http, "fresh.localhost", "/").map(|r| r.1),
        Some("hello from fresh\n".into())
    );

    // The Service leaves: its routes and servers go at runtime.
    std::fs::remove_file(local.dir.join("fresh.yaml")).expect("remove");
    eventually("fresh.localhost gone", Duration::from_secs(30), || {
        get(local.http, "fresh.localhost", "/").filter(|(status, _)| *status == 404)
    });
    assert_eq!(
        worker_and_reloads(&local.work()),
        after_reload,
        "a pooled Service leaving must not reload haproxy\n{}",
        local.log_text()
    );
}

/// The sum of `haptor_reloads_total` over its labels (none counted yet is 0), and of
/// `haptor_deployments_total`, from `/metrics`; `None` while it does not answer.
fn reloads_and_deployments(local: &Local) -> Option<(f64, f64)> {
    let text = local.metrics_text();
    let sum = |name: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    text.contains("haptor_")
        .then(|| (sum("haptor_reloads_total"), sum("haptor_deployments_total")))
}

#[test]
fn a_deleted_service_and_its_ingress_leave_without_a_reload_and_the_next_reload_drops_their_empty_backend()
 {
    let (a, b) = (port("app-a"), port("app-b"));
    let gone = backend("gone");
    let mut setup = Setup::quickstart(a, b);
    // There from the start: the Service gets its own backend, not a pool member.
    setup.files.push((
        "gone.yaml".into(),
        new_service_with_ingress("gone", "gone.localhost", gone.port),
    ));
    let local = setup.start();
    local.wait_ready(Duration::from_secs(60));
    let body = eventually("gone.localhost served", Duration::from_secs(30), || {
        get(local.http, "gone.localhost", "/").filter(|(status, _)| *status == 200)
    });
    assert_eq!(body.1, "hello from gone\n");
    let config = || std::fs::read_to_string(local.work().join("haproxy.cfg")).expect("cfg");
    assert!(
        config().contains("backend svc_default_gone_80\n"),
        "the Service has a backend of its own\n{}",
        config()
    );
    let backends = || local::master_cli(&local.work(), "@1 show backend");
    let gone_servers =
        || local::master_cli(&local.work(), "@1 show servers state svc_default_gone_80");
    assert!(gone_servers().contains("SRV_1"), "{}", gone_servers());
    let before = worker_and_reloads(&local.work());
    let (reloads, deployments) = eventually("/metrics answers", Duration::from_secs(30), || {
        reloads_and_deployments(&local)
    });

    // The Ingress, its Service and its EndpointSlice leave: the map stops routing to the
    // backend and its server is deleted, with no reload.
    std::fs::remove_file(local.dir.join("gone.yaml")).expect("remove");
    eventually(
        "the backend gone from haproxy.cfg",
        Duration::from_secs(30),
        || (!config().contains("svc_default_gone_80")).then_some(()),
    );
    eventually("gone.localhost unknown", Duration::from_secs(30), || {
        get(local.http, "gone.localhost", "/").filter(|(status, _)| *status == 404)
    });
    eventually("the deployment counted", Duration::from_secs(30), || {
        reloads_and_deployments(&local).filter(|(_, d)| *d > deployments)
    });
    assert_eq!(
        reloads_and_deployments(&local).map(|(r, _)| r),
        Some(reloads),
        "a deleted Service with its Ingress must not reload haproxy\n{}",
        local.log_text()
    );
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "haproxy's own count agrees\n{}",
        local.log_text()
    );
    assert!(
        backends().contains("svc_default_gone_80"),
        "the running haproxy keeps the empty backend until the next reload\n{}",
        backends()
    );
    assert!(
        !gone_servers().contains("SRV_"),
        "its server was deleted\n{}",
        gone_servers()
    );
    let served = gone.requests.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..5 {
        assert_eq!(
            get(local.http, "a.localhost", "/").map(|r| r.1),
            Some("hello from app-a\n".into())
        );
        assert_eq!(
            get(local.http, "b.localhost", "/").map(|r| r.1),
            Some("hello from app-b\n".into())
        );
        assert_eq!(
            get(local.http, "gone.localhost", "/").map(|r| r.0),
            Some(404)
        );
    }
    assert_eq!(
        gone.requests.load(std::sync::atomic::Ordering::SeqCst),
        served,
        "nothing reaches the deleted backend"
    );
    assert!(
        local
            .log_text()
            .contains("backend svc_default_gone_80 removed"),
        "the deployment says the backend was removed live\n{}",
        local.log_text()
    );

    // A structural change reloads, and the reloaded haproxy has no such backend.
    local.write(
        "reloading.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: own\n  namespace: default\n  annotations: {haproxy.org/timeout-server: 7s}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: own.localhost\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: app-b, port: {number: 80}}}}\n",
    );
    eventually("the reload happened", Duration::from_secs(30), || {
        (worker_and_reloads(&local.work()).0 != before.0).then_some(())
    });
    let body = eventually("own.localhost served", Duration::from_secs(30), || {
        get(local.http, "own.localhost", "/").filter(|(status, _)| *status == 200)
    });
    assert_eq!(body.1, "hello from app-b\n");
    assert!(
        !backends().contains("svc_default_gone_80"),
        "the reload dropped the empty backend\n{}",
        backends()
    );
    assert!(
        backends().contains("svc_default_app-a_80"),
        "{}",
        backends()
    );
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into())
    );
    assert_eq!(
        get(local.http, "gone.localhost", "/").map(|r| r.0),
        Some(404)
    );
    assert!(
        reloads_and_deployments(&local).is_some_and(|(r, _)| r > reloads),
        "the structural change counted as a reload"
    );
}
