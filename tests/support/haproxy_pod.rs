//! "HAProxy pods" for the in-cluster tests: a real haproxy and a real HAProxy Data Plane
//! API (`TEST_ASSET_DATAPLANEAPI`) in a network namespace of the pod network
//! (`pod_network.rs`), each pod with its own address, its own `/etc/haproxy` (the pod's
//! `/etc/netns/<ns>/haproxy`, which `ip netns exec` mounts there) and its own credentials,
//! and, when a test asks, its Pod object in the kit's API server (podIP = that address).
//!
//! Every pod runs the same rendered configuration: binds name `"${POD_IP}"`, which HAProxy
//! expands from the environment the pod's haproxy is started with. The pod's layout is the
//! one the pods of a real deployment need (README, "Development"), and runs the chart's files
//! (`dataplane_peer::write_api_files`): haproxy started by the chart's `start-haproxy.sh`, the
//! API started in `/etc/haproxy` on the chart's `dataplaneapi.yaml` (`maps_dir: maps`),
//! reloading with the chart's `reload.sh` (SIGUSR2 to the master, HAProxy 2.6, then waiting
//! until the new worker serves), the runtime API through the configuration's
//! `stats socket /etc/haproxy/runtime.sock`.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::dataplane_peer;
use super::pod_network::{NetPod, PodNetwork, PodProcess};
use super::support::haproxy_binary;

/// The Data Plane API's port in every pod.
pub const DATAPLANE_PORT: u16 = 5555;

/// A running HAProxy pod.
pub struct HaproxyPod {
    // Dropped in this order: the processes, then the pod (its namespace and /etc).
    dataplaneapi: PodProcess,
    haproxy: PodProcess,
    pod: NetPod,
    pub user: String,
    pub password: String,
}

/// The configuration a pod's haproxy starts with: its runtime socket and a frontend that
/// answers 503 until haptor deploys.
pub fn initial_config() -> String {
    "global\n    default-path origin /etc/haproxy\n    stats socket /etc/haproxy/runtime.sock level admin\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\nfrontend fe\n    bind \"${POD_IP}:8080\"\n    http-request return status 503 content-type text/plain string nothing-deployed-yet\n".to_string()
}

impl HaproxyPod {
    /// Starts a pod named `name` on `network` and waits until its API answers; its Data
    /// Plane API password is `pw-NAME`.
    pub fn start(network: &PodNetwork, name: &str) -> HaproxyPod {
        HaproxyPod::start_with_password(network, name, &format!("pw-{name}"))
    }

    /// Starts a pod whose Data Plane API user `admin` has `password` (the pods of one
    /// deployment share the credentials Secret).
    pub fn start_with_password(network: &PodNetwork, name: &str, password: &str) -> HaproxyPod {
        let api = dataplane_peer::binary().unwrap_or_else(|| {
            panic!(
                "{} names no dataplaneapi binary: HAProxy pods need the real Data Plane API",
                dataplane_peer::DATAPLANEAPI_VAR
            )
        });
        let pod = network.pod(name);
        let etc = pod.etc_dir().join("haproxy");
        std::fs::create_dir_all(&etc).expect("the pod's /etc/haproxy");
        let password = password.to_string();
        std::fs::write(etc.join("haproxy.cfg"), initial_config())
            .unwrap_or_else(|e| panic!("{name}: writing /etc/haproxy/haproxy.cfg: {e}"));
        dataplane_peer::write_api_files(
            &etc,
            "/etc/haproxy",
            &dataplane_peer::ApiListener {
                name: name.to_string(),
                host: pod.ip().to_string(),
                port: DATAPLANE_PORT,
            },
            &password,
            dataplane_peer::MapsDir::Relative,
        );
        let ip = pod.ip().to_string();
        let env = [("POD_IP", ip.as_str())];
        let bin = haproxy_binary().display().to_string();
        let haproxy = pod.spawn("sh", ["/etc/haproxy/start-haproxy.sh", bin.as_str()], &env);
        let dataplaneapi = pod.spawn(
            "sh",
            [
                "-c",
                &format!(
                    "while ! test -S /etc/haproxy/runtime.sock; do sleep 0.05; done; cd /etc/haproxy && exec {} -f /etc/haproxy/dataplaneapi.yaml",
                    api.display()
                ),
            ],
            &env,
        );
        let mut pod = HaproxyPod {
            dataplaneapi,
            haproxy,
            pod,
            user: "admin".to_string(),
            password,
        };
        pod.wait_ready();
        pod
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = self.pod.addr(DATAPLANE_PORT);
        while std::net::TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200))
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "HAProxy pod {}: the Data Plane API did not answer on {addr} in 30 s:\n{}",
                self.pod.name(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the pod's Data Plane API (haproxy goes on serving what it has).
    pub fn stop_dataplaneapi(&mut self) {
        self.dataplaneapi.kill();
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.pod.ip()
    }

    pub fn name(&self) -> &str {
        self.pod.name()
    }

    /// `http://<pod-ip>:5555`, the URL a Deployer's target is given.
    pub fn dataplane_url(&self) -> String {
        format!("http://{}:{DATAPLANE_PORT}", self.pod.ip())
    }

    /// The pod's `/etc/haproxy` as the host sees it.
    pub fn etc_haproxy(&self) -> PathBuf {
        self.pod.etc_dir().join("haproxy")
    }

    /// How many times the pod's haproxy reloaded (the master's `show proc`).
    pub fn reloads(&self) -> Option<u64> {
        dataplane_peer::master_reloads(&self.etc_haproxy().join("master.sock"))
    }

    pub fn logs(&self) -> String {
        format!(
            "--- haproxy\n{}\n--- dataplaneapi\n{}",
            self.haproxy.log_tail(),
            self.dataplaneapi.log_tail()
        )
    }
}
