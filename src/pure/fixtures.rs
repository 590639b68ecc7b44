//! Synthetic Kubernetes objects at scale (Ingresses, Services, EndpointSlices) for benches and
//! load tests. Each generated app `app-N` in namespace `ns-(N % 10)` has one Ingress with
//! host `app-N.example`, one Service on port 80 and one EndpointSlice with `endpoints`
//! addresses in 127.x.y.z (loopback, so a real haproxy using them never sends traffic off this
//! machine). [`haproxy_config_with_backends`] writes a large plain `haproxy.cfg` for the
//! parser.

use serde_json::{Value, json};

use crate::pure::store::{StoreError, Stores};

/// Applies apps `0..count` (Ingress of class `class`, Service, EndpointSlice with
/// `endpoints` addresses) to the stores named `ingresses`, `services` and `endpointslices`,
/// as the Ingress library and the example config name them.
pub fn load_apps(
    stores: &Stores,
    count: usize,
    class: &str,
    endpoints: usize,
) -> Result<(), StoreError> {
    for n in 0..count {
        for (store, object) in [
            ("ingresses", ingress(n, class)),
            ("services", service(n)),
            ("endpointslices", endpoint_slice(n, endpoints)),
        ] {
            if let Some(store) = stores.get(store) {
                store.apply(object)?;
            }
        }
    }
    Ok(())
}

/// The Ingress of app `n`.
pub fn ingress(n: usize, class: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": format!("app-{n}"), "namespace": format!("ns-{}", n % 10)},
        "spec": {
            "ingressClassName": class,
            "rules": [{
                "host": format!("app-{n}.example"),
                "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": format!("app-{n}"), "port": {"number": 80}}}}]}
            }]
        }
    })
}

/// The Service of app `n`.
pub fn service(n: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": format!("app-{n}"), "namespace": format!("ns-{}", n % 10)},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    })
}

/// The EndpointSlice of app `n` with `endpoints` addresses.
pub fn endpoint_slice(n: usize, endpoints: usize) -> Value {
    let addresses: Vec<Value> = (0..endpoints)
        // Loopback addresses only: benches run real haproxy, which may connect to them.
        .map(|e| json!({"addresses": [format!("127.{}.{}.{}", 1 + (n / 250) % 250, n % 250, e + 1)]}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("app-{n}-slice"),
            "namespace": format!("ns-{}", n % 10),
            "labels": {"kubernetes.io/service-name": format!("app-{n}")}
        },
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": addresses
    })
}

/// A plain `haproxy.cfg` of `backends` backends with `servers` servers each and one
/// frontend routing host `host-B.example` to backend `beB` with a `use_backend` rule (in
/// backend order, one line each). Every server line carries options and a quoted
/// environment default (`"${OPTS-inter 2s}"`) as rendered configurations do; server `sS` of
/// `beB` is at `127.(1 + B / 250 % 250).(B % 250).(S + 1):8080`.
pub fn haproxy_config_with_backends(backends: usize, servers: usize) -> String {
    let mut text = String::from(
        "global\n    maxconn 100000\ndefaults\n    mode http\n    timeout connect 5s\n",
    );
    text.push_str("frontend fe\n    bind :80\n");
    for backend in 0..backends {
        text.push_str(&format!(
            "    use_backend be{backend} if {{ hdr(host) -i host-{backend}.example }}\n"
        ));
    }
    for backend in 0..backends {
        text.push_str(&format!("backend be{backend}\n    balance roundrobin\n"));
        for server in 0..servers {
            text.push_str(&format!(
                "    server s{server} 127.{}.{}.{}:8080 check weight 10 \"${{OPTS-inter 2s}}\"\n",
                1 + (backend / 250) % 250,
                backend % 250,
                server + 1
            ));
        }
    }
    text
}
