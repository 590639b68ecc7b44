//! The pod network of `tests/support/pod_network.rs`: network namespaces on a bridge, on a
//! private /24 of 10.213.0.0/16. What is proven: a real HAProxy backend in a pod answers on
//! the pod's address from the host; pods reach each other (curl, and a HAProxy in one pod
//! proxying to a backend in another) and the test process on the gateway; a pod's
//! `/etc/netns` dir is its `/etc`, so it has its own `/etc/haproxy`; the kube-apiserver
//! accepts a pod's address in an EndpointSlice and a Pod's status, where it refuses a
//! loopback one; and dropping a pod or a network removes its processes, namespaces, links
//! and dirs, as the launcher does when the test process is killed.

use crate::kube_kit;
use crate::pod_network;
use crate::support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube_kit::{Kit, process_stat};
use pod_network::{NetPod, PodNetwork, links, namespaces};

/// Set in the child that [`a_killed_test_process_leaves_no_namespace_behind`] starts: the
/// file the child writes what its network made to before it waits to be killed.
const HOLD_ENV: &str = "HAPTOR_POD_NETWORK_HOLD_AT";

/// `GET /` on `addr` from the host: the status line and the body.
fn get(addr: SocketAddrV4) -> (String, String) {
    let mut stream = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .unwrap_or_else(|e| panic!("reading the answer of {addr}: {e}"));
    let status = response.lines().next().unwrap_or_default().to_string();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `curl URL` in `pod`: its stdout, or a panic naming the pod with curl's stderr.
fn curl_in(pod: &NetPod, url: &str) -> String {
    let output = pod.run("curl", ["-sS", "-m", "10", url]);
    assert!(
        output.status.success(),
        "curl {url} in {} failed ({}): {}",
        pod.namespace(),
        output.status,
        support::text(&output)
    );
    stdout(&output)
}

#[test]
fn a_backend_in_a_pod_answers_on_the_pod_ip_from_the_host() {
    let network = PodNetwork::shared();
    let pod = network.pod("web");
    let ip = pod.ip();
    assert_eq!(ip.octets()[..2], [10, 213], "{ip} lies in 10.213.0.0/16");
    assert!(!ip.is_loopback());
    let _backend = pod.http_backend(8080, "served by pod \"web\" for $HOME");
    assert_eq!(
        get(pod.addr(8080)),
        (
            "HTTP/1.1 200 OK".to_string(),
            "served by pod \"web\" for $HOME".to_string()
        )
    );
}

#[test]
fn two_pods_reach_each_other() {
    let network = PodNetwork::shared();
    let (a, b) = (network.pod("reach-a"), network.pod("reach-b"));
    let _in_a = a.http_backend(8080, "pod a");
    let _in_b = b.http_backend(9090, "pod b");
    assert_eq!(curl_in(&b, &format!("http://{}/", a.addr(8080))), "pod a");
    assert_eq!(curl_in(&a, &format!("http://{}/", b.addr(9090))), "pod b");
}

#[test]
fn a_haproxy_in_one_pod_proxies_to_a_backend_in_another() {
    let network = PodNetwork::shared();
    let (lb, web) = (network.pod("proxy-lb"), network.pod("proxy-web"));
    let _backend = web.http_backend(8080, "from proxy-web");
    let config = network.dir().join("proxy-lb.cfg");
    std::fs::write(
        &config,
        format!(
            "defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend f\n  bind {}\n  default_backend web\n\
             backend web\n  server web0 {}\n",
            lb.addr(80),
            web.addr(8080)
        ),
    )
    .expect("write the proxy's config");
    let mut proxy = lb.spawn(
        support::haproxy_binary(),
        [Path::new("-db"), Path::new("-f"), &config],
        &[],
    );
    proxy.wait_listening(lb.addr(80));
    let answer = get(lb.addr(80));
    assert_eq!(
        answer,
        ("HTTP/1.1 200 OK".to_string(), "from proxy-web".to_string()),
        "the proxy's output ends:\n{}",
        proxy.log_tail()
    );
}

#[test]
fn a_pod_reaches_the_test_process_on_the_gateway() {
    let network = PodNetwork::shared();
    let pod = network.pod("to-host");
    let listener = TcpListener::bind((network.gateway(), 0)).expect("bind on the gateway");
    let addr = listener.local_addr().expect("the listener's address");
    let server = std::thread::spawn(move || {
        let (mut stream, peer) = listener.accept().expect("a connection from the pod");
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request);
        stream
            .write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nthe host\n",
            )
            .expect("answer the pod");
        peer
    });
    assert_eq!(curl_in(&pod, &format!("http://{addr}/")), "the host\n");
    let peer = server.join().expect("the server thread");
    assert_eq!(
        peer.ip(),
        pod.ip(),
        "the connection came from the pod's address"
    );
}

#[test]
fn a_pod_sees_its_own_etc_haproxy() {
    let network = PodNetwork::shared();
    let (own, plain) = (network.pod("etc-own"), network.pod("etc-plain"));
    let etc = own.etc_dir();
    assert_eq!(etc, Path::new("/etc/netns").join(own.namespace()));
    let haproxy_dir = etc.join("haproxy");
    std::fs::create_dir_all(&haproxy_dir).expect("the pod's /etc/haproxy");
    std::fs::write(
        haproxy_dir.join("haproxy.cfg"),
        format!(
            "defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend f\n  bind {}\n  http-request return status 200 content-type text/plain string \"own config\"\n",
            own.addr(8080)
        ),
    )
    .expect("the pod's haproxy.cfg");

    let listing = |pod: &NetPod| {
        let output = pod.run("ls", ["/etc/haproxy"]);
        assert!(output.status.success(), "{}", support::text(&output));
        stdout(&output)
    };
    assert_eq!(listing(&own), "haproxy.cfg\n");
    // The host's and another pod's /etc/haproxy are the package's.
    let host = std::fs::read_to_string("/etc/haproxy/haproxy.cfg").expect("the host's config");
    assert!(!host.contains("own config"));
    assert!(listing(&plain).contains("errors"), "{}", listing(&plain));

    // HAProxy in the pod reads its default config path there.
    let mut haproxy = own.spawn(
        support::haproxy_binary(),
        ["-db", "-f", "/etc/haproxy/haproxy.cfg"],
        &[],
    );
    haproxy.wait_listening(own.addr(8080));
    assert_eq!(get(own.addr(8080)).1, "own config");
    drop(haproxy);
    drop(own);
    assert!(!etc.exists(), "{} is removed with the pod", etc.display());
}

#[tokio::test]
async fn the_apiserver_accepts_a_pod_ip_in_an_endpoint_slice_and_a_pod_status() {
    let network = PodNetwork::shared();
    let pod = network.pod("api");
    let ip = pod.ip().to_string();
    let kit = Kit::shared();
    let ns = kit.temp_ns("pod-network").await;

    kit.endpoint_slice(&ns, "web", &[&ip], 8080)
        .await
        .unwrap_or_else(|e| panic!("the server refused an EndpointSlice with {ip}: {e}"));
    let slice = Api::<EndpointSlice>::namespaced(kit.admin().await, &ns)
        .get("web-kit")
        .await
        .expect("read the slice back");
    let addresses: Vec<&str> = slice
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter().map(String::as_str))
        .collect();
    assert_eq!(addresses, [ip.as_str()]);

    let made = kit
        .ready_pod(&ns, "haproxy-0", &[("app", "haproxy")], &ip)
        .await;
    assert_eq!(made.status.and_then(|s| s.pod_ip), Some(ip.clone()));

    let refused = kit
        .endpoint_slice(&ns, "loopback", &["127.0.0.1"], 8080)
        .await
        .expect_err("a loopback endpoint is refused");
    assert!(
        matches!(&refused, kube::Error::Api(status) if status.code == 422),
        "{refused}"
    );
}

/// What a network made that must be gone after it is: no namespace of its prefix, no link
/// of its bridge (the bridge and `BRIDGEp*` veths), no dir.
fn leftovers(prefix: &str, bridge: &str, dirs: &[PathBuf]) -> Vec<String> {
    let veth = format!("{bridge}p");
    let mut left: Vec<String> = namespaces()
        .into_iter()
        .filter(|ns| ns.starts_with(prefix))
        .map(|ns| format!("namespace {ns}"))
        .collect();
    left.extend(
        links()
            .into_iter()
            .filter(|l| l == bridge || l.starts_with(&veth))
            .map(|l| format!("link {l}")),
    );
    left.extend(
        dirs.iter()
            .filter(|d| d.exists())
            .map(|d| format!("dir {}", d.display())),
    );
    left
}

/// Whether the process `pid` that started at `start` still runs.
fn still_running(pid: u32, start: u64) -> bool {
    process_stat(pid).is_some_and(|(state, s)| s == start && !matches!(state, 'Z' | 'X'))
}

#[test]
fn dropping_a_pod_kills_its_processes_and_removes_its_namespace() {
    let network = PodNetwork::shared();
    let pod = network.pod("dropped");
    let etc = pod.etc_dir();
    let mut sleeper = pod.spawn("sleep", ["600"], &[]);
    let (ns, veth) = (pod.namespace().to_string(), pod.veth().to_string());
    assert!(namespaces().contains(&ns));
    assert!(links().contains(&veth));
    drop(pod);
    let status = sleeper.wait_timeout(Duration::from_secs(30));
    assert!(!status.success(), "sleep was killed: {status}");
    assert!(!namespaces().contains(&ns), "{ns} is deleted");
    assert!(!links().contains(&veth), "{veth} is deleted");
    assert!(!etc.exists(), "{} is removed", etc.display());
}

#[test]
fn dropping_the_network_removes_its_namespaces_and_links() {
    let network = PodNetwork::new();
    let (a, b) = (network.pod("one"), network.pod("two"));
    let backend = a.http_backend(8080, "one");
    let etc = b.etc_dir();
    let (prefix, bridge) = (
        network.namespace_prefix().to_string(),
        network.bridge().to_string(),
    );
    let dirs = [network.dir().to_path_buf(), etc.clone()];
    for ns in [a.namespace(), b.namespace()] {
        assert!(namespaces().iter().any(|n| n == ns), "{ns} exists");
    }
    for link in [&bridge, a.veth(), b.veth()] {
        assert!(links().iter().any(|l| l == link), "{link} exists");
    }
    let (pid, launcher) = (backend.pid(), network.launcher_pid());
    let start = |pid| process_stat(pid).map(|(_, start)| start).expect("it runs");
    let started = [(pid, start(pid)), (launcher, start(launcher))];

    if let Some(path) = std::env::var_os(HOLD_ENV) {
        let text = format!(
            "{prefix} {bridge} {pid} {} {launcher} {} {} {}\n",
            started[0].1,
            started[1].1,
            dirs[0].display(),
            dirs[1].display()
        );
        let tmp = PathBuf::from(&path).with_extension("new");
        std::fs::write(&tmp, text).expect("write what the network made");
        std::fs::rename(&tmp, &path).expect("move it in place");
        loop {
            std::thread::park();
        }
    }

    drop((backend, a, b, network));
    // The drop waited for the launcher, which removed everything.
    assert_eq!(leftovers(&prefix, &bridge, &dirs), Vec::<String>::new());
    for (pid, start) in started {
        assert!(!still_running(pid, start), "pid {pid} is gone");
    }
}

#[test]
fn a_killed_test_process_leaves_no_namespace_behind() {
    let scratch = tempfile::tempdir().expect("a temp dir");
    let held = scratch.path().join("held");
    let log = scratch.path().join("child.log");
    let output = std::fs::File::create(&log).expect("child.log");
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "pod_networks::dropping_the_network_removes_its_namespaces_and_links",
            "--exact",
            "--nocapture",
        ])
        .env(HOLD_ENV, &held)
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("child.log"))
        .stderr(output)
        .spawn()
        .expect("the child test process starts");
    let child_log = || std::fs::read_to_string(&log).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&held) {
            break text;
        }
        if let Some(status) = child.try_wait().expect("wait") {
            panic!(
                "the child test exited ({status}) before its network was up:\n{}",
                child_log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the child's network never came up:\n{}",
            child_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [
        prefix,
        bridge,
        pid,
        pid_start,
        launcher,
        launcher_start,
        dir,
        etc,
    ] = fields[..]
    else {
        panic!("the child wrote {text:?}");
    };
    let number = |s: &str| -> u64 { s.parse().expect("a number") };
    let processes = [
        ("the backend", number(pid) as u32, number(pid_start)),
        (
            "the launcher",
            number(launcher) as u32,
            number(launcher_start),
        ),
    ];
    let dirs = [PathBuf::from(dir), PathBuf::from(etc)];
    assert!(
        !leftovers(prefix, bridge, &dirs).is_empty(),
        "the child's network is there"
    );

    child.kill().expect("SIGKILL the child test process");
    child.wait().expect("reap the child");

    let left = || {
        let mut left = leftovers(prefix, bridge, &dirs);
        left.extend(
            processes
                .iter()
                .filter(|&&(_, pid, start)| still_running(pid, start))
                .map(|(name, pid, _)| format!("{name} (pid {pid})")),
        );
        left
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !left().is_empty() {
        assert!(
            Instant::now() < deadline,
            "after the test process was killed, still there: {:?}",
            left()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn networks_made_at_once_get_different_subnets() {
    let networks: Vec<PodNetwork> = (0..3).map(|_| PodNetwork::new()).collect();
    let mut gateways: Vec<Ipv4Addr> = networks.iter().map(PodNetwork::gateway).collect();
    gateways.push(PodNetwork::shared().gateway());
    let mut distinct = gateways.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), gateways.len(), "{gateways:?}");
}
