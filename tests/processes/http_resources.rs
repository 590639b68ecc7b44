//! HTTP resources through `haptor local`: the Ingress library's client deny list
//! (`spec.httpResources.client-deny-list`) served by a list server of the test's (real HTTP,
//! `ETag` and `If-None-Match`), applied by the real haproxy to real clients connecting from
//! two loopback addresses, rotated without a reload, a bad download refused while the old
//! list keeps serving, and a critical resource whose server is down holding `/readyz`.

use crate::local;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use local::{Local, Setup, backend, eventually, sample, worker_and_reloads};

/// What the list server answers: a body and its ETag.
struct Listing {
    body: String,
    etag: String,
}

/// A list server on a loopback port: answers GET with its listing and 304 when the
/// request's `If-None-Match` names the listing's ETag; counts both.
struct ListServer {
    listing: Arc<Mutex<Listing>>,
    full: Arc<AtomicUsize>,
    not_modified: Arc<AtomicUsize>,
}

impl ListServer {
    fn serve(listener: TcpListener, body: &str) -> ListServer {
        let listing = Arc::new(Mutex::new(Listing {
            body: body.to_string(),
            etag: "\"v1\"".into(),
        }));
        let (full, not_modified) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let server = ListServer {
            listing: Arc::clone(&listing),
            full: Arc::clone(&full),
            not_modified: Arc::clone(&not_modified),
        };
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut stream = stream;
                let mut request = [0u8; 4096];
                let read = stream.read(&mut request).unwrap_or(0);
                let request = String::from_utf8_lossy(&request[..read]).to_lowercase();
                let (body, etag) = {
                    let listing = listing.lock().expect("listing");
                    (listing.body.clone(), listing.etag.clone())
                };
                let asked = format!("if-none-match: {}", etag.to_lowercase());
                if request.contains(&asked) {
                    not_modified.fetch_add(1, Ordering::SeqCst);
                    let _ = write!(
                        stream,
                        "HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\nConnection: close\r\n\r\n"
                    );
                } else {
                    full.fetch_add(1, Ordering::SeqCst);
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nETag: {etag}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            }
        });
        server
    }

    fn publish(&self, body: &str, etag: &str) {
        let mut listing = self.listing.lock().expect("listing");
        listing.body = body.to_string();
        listing.etag = format!("\"{etag}\"");
    }
}

/// GET / with `Host: host` through haproxy on `port`, the connection made from the
/// loopback address `from`; the status, or None when nothing answered.
fn status_from(from: &str, port: u16, host: &str) -> Option<u16> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let socket = tokio::net::TcpSocket::new_v4().ok()?;
        socket
            .bind(format!("{from}:0").parse::<SocketAddr>().ok()?)
            .ok()?;
        let mut stream = tokio::time::timeout(
            Duration::from_secs(5),
            socket.connect(SocketAddr::from(([127, 0, 0, 1], port))),
        )
        .await
        .ok()?
        .ok()?;
        stream
            .write_all(format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut response = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
            .await
            .ok()?
            .ok()?;
        response.split_whitespace().nth(1)?.parse().ok()
    })
}

/// The library with the deny list read from `url` every 300 ms (and `critical` as given).
fn start_with_deny_list(url: &str, critical: bool) -> Local {
    let a = backend("app-a").port;
    let b = backend("app-b").port;
    let mut setup = Setup::quickstart(a, b);
    setup.library_edits.push((
        "    client-deny-list:\n      url: \"\"\n".into(),
        format!(
            "    client-deny-list:\n      url: \"{url}\"\n      refreshInterval: 300ms\n      critical: {critical}\n"
        ),
    ));
    setup.start()
}

fn fetches(local: &Local, result: &str) -> f64 {
    sample(
        &local.metrics_text(),
        &format!(
            "haptor_http_resource_fetches_total{{resource=\"client-deny-list\",result=\"{result}\"}}"
        ),
    )
    .unwrap_or(0.0)
}

#[test]
fn a_deny_list_read_over_http_is_applied_rotated_without_a_reload_and_a_bad_download_keeps_the_old_list()
 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/deny.txt", listener.local_addr().expect("addr"));
    let lists = ListServer::serve(listener, "# blocked\n127.0.0.2/32\n");
    let local = start_with_deny_list(&url, false);
    local.wait_ready(Duration::from_secs(60));

    // The listed client gets 403 from haproxy, another one the app.
    eventually("127.0.0.2 to be denied", Duration::from_secs(20), || {
        (status_from("127.0.0.2", local.http, "a.localhost") == Some(403)).then_some(())
    });
    assert_eq!(
        status_from("127.0.0.3", local.http, "a.localhost"),
        Some(200)
    );
    let map = std::fs::read_to_string(local.work().join("maps/client-deny-list.map"))
        .expect("the deny list's map is deployed");
    assert_eq!(map.trim(), "127.0.0.2/32 deny");
    let metrics = local.metrics_text();
    assert_eq!(
        sample(
            &metrics,
            "haptor_http_resource_bytes{resource=\"client-deny-list\"}"
        ),
        Some("# blocked\n127.0.0.2/32\n".len() as f64)
    );
    assert!(
        sample(
            &metrics,
            "haptor_http_resource_content_age_seconds{resource=\"client-deny-list\"}"
        )
        .is_some(),
        "{metrics}"
    );

    // Refreshes the server answers with 304 cause no render.
    let renders = |local: &Local| sample(&local.metrics_text(), "haptor_reconciliations_total");
    let before = (renders(&local), fetches(&local, "not_modified"));
    eventually("three 304 refreshes", Duration::from_secs(20), || {
        (fetches(&local, "not_modified") >= before.1 + 3.0).then_some(())
    });
    assert!(lists.not_modified.load(Ordering::SeqCst) >= 3);
    assert_eq!(renders(&local), before.0, "a 304 refresh rendered");

    // A rotated list is applied at runtime: a map, no reload.
    let (worker, reloads) = worker_and_reloads(&local.work());
    lists.publish("127.0.0.3/32\n", "v2");
    eventually("the rotated list to apply", Duration::from_secs(20), || {
        (status_from("127.0.0.3", local.http, "a.localhost") == Some(403)
            && status_from("127.0.0.2", local.http, "a.localhost") == Some(200))
        .then_some(())
    });
    assert_eq!(
        worker_and_reloads(&local.work()),
        (worker, reloads),
        "the rotation reloaded haproxy"
    );

    // Garbage fails `haproxy -c` (a map_ip key must be an address): the old list keeps
    // serving, and the error names the resource.
    lists.publish("this is not a network\n", "v3");
    eventually(
        "the bad download to be rejected",
        Duration::from_secs(30),
        || (fetches(&local, "rejected") >= 1.0).then_some(()),
    );
    let errors = local.debug_get("/debug/vars/errors");
    assert!(
        errors.contains("HTTP resource client-deny-list") && errors.contains("rejected"),
        "{errors}"
    );
    assert!(
        local.log_text().contains("client-deny-list")
            && local.log_text().contains("new content rejected"),
        "{}",
        local.log_text()
    );
    assert_eq!(
        status_from("127.0.0.3", local.http, "a.localhost"),
        Some(403)
    );
    assert_eq!(
        status_from("127.0.0.2", local.http, "a.localhost"),
        Some(200)
    );
    let map = std::fs::read_to_string(local.work().join("maps/client-deny-list.map")).expect("map");
    assert_eq!(
        map.trim(),
        "127.0.0.3/32 deny",
        "the rejected list was deployed"
    );
    assert!(lists.full.load(Ordering::SeqCst) >= 3);
}

#[test]
fn a_critical_resource_whose_server_is_down_holds_readiness_naming_it_until_it_answers() {
    // A port nothing listens on yet.
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("http://127.0.0.1:{port}/deny.txt");
    let local = start_with_deny_list(&url, true);
    let awaited = eventually(
        "/readyz to name the resource",
        Duration::from_secs(30),
        || {
            let (status, body) = local::get(local.debug, "localhost", "/readyz")?;
            (status == 503 && body.contains("client-deny-list")).then_some(body)
        },
    );
    assert!(
        awaited.contains("the first fetch of critical HTTP resources"),
        "{awaited}"
    );
    // The fetch fails after its retries (refused, then 0.5 s, 1 s and 2 s later).
    eventually(
        "the failed fetch to be recorded",
        Duration::from_secs(30),
        || {
            let errors = local.debug_get("/debug/vars/errors");
            (errors.contains("HTTP resource client-deny-list")
                && errors.contains("fetch failed (it is critical: the first render waits for it)"))
            .then_some(())
        },
    );
    assert_eq!(
        local::get(local.debug, "localhost", "/readyz").map(|r| r.0),
        Some(503)
    );
    // The server comes up: the first render uses its list.
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the list server");
    let _lists = ListServer::serve(listener, "127.0.0.2\n");
    local.wait_ready(Duration::from_secs(60));
    assert_eq!(
        status_from("127.0.0.2", local.http, "a.localhost"),
        Some(403)
    );
    assert_eq!(
        status_from("127.0.0.3", local.http, "a.localhost"),
        Some(200)
    );
}

/// A config reading HTTP resource `list` (at `url`) into haproxy.cfg, with one test whose
/// `httpResources` fixtures are `fixtures` (YAML flow mapping).
fn fixture_config(url: &str, fixtures: &str) -> String {
    format!(
        r#"apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {{name: c}}
spec:
  httpResources:
    list: {{url: "{url}"}}
  haproxyConfig:
    template: |
      global
      {{{{#each (http_resource "list" as="lines")}}}}
        # listed {{{{this}}}}
      {{{{/each}}}}
      defaults
        mode http
        timeout connect 1s
        timeout client 1s
        timeout server 1s
  validationTests:
    lists-each-line:
      httpResources: {fixtures}
      assertions:
        - {{type: contains, pattern: '# listed 192\.0\.2\.1'}}
"#
    )
}

#[test]
fn validation_tests_read_http_resources_from_their_fixtures_and_an_unmocked_url_fails_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    let url = "http://lists.example/deny.txt";
    std::fs::write(
        &path,
        fixture_config(url, &format!("{{\"{url}\": \"192.0.2.1\\n\"}}")),
    )
    .expect("write");
    let output = crate::support::haptor(&["validate", "-f", path.to_str().expect("utf-8")]);
    let out = crate::support::text(&output);
    assert!(output.status.success(), "{out}");
    assert!(out.contains("1 passed, 0 failed"), "{out}");

    // No fixture for the URL the template reads: the test fails, naming it.
    std::fs::write(&path, fixture_config(url, "{}")).expect("write");
    let output = crate::support::haptor(&["validate", "-f", path.to_str().expect("utf-8")]);
    let out = crate::support::text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "http_resource 'list': {url} has no fixture in this test's httpResources"
        )),
        "{out}"
    );
}

#[test]
fn render_reads_an_http_resource_from_the_file_it_is_given_and_warns_of_one_it_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let library =
        std::fs::read_to_string(local::repo("deploy/library/ingress.yaml")).expect("the library");
    let on = library.replacen(
        "    client-deny-list:\n      url: \"\"\n",
        "    client-deny-list:\n      url: \"https://lists.example/deny.txt\"\n",
        1,
    );
    assert_ne!(on, library, "the library declares the deny list");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, on).expect("write the config");
    let list = dir.path().join("deny.txt");
    std::fs::write(&list, "192.0.2.0/24\n").expect("write the list");
    let out = dir.path().join("out");
    let given = format!("client-deny-list={}", list.display());
    let output = crate::support::haptor(&[
        "render",
        "-f",
        config.to_str().expect("utf-8"),
        "--http-resource",
        &given,
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    let text = crate::support::text(&output);
    assert!(output.status.success(), "{text}");
    assert!(!text.contains("reads as empty"), "{text}");
    let map = std::fs::read_to_string(out.join("maps/client-deny-list.map")).expect("map");
    assert_eq!(map.trim(), "192.0.2.0/24 deny");

    // Not given: it reads as empty, and render says so.
    let output = crate::support::haptor(&["render", "-f", config.to_str().expect("utf-8")]);
    let text = crate::support::text(&output);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("warning: HTTP resource client-deny-list (https://lists.example/deny.txt) is not fetched offline and reads as empty; give its body with --http-resource client-deny-list=FILE"),
        "{text}"
    );
}
