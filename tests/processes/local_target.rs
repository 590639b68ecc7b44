//! The local deploy target against a real HAProxy (`/usr/sbin/haproxy`, or the path in
//! `HAPTOR_HAPROXY_BIN`): each test starts its own master-worker HAProxy in its own temporary
//! work directory, on its own loopback ports, with small HTTP backends in threads, and
//! routes requests by Host through a map. Every deployment checks that `plan(from, to).reload`
//! is what the master's `show proc` shows actually happened, and every test ends by checking
//! that no HAProxy process is left behind.

use crate::local;
use crate::support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use haptor::drivers::local::{HaproxyProcess, LocalTarget, ProcInfo, WorkDir, parse_show_proc};
use haptor::pure::deploy::plan::plan;
use haptor::pure::deploy::{DeployError, DeployOutcome, DeployRequest, DeployTarget};
use haptor::pure::rendered::{AuxFile, AuxKind, RenderedConfig};

use support::{free_port, haproxy_binary};

/// How long a wait for something that must happen (a route answers, a process is gone, an
/// orphan starts) may take before the test fails: only a failing test waits that long.
const PATIENCE: Duration = Duration::from_secs(30);

/// An HTTP server in a thread that answers every request with its own name and counts the
/// connections it accepted (HAProxy sends one request per connection to it: the answers
/// close the connection).
struct Backend {
    port: u16,
    requests: Arc<AtomicUsize>,
}

impl Backend {
    fn start(name: &str) -> Backend {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a backend");
        let port = listener.local_addr().expect("local addr").port();
        let body = name.to_string();
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let response = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes());
            }
        });
        Backend { port, requests }
    }

    /// How many requests reached this backend so far.
    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// `GET /` with a Host header; the status code and body, or `None` when nothing answered.
fn http_get(port: u16, host: &str) -> Option<(u16, String)> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Waits until `host` answers 200 with `body`, and fails the test with the last answer if it
/// does not within [`PATIENCE`].
async fn expect_answer(port: u16, host: &str, body: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = tokio::task::spawn_blocking({
            let host = host.to_string();
            move || http_get(port, &host)
        })
        .await
        .expect("request thread");
        if answer.as_ref().is_some_and(|(s, b)| *s == 200 && b == body) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{host} should answer 200 '{body}', last answer: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One backend section of a test render: each slot is a backend port (a filled slot, with
/// its weight) or `None` (a reserved slot, disabled, pointing nowhere).
struct BackendSpec<'a> {
    name: &'a str,
    slots: Vec<Option<(u16, u32)>>,
}

fn render(
    frontend_port: u16,
    backends: &[BackendSpec<'_>],
    routes: &[(&str, &str)],
) -> RenderedConfig {
    let mut cfg = format!(
        "global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 10s
    timeout server 10s
frontend fe
    bind 127.0.0.1:{frontend_port}
    http-request set-var(txn.backend) req.hdr(host),lower,map_str(maps/hosts.map,be_unknown)
    use_backend %[var(txn.backend)]
"
    );
    for backend in backends {
        cfg.push_str(&format!("backend {}\n", backend.name));
        for (index, slot) in backend.slots.iter().enumerate() {
            let n = index + 1;
            match slot {
                Some((port, weight)) => cfg.push_str(&format!(
                    "    server SRV_{n} 127.0.0.1:{port} weight {weight}\n"
                )),
                None => cfg.push_str(&format!("    server SRV_{n} 127.0.0.1:1 disabled\n")),
            }
        }
    }
    let map: String = routes
        .iter()
        .map(|(host, backend)| format!("{host} {backend}\n"))
        .collect();
    let mut rendered = RenderedConfig {
        haproxy_cfg: cfg,
        ..RenderedConfig::default()
    };
    rendered.aux_files.insert(
        "maps/hosts.map".into(),
        AuxFile {
            kind: AuxKind::Map,
            name: "hosts.map".into(),
            path: "maps/hosts.map".into(),
            content: map,
        },
    );
    rendered
}

fn request(rendered: &RenderedConfig, epoch: u64, generation: u64) -> DeployRequest {
    DeployRequest {
        rendered: Arc::new(rendered.clone()),
        checksum: rendered.checksum(),
        epoch,
        generation,
        timeout: haptor::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT,
    }
}

/// Whether a process has exited (gone, or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

async fn expect_gone(pids: &[u32]) {
    let deadline = Instant::now() + PATIENCE;
    while !pids.iter().all(|pid| process_gone(*pid)) {
        assert!(
            Instant::now() < deadline,
            "haproxy processes {pids:?} are still running: {:?}",
            pids.iter()
                .map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A work directory with a running HAProxy, a target for it, three backends and the
/// frontend port.
struct Fixture {
    _dir: tempfile::TempDir,
    work_dir: WorkDir,
    process: HaproxyProcess,
    target: LocalTarget,
    frontend: u16,
    a: Backend,
    b: Backend,
    c: Backend,
}

impl Fixture {
    async fn start() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let work_dir = WorkDir::new(dir.path()).expect("work dir");
        let process = HaproxyProcess::start(haproxy_binary(), &work_dir)
            .await
            .expect("haproxy starts on the bootstrap configuration");
        let target = LocalTarget::open("local", work_dir.clone()).expect("target opens");
        Fixture {
            _dir: dir,
            work_dir,
            process,
            target,
            frontend: free_port(),
            a: Backend::start("backend-A"),
            b: Backend::start("backend-B"),
            c: Backend::start("backend-C"),
        }
    }

    /// be_a → A, be_b → B, each with one free slot; a.example → be_a, b.example → be_b.
    fn base(&self) -> RenderedConfig {
        render(
            self.frontend,
            &[
                BackendSpec {
                    name: "be_a",
                    slots: vec![Some((self.a.port, 10)), None],
                },
                BackendSpec {
                    name: "be_b",
                    slots: vec![Some((self.b.port, 10)), None],
                },
            ],
            &[("a.example", "be_a"), ("b.example", "be_b")],
        )
    }

    async fn proc_info(&self) -> ProcInfo {
        self.target.show_proc().await.expect("show proc answers")
    }

    /// Deploys `to` and checks that the plan from what the disk held, the outcome and what
    /// the master shows agree on whether HAProxy reloaded.
    async fn deploy_and_observe(
        &self,
        to: &RenderedConfig,
        epoch: u64,
        generation: u64,
    ) -> DeployOutcome {
        let from = self.target.on_disk().expect("disk readable");
        let planned = plan(from.as_ref(), to).expect("plans");
        let before = self.proc_info().await;
        let outcome = self
            .target
            .deploy(&request(to, epoch, generation))
            .await
            .expect("deploys");
        let after = self.proc_info().await;
        let reloaded = after.reloads > before.reloads;
        assert_eq!(
            planned.reload, reloaded,
            "plan said reload={} ({:?}) but the master went from {before:?} to {after:?}",
            planned.reload, planned.reload_reasons
        );
        assert_eq!(outcome.reloaded, reloaded, "{outcome:?}");
        if reloaded {
            assert_eq!(after.reloads, before.reloads + 1, "exactly one reload");
            assert_ne!(
                after.current_worker, before.current_worker,
                "a new worker serves"
            );
            assert_eq!(after.failed, 0);
        } else {
            assert_eq!(
                after.current_worker, before.current_worker,
                "the same worker serves"
            );
            let runtime = planned
                .operations
                .iter()
                .filter(|op| op.is_runtime())
                .count();
            assert_eq!(outcome.runtime_changes, runtime, "{outcome:?}");
        }
        assert_eq!(
            self.target.deployed_checksum().await.expect("reachable"),
            Some(to.checksum())
        );
        outcome
    }

    /// Stops HAProxy and checks that its master and workers are gone.
    async fn finish(mut self) {
        let mut pids = vec![self.process.master_pid()];
        if let Ok(info) = self.target.show_proc().await {
            pids.extend(info.workers);
        }
        self.process.stop().await.expect("haproxy stops");
        expect_gone(&pids).await;
    }
}

#[tokio::test]
async fn traffic_reaches_the_backends_routed_by_host_through_the_deployed_map() {
    let fx = Fixture::start().await;
    let base = fx.base();
    assert_eq!(
        fx.target.on_disk().expect("readable"),
        None,
        "bootstrap only"
    );
    let outcome = fx.deploy_and_observe(&base, 1, 1).await;
    assert!(outcome.reloaded && !outcome.unchanged);
    expect_answer(fx.frontend, "a.example", "backend-A").await;
    expect_answer(fx.frontend, "b.example", "backend-B").await;
    let unknown = http_get(fx.frontend, "nobody.example").map(|(status, _)| status);
    assert_eq!(unknown, Some(503), "an unknown host has no backend");
    let show_map = fx
        .target
        .runtime_command("show map")
        .await
        .expect("runtime API");
    assert!(show_map.contains("(maps/hosts.map)"), "{show_map}");
    fx.finish().await;
}

#[tokio::test]
async fn endpoint_weight_and_route_changes_go_live_without_a_reload() {
    let fx = Fixture::start().await;
    fx.deploy_and_observe(&fx.base(), 1, 1).await;
    expect_answer(fx.frontend, "a.example", "backend-A").await;
    let before = fx.proc_info().await;

    // be_a's server moves from A to C with a new weight; be_b's free slot is filled with A
    // and B is removed (disabled); a new host is routed by the map alone.
    let moved = render(
        fx.frontend,
        &[
            BackendSpec {
                name: "be_a",
                slots: vec![Some((fx.c.port, 50)), None],
            },
            BackendSpec {
                name: "be_b",
                slots: vec![None, Some((fx.a.port, 10))],
            },
        ],
        &[
            ("a.example", "be_a"),
            ("b.example", "be_b"),
            ("c.example", "be_a"),
        ],
    );
    let outcome = fx.deploy_and_observe(&moved, 1, 2).await;
    assert!(
        !outcome.reloaded && outcome.runtime_changes > 0,
        "{outcome:?}"
    );
    expect_answer(fx.frontend, "a.example", "backend-C").await;
    expect_answer(fx.frontend, "c.example", "backend-C").await;
    expect_answer(fx.frontend, "b.example", "backend-A").await;

    // B is out of rotation: of a fixed number of requests through HAProxy after the change
    // went live, every one is answered by be_b's new server A and none reaches B.
    let b_before = fx.b.requests();
    let frontend = fx.frontend;
    let answers = tokio::task::spawn_blocking(move || {
        (0..20)
            .map(|_| http_get(frontend, "b.example"))
            .collect::<Vec<_>>()
    })
    .await
    .expect("request thread");
    assert_eq!(
        fx.b.requests(),
        b_before,
        "the removed server B got requests: {answers:?}"
    );
    assert!(
        answers.iter().all(|a| a
            .as_ref()
            .is_some_and(|(s, b)| *s == 200 && b == "backend-A")),
        "{answers:?}"
    );
    let weight = fx
        .target
        .runtime_command("get weight be_a/SRV_1")
        .await
        .expect("runtime API");
    assert!(weight.starts_with("50 "), "{weight}");
    let after = fx.proc_info().await;
    assert_eq!(
        (after.reloads, after.current_worker),
        (before.reloads, before.current_worker)
    );

    // The files carry the runtime changes: a later reload keeps them.
    let written = std::fs::read_to_string(fx.work_dir.config_file()).expect("cfg");
    assert!(written.contains(&format!("server SRV_1 127.0.0.1:{} weight 50", fx.c.port)));
    fx.finish().await;
}

#[tokio::test]
async fn an_endpoint_change_rewrites_haproxy_cfg_alone_and_the_next_reload_carries_it() {
    use std::os::unix::fs::MetadataExt;
    let fx = Fixture::start().await;
    fx.deploy_and_observe(&fx.base(), 1, 1).await;
    let inode = |path: PathBuf| std::fs::metadata(path).expect("written").ino();
    let map = fx.work_dir.root().join("maps/hosts.map");
    let before = (
        inode(fx.work_dir.config_file()),
        inode(fx.work_dir.manifest_file()),
        inode(map.clone()),
    );

    let moved = render(
        fx.frontend,
        &[
            BackendSpec {
                name: "be_a",
                slots: vec![Some((fx.c.port, 10)), None],
            },
            BackendSpec {
                name: "be_b",
                slots: vec![Some((fx.b.port, 10)), None],
            },
        ],
        &[("a.example", "be_a"), ("b.example", "be_b")],
    );
    let outcome = fx.deploy_and_observe(&moved, 1, 2).await;
    assert!(!outcome.reloaded, "{outcome:?}");
    assert_ne!(
        inode(fx.work_dir.config_file()),
        before.0,
        "haproxy.cfg is new"
    );
    assert_eq!(
        (inode(fx.work_dir.manifest_file()), inode(map)),
        (before.1, before.2),
        "the manifest and the unchanged map are left as they were"
    );
    assert_eq!(fx.target.on_disk().expect("readable"), Some(moved.clone()));
    let leftovers: Vec<_> = std::fs::read_dir(fx.work_dir.root())
        .expect("listed")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A reload (a new backend) starts from the files: be_a still answers from C.
    let mut grown = moved.clone();
    grown
        .haproxy_cfg
        .push_str("backend be_new\n    server SRV_1 127.0.0.1:1 disabled\n");
    assert!(fx.deploy_and_observe(&grown, 1, 3).await.reloaded);
    expect_answer(fx.frontend, "a.example", "backend-C").await;
    fx.finish().await;
}

#[tokio::test]
async fn adding_a_backend_and_a_route_reloads_exactly_once_and_the_route_answers() {
    let fx = Fixture::start().await;
    let base = fx.base();
    fx.deploy_and_observe(&base, 1, 1).await;
    let mut grown = render(
        fx.frontend,
        &[
            BackendSpec {
                name: "be_a",
                slots: vec![Some((fx.a.port, 10)), None],
            },
            BackendSpec {
                name: "be_b",
                slots: vec![Some((fx.b.port, 10)), None],
            },
            BackendSpec {
                name: "be_c",
                slots: vec![Some((fx.c.port, 10)), None],
            },
        ],
        &[
            ("a.example", "be_a"),
            ("b.example", "be_b"),
            ("c.example", "be_c"),
        ],
    );
    let outcome = fx.deploy_and_observe(&grown, 1, 2).await;
    assert!(outcome.reloaded, "{outcome:?}");
    expect_answer(fx.frontend, "c.example", "backend-C").await;
    expect_answer(fx.frontend, "a.example", "backend-A").await;

    // The same render again changes nothing.
    let again = fx.deploy_and_observe(&grown, 1, 3).await;
    assert!(again.unchanged && !again.reloaded, "{again:?}");

    // A restarted controller plans from the files: an endpoint change still needs no reload.
    grown.haproxy_cfg = grown.haproxy_cfg.replace(
        &format!("127.0.0.1:{} weight 10", fx.c.port),
        &format!("127.0.0.1:{} weight 10", fx.b.port),
    );
    let restarted = Fixture {
        target: LocalTarget::open("local", fx.work_dir.clone()).expect("reopens"),
        ..fx
    };
    let outcome = restarted.deploy_and_observe(&grown, 1, 1).await;
    assert!(!outcome.reloaded, "{outcome:?}");
    expect_answer(restarted.frontend, "c.example", "backend-B").await;
    restarted.finish().await;
}

#[tokio::test]
async fn a_config_haproxy_refuses_is_rejected_and_the_old_one_keeps_serving() {
    let fx = Fixture::start().await;
    let base = fx.base();
    fx.deploy_and_observe(&base, 1, 1).await;
    let written_before = std::fs::read(fx.work_dir.config_file()).expect("cfg");
    let map_before =
        std::fs::read(fx.work_dir.aux_file("maps/hosts.map").expect("safe")).expect("map");

    let mut broken = base.clone();
    broken.haproxy_cfg.push_str(&format!(
        "backend be_c\n    server SRV_1 127.0.0.1:{} bogus_option\n",
        fx.c.port
    ));
    broken
        .aux_files
        .get_mut("maps/hosts.map")
        .expect("map")
        .content
        .push_str("c.example be_c\n");
    let planned = plan(Some(&base), &broken).expect("plans");
    let before = fx.proc_info().await;
    let err = fx
        .target
        .deploy(&request(&broken, 1, 2))
        .await
        .expect_err("haproxy refuses it");
    let after = fx.proc_info().await;
    match &err {
        DeployError::Rejected(message) => assert!(message.contains("bogus_option"), "{message}"),
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert!(planned.reload);
    assert_eq!(
        after.reloads,
        before.reloads + 1,
        "the master tried to reload"
    );
    assert_eq!(after.failed, before.failed + 1, "and counted the failure");
    assert_eq!(
        after.current_worker, before.current_worker,
        "the old worker serves on"
    );
    expect_answer(fx.frontend, "a.example", "backend-A").await;
    expect_answer(fx.frontend, "b.example", "backend-B").await;
    assert_eq!(
        std::fs::read(fx.work_dir.config_file()).expect("cfg"),
        written_before
    );
    assert_eq!(
        std::fs::read(fx.work_dir.aux_file("maps/hosts.map").expect("safe")).expect("map"),
        map_before
    );
    assert_eq!(
        fx.target.deployed_checksum().await.expect("reachable"),
        Some(base.checksum())
    );

    // A good configuration after the failure reloads, and the failure count resets.
    let mut fixed = broken.clone();
    fixed.haproxy_cfg = fixed.haproxy_cfg.replace(" bogus_option", "");
    fx.deploy_and_observe(&fixed, 1, 3).await;
    expect_answer(fx.frontend, "c.example", "backend-C").await;
    fx.finish().await;
}

#[tokio::test]
async fn a_killed_haproxy_is_unreachable_until_it_is_started_again() {
    let mut fx = Fixture::start().await;
    let base = fx.base();
    fx.deploy_and_observe(&base, 1, 1).await;
    let info = fx.proc_info().await;
    let mut pids = info.workers.clone();
    pids.push(info.master_pid);
    fx.process.kill();
    for worker in &info.workers {
        let _ = std::process::Command::new("kill")
            .args(["-9", &worker.to_string()])
            .status();
    }
    expect_gone(&pids).await;

    let mut moved = base.clone();
    moved.haproxy_cfg = moved.haproxy_cfg.replace(
        &format!("127.0.0.1:{} weight 10", fx.a.port),
        &format!("127.0.0.1:{} weight 10", fx.c.port),
    );
    let err = fx
        .target
        .deploy(&request(&moved, 1, 2))
        .await
        .expect_err("nothing answers");
    assert!(matches!(err, DeployError::Unreachable(_)), "{err}");
    assert!(err.is_retryable());
    assert_eq!(
        fx.target.on_disk().expect("readable").map(|r| r.checksum()),
        Some(base.checksum()),
        "nothing was written"
    );

    fx.process = HaproxyProcess::start(haproxy_binary(), &fx.work_dir)
        .await
        .expect("haproxy starts again on the last files");
    expect_answer(fx.frontend, "a.example", "backend-A").await;
    let outcome = fx.deploy_and_observe(&moved, 1, 2).await;
    assert!(!outcome.reloaded, "{outcome:?}");
    expect_answer(fx.frontend, "a.example", "backend-C").await;
    fx.finish().await;
}

#[tokio::test]
async fn a_write_from_an_older_epoch_is_refused_and_changes_nothing() {
    let fx = Fixture::start().await;
    let base = fx.base();
    fx.deploy_and_observe(&base, 5, 1).await;
    let written_before = std::fs::read(fx.work_dir.config_file()).expect("cfg");
    let before = fx.proc_info().await;

    let mut other = base.clone();
    other
        .haproxy_cfg
        .push_str("backend be_late\n    server SRV_1 127.0.0.1:1 disabled\n");
    let err = fx
        .target
        .deploy(&request(&other, 4, 99))
        .await
        .expect_err("fenced");
    assert_eq!(
        err,
        DeployError::Fenced {
            offered: 4,
            accepted: 5
        }
    );
    let stale = fx
        .target
        .deploy(&request(&other, 5, 0))
        .await
        .expect_err("stale");
    assert_eq!(
        stale,
        DeployError::Stale {
            offered: 0,
            deployed: 1
        }
    );

    // A restarted controller still refuses the old epoch: it is kept on disk.
    let reopened = LocalTarget::open("local", fx.work_dir.clone()).expect("reopens");
    assert_eq!(reopened.accepted_epoch().await, 5);
    assert!(matches!(
        reopened.deploy(&request(&other, 4, 100)).await,
        Err(DeployError::Fenced {
            offered: 4,
            accepted: 5
        })
    ));

    let after = fx.proc_info().await;
    assert_eq!(
        (after.reloads, after.current_worker),
        (before.reloads, before.current_worker)
    );
    assert_eq!(
        std::fs::read(fx.work_dir.config_file()).expect("cfg"),
        written_before
    );
    assert_eq!(
        fx.target.deployed_checksum().await.expect("reachable"),
        Some(base.checksum())
    );
    expect_answer(fx.frontend, "a.example", "backend-A").await;

    // A newer epoch is accepted, whatever its generation.
    fx.deploy_and_observe(&other, 6, 1).await;
    fx.finish().await;
}

#[tokio::test]
async fn a_config_edited_behind_the_targets_back_is_drift_and_a_deploy_restores_it() {
    let fx = Fixture::start().await;
    let base = fx.base();
    fx.deploy_and_observe(&base, 1, 1).await;
    let mut edited = std::fs::read_to_string(fx.work_dir.config_file()).expect("cfg");
    // A proxy with a listener of its own: dropping it takes a reload (a backend alone would
    // go live, its servers deleted).
    edited.push_str("listen be_rogue\n    bind 127.0.0.1:1\n    server x 127.0.0.1:1 disabled\n");
    std::fs::write(fx.work_dir.config_file(), &edited).expect("edit");

    let on_disk = fx.target.deployed_checksum().await.expect("reachable");
    assert!(on_disk.is_some());
    assert_ne!(on_disk, Some(base.checksum()), "the edit shows as drift");

    let outcome = fx.deploy_and_observe(&base, 1, 2).await;
    assert!(!outcome.unchanged, "{outcome:?}");
    let restored = std::fs::read_to_string(fx.work_dir.config_file()).expect("cfg");
    assert!(!restored.contains("be_rogue"));
    expect_answer(fx.frontend, "a.example", "backend-A").await;
    fx.finish().await;
}

#[tokio::test]
async fn a_large_map_is_replaced_live_in_several_payloads() {
    let fx = Fixture::start().await;
    let hosts = |prefix: &str| -> Vec<(String, &'static str)> {
        (0..2000)
            .map(|i| (format!("{prefix}-{i:05}.example.com"), "be_b"))
            .collect()
    };
    let with_hosts = |extra: &[(String, &'static str)]| {
        let mut routes: Vec<(&str, &str)> = vec![("a.example", "be_a")];
        routes.extend(extra.iter().map(|(h, b)| (h.as_str(), *b)));
        render(
            fx.frontend,
            &[
                BackendSpec {
                    name: "be_a",
                    slots: vec![Some((fx.a.port, 10))],
                },
                BackendSpec {
                    name: "be_b",
                    slots: vec![Some((fx.b.port, 10))],
                },
            ],
            &routes,
        )
    };
    let first = with_hosts(&hosts("old"));
    fx.deploy_and_observe(&first, 1, 1).await;
    let second = with_hosts(&hosts("new"));
    let map_bytes = second.aux_files["maps/hosts.map"].content.len();
    assert!(
        map_bytes > 32 * 1024,
        "the map ({map_bytes} bytes) exceeds HAProxy's buffer"
    );
    let outcome = fx.deploy_and_observe(&second, 1, 2).await;
    assert!(!outcome.reloaded, "{outcome:?}");
    expect_answer(fx.frontend, "new-01999.example.com", "backend-B").await;
    expect_answer(fx.frontend, "a.example", "backend-A").await;
    let gone = http_get(fx.frontend, "old-01999.example.com").map(|(status, _)| status);
    assert_eq!(gone, Some(503), "the old entries are gone");
    let show_map = fx
        .target
        .runtime_command("show map")
        .await
        .expect("runtime API");
    assert!(show_map.contains("entry_cnt=2001"), "{show_map}");
    fx.finish().await;
}

#[tokio::test]
async fn a_runtime_change_haproxy_refuses_turns_into_one_reload() {
    let fx = Fixture::start().await;
    let base = fx.base();
    fx.deploy_and_observe(&base, 1, 1).await;
    // The files gain a server slot HAProxy never loaded, so the plan from the disk counts on
    // a runtime change that HAProxy cannot make ("No such server.").
    let slot = format!("    server SRV_1 127.0.0.1:{} weight 10\n", fx.a.port);
    let written = std::fs::read_to_string(fx.work_dir.config_file()).expect("cfg");
    let edited = written.replacen(
        &slot,
        &format!("{slot}    server SRV_3 127.0.0.1:1 disabled\n"),
        1,
    );
    assert_ne!(edited, written);
    std::fs::write(fx.work_dir.config_file(), edited).expect("edit");
    let mut to = base.clone();
    to.haproxy_cfg = to.haproxy_cfg.replacen(
        &slot,
        &format!("{slot}    server SRV_3 127.0.0.1:{} weight 10\n", fx.c.port),
        1,
    );
    let from = fx.target.on_disk().expect("readable");
    let planned = plan(from.as_ref(), &to).expect("plans");
    assert!(!planned.reload, "{:?}", planned.reload_reasons);

    let before = fx.proc_info().await;
    let outcome = fx
        .target
        .deploy(&request(&to, 1, 2))
        .await
        .expect("deploys by reloading");
    let after = fx.proc_info().await;
    assert!(outcome.reloaded, "{outcome:?}");
    assert_eq!(after.reloads, before.reloads + 1);
    assert_ne!(after.current_worker, before.current_worker);
    let state = fx
        .target
        .runtime_command("show servers state be_a")
        .await
        .expect("runtime API");
    assert!(state.contains(" SRV_3 "), "{state}");
    assert_eq!(
        fx.target.deployed_checksum().await.expect("reachable"),
        Some(to.checksum())
    );
    fx.finish().await;
}

#[tokio::test]
async fn a_second_start_on_a_work_directory_whose_haproxy_has_a_live_owner_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let work_dir = WorkDir::new(dir.path()).expect("work dir");
    let mut first = HaproxyProcess::start(haproxy_binary(), &work_dir)
        .await
        .expect("haproxy starts");
    let err = HaproxyProcess::start(haproxy_binary(), &work_dir)
        .await
        .expect_err("the first haproxy is owned by this live process");
    assert!(
        err.to_string().contains(&first.master_pid().to_string()),
        "{err}"
    );
    assert!(first.is_running(), "the owned haproxy is left alone");
    first.stop().await.expect("stops");
}

/// Starts haproxy on `work_dir` from a shell that exits at once, so its owner is dead as
/// after a haptor killed with SIGKILL; returns the master's pid once its pid file names it
/// (not waiting for its socket to answer: a start must find an orphan by its pid file
/// alone, too).
async fn start_orphan(work_dir: &WorkDir) -> (u32, KillIfStillOurs) {
    std::fs::write(
        work_dir.config_file(),
        haptor::drivers::local::bootstrap_config(work_dir),
    )
    .expect("config");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' -W -S '{}' -f '{}' -p '{}' >/dev/null 2>&1 &",
            haproxy_binary().display(),
            work_dir.master_socket().display(),
            work_dir.config_file().display(),
            work_dir.pid_file().display(),
        ))
        .status()
        .expect("sh runs");
    assert!(status.success());
    let deadline = Instant::now() + PATIENCE;
    let orphan = loop {
        let pid = std::fs::read_to_string(work_dir.pid_file()).unwrap_or_default();
        if let Ok(pid) = pid.trim().parse::<u32>() {
            break pid;
        }
        assert!(Instant::now() < deadline, "the orphan never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let cleanup = KillIfStillOurs {
        pid: orphan,
        socket: work_dir.master_socket(),
    };
    (orphan, cleanup)
}

#[tokio::test]
async fn a_haproxy_left_behind_by_a_dead_owner_is_stopped_and_replaced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let work_dir = WorkDir::new(dir.path()).expect("work dir");
    let (orphan, _cleanup) = start_orphan(&work_dir).await;
    let mut process = HaproxyProcess::start(haproxy_binary(), &work_dir)
        .await
        .expect("the orphan is stopped and a new haproxy starts");
    assert_ne!(process.master_pid(), orphan);
    expect_gone(&[orphan]).await;
    assert!(process.is_running());
    process.stop().await.expect("stops");
}

#[tokio::test]
async fn a_haproxy_left_behind_with_a_reload_unread_is_replaced_once_it_has_reloaded_and_the_new_one_keeps_the_socket()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let work_dir = WorkDir::new(dir.path()).expect("work dir");
    let (orphan, _cleanup) = start_orphan(&work_dir).await;
    let deadline = Instant::now() + PATIENCE;
    while !parse_show_proc(&local::master_cli(work_dir.root(), "show proc"))
        .is_some_and(|info| info.master_pid == orphan && info.current_worker.is_some())
    {
        assert!(Instant::now() < deadline, "the orphan never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its owner asked for a reload and died before the master read it: the master is
    // stopped with the request waiting on its socket, and goes on only once the new start
    // has had time to bring up a master of its own (3 s: past the first probe's 2 s).
    local::signal(&orphan.to_string(), "-STOP");
    let mut cli =
        std::os::unix::net::UnixStream::connect(work_dir.master_socket()).expect("connect");
    cli.write_all(b"reload\n").expect("the reload is sent");
    cli.shutdown(std::net::Shutdown::Write)
        .expect("the request ends");
    let resume = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        local::signal(&orphan.to_string(), "-CONT");
    });
    let mut process = HaproxyProcess::start(haproxy_binary(), &work_dir)
        .await
        .expect("a new haproxy starts");
    resume.join().expect("the orphan resumed");
    drop(cli);
    assert_ne!(process.master_pid(), orphan);
    expect_gone(&[orphan]).await;
    // The orphan's reload re-executed it, which binds the master socket again: had the new
    // master started before that, the socket would now lead nowhere.
    let info = process
        .show_proc()
        .await
        .expect("the new master answers on the work directory's socket");
    assert_eq!(info.master_pid, process.master_pid());
    assert!(process.is_running());
    process.stop().await.expect("stops");
}

/// Kills, when the test ends however it ends, a haproxy the test started outside any
/// `HaproxyProcess` — only while that pid still runs haproxy on the test's socket.
struct KillIfStillOurs {
    pid: u32,
    socket: PathBuf,
}

impl Drop for KillIfStillOurs {
    fn drop(&mut self) {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.pid)).unwrap_or_default();
        let ours = String::from_utf8_lossy(&cmdline).contains(&*self.socket.to_string_lossy());
        if ours && !process_gone(self.pid) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &self.pid.to_string()])
                .status();
        }
    }
}

/// Puts a dead socket at `path` in one step, as a cleanup script or another process would
/// replace it: a socket bound beside it, closed, and renamed over it.
fn replace_with_dead_socket(path: &std::path::Path) {
    let beside = path.with_extension("dead");
    drop(std::os::unix::net::UnixListener::bind(&beside).expect("bind a socket beside"));
    std::fs::rename(&beside, path).expect("the dead socket replaces the path");
    let refused = std::os::unix::net::UnixStream::connect(path).expect_err("nobody listens");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
}

#[test]
fn a_runtime_socket_replaced_by_a_dead_one_under_haptor_local_is_routed_around_and_the_next_three_endpoint_changes_go_live_without_a_reload()
 {
    let (a, b) = (local::backend("app-a"), local::backend("app-b"));
    let moves = [
        ("app-c", local::backend("app-c")),
        ("app-d", local::backend("app-d")),
        ("app-e", local::backend("app-e")),
    ];
    let haptor = local::Setup::quickstart(a.port, b.port).start();
    haptor.wait_ready(Duration::from_secs(60));
    let work = haptor.work();
    let served_by = |name: &str| {
        let body = format!("hello from {name}\n");
        local::eventually(&format!("a.localhost served by {name}"), PATIENCE, || {
            local::get(haptor.http, "a.localhost", "/").filter(|(_, answer)| *answer == body)
        });
    };
    served_by("app-a");
    // One change through the runtime socket while it works, so haptor has used it.
    let before = local::worker_and_reloads(&work);
    haptor.move_first_endpoint_port(a.port, b.port);
    served_by("app-b");
    assert_eq!(local::worker_and_reloads(&work), before, "a live change");

    replace_with_dead_socket(&work.join("runtime.sock"));
    let mut from = b.port;
    for (name, backend) in &moves {
        haptor.move_first_endpoint_port(from, backend.port);
        served_by(name);
        let now = local::worker_and_reloads(&work);
        eprintln!("after the move to {name}: (worker, reloads) {now:?}, before {before:?}");
        assert_eq!(now, before, "the move to {name} reloaded haproxy");
        from = backend.port;
    }
    let log = haptor.log_text();
    for line in log.lines().filter(|line| line.contains("runtime.sock")) {
        eprintln!("haptor logged: {line}");
    }
    assert_eq!(
        log.matches("the runtime socket does not answer as haproxy's worker")
            .count(),
        1,
        "told once:\n{log}"
    );
    assert_eq!(
        log.matches("deployed, around a problem").count(),
        1,
        "{log}"
    );
    assert!(
        !log.contains("reloading through the master instead"),
        "{log}"
    );
    // haptor routed around the dead file and left it where it was.
    let still = std::os::unix::net::UnixStream::connect(work.join("runtime.sock"));
    assert!(still.is_err(), "the dead socket is still dead");
}

/// A listener that takes over a socket path and answers every command with a bare line
/// break (how HAProxy acknowledges a silent command), recording the first line of each.
struct Impostor {
    commands: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Impostor {
    fn replace(path: &std::path::Path) -> Impostor {
        let beside = path.with_extension("impostor");
        let listener = std::os::unix::net::UnixListener::bind(&beside).expect("bind");
        std::fs::rename(&beside, path).expect("the impostor takes the path");
        let commands = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = Arc::clone(&commands);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = String::new();
                let _ = stream.read_to_string(&mut request);
                let first = request.lines().next().unwrap_or_default().to_string();
                recorded.lock().expect("not poisoned").push(first);
                let _ = stream.write_all(b"\n");
            }
        });
        Impostor { commands }
    }

    fn commands(&self) -> Vec<String> {
        self.commands.lock().expect("not poisoned").clone()
    }
}

/// The fixture's render with be_a's first slot at `port` with `weight`, be_b on B, the
/// `extra` backends and the `routes`.
fn with_be_a(
    fx: &Fixture,
    port: u16,
    weight: u32,
    extra: &[BackendSpec<'_>],
    routes: &[(&str, &str)],
) -> RenderedConfig {
    let mut backends = vec![
        BackendSpec {
            name: "be_a",
            slots: vec![Some((port, weight)), None],
        },
        BackendSpec {
            name: "be_b",
            slots: vec![Some((fx.b.port, 10)), None],
        },
    ];
    backends.extend(extra.iter().map(|spec| BackendSpec {
        name: spec.name,
        slots: spec.slots.clone(),
    }));
    render(fx.frontend, &backends, routes)
}

#[tokio::test]
async fn a_runtime_socket_taken_over_by_another_process_gets_no_change_and_changes_go_live_through_the_master_even_after_a_reload()
 {
    let fx = Fixture::start().await;
    let routes = [("a.example", "be_a"), ("b.example", "be_b")];
    fx.deploy_and_observe(&fx.base(), 1, 1).await;
    // A live change through the runtime socket while it is haproxy's.
    let outcome = fx
        .deploy_and_observe(&with_be_a(&fx, fx.c.port, 10, &[], &routes), 1, 2)
        .await;
    assert!(
        !outcome.reloaded && outcome.degraded.is_none(),
        "{outcome:?}"
    );
    expect_answer(fx.frontend, "a.example", "backend-C").await;

    let impostor = Impostor::replace(&fx.work_dir.runtime_socket());
    let outcome = fx
        .deploy_and_observe(&with_be_a(&fx, fx.b.port, 20, &[], &routes), 1, 3)
        .await;
    assert!(!outcome.reloaded, "{outcome:?}");
    let degraded = outcome.degraded.expect("the takeover is reported");
    assert!(
        degraded.contains("runtime.sock") && degraded.contains("master CLI"),
        "{degraded}"
    );
    expect_answer(fx.frontend, "a.example", "backend-B").await;
    assert_eq!(impostor.commands(), ["show info"], "only asked who it is");

    // A structural change reloads; the new worker inherits the socket it had, so the path
    // stays the impostor's, and the next live change, map included, goes through the master
    // to the new worker, told no more.
    let be_c = [BackendSpec {
        name: "be_c",
        slots: vec![Some((fx.c.port, 10)), None],
    }];
    let grown = with_be_a(&fx, fx.b.port, 20, &be_c, &routes);
    assert!(fx.deploy_and_observe(&grown, 1, 4).await.reloaded);
    // The map grows past one payload (HAProxy's buffer), so several go through the master.
    let hosts: Vec<String> = (0..1500)
        .map(|n| format!("host-{n:04}.example.com"))
        .collect();
    let mut routes = vec![
        ("a.example", "be_a"),
        ("b.example", "be_b"),
        ("c.example", "be_c"),
    ];
    routes.extend(hosts.iter().map(|host| (host.as_str(), "be_c")));
    let moved = with_be_a(&fx, fx.a.port, 10, &be_c, &routes);
    assert!(moved.aux_files["maps/hosts.map"].content.len() > 32 * 1024);
    let outcome = fx.deploy_and_observe(&moved, 1, 5).await;
    assert!(
        !outcome.reloaded && outcome.degraded.is_none(),
        "{outcome:?}"
    );
    expect_answer(fx.frontend, "a.example", "backend-A").await;
    expect_answer(fx.frontend, "c.example", "backend-C").await;
    expect_answer(fx.frontend, "host-1499.example.com", "backend-C").await;
    let show_map = local::master_cli(fx.work_dir.root(), "@1 show map");
    assert!(show_map.contains("entry_cnt=1503"), "{show_map}");
    assert!(
        impostor
            .commands()
            .iter()
            .all(|command| command == "show info"),
        "{:?}",
        impostor.commands()
    );
    fx.finish().await;
}
