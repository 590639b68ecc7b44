//! Ingress status and the `IngressIgnored`, `IngressPartlyServed` and `ServicePartlyServed`
//! Events of `haptor run`, end to end: the real binary
//! against the real kube-apiserver of the test kit, with the Ingress library as its config
//! (whose templates record `served` and `ignored` for every Ingress) and
//! `--publish-address`, then `--publish-service`. One test, one replica at a time: the replicas of a test binary share one API
//! server and watch all of it, so two replicas would write each other's Ingresses.

use crate::haptor_run;
use crate::kube_kit;

use std::time::Duration;

use haptor::pure::config::{HAProxyCfg, HAProxyTemplateConfig};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use haptor_run::{Replica, create_ingress, library_config, no_election, wait_for};
use kube_kit::Kit;

const PUBLISHED: &str = "192.0.2.10";

async fn service(client: &Client, ns: &str, name: &str, port: i32) {
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "ports": [{ "name": "http", "port": port, "targetPort": 8080 }] },
    }))
    .expect("a Service");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the Service is created");
}

async fn get_ingress(client: &Client, ns: &str, name: &str) -> Option<Ingress> {
    Api::<Ingress>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()
}

/// The IPs in the Ingress's `status.loadBalancer.ingress`.
fn published_ips(ingress: &Ingress) -> Vec<String> {
    ingress
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ip.clone())
        .collect()
}

async fn ignored_event(client: &Client, ns: &str, name: &str) -> Option<Event> {
    event_about(client, ns, name, "IngressIgnored").await
}

async fn event_about(client: &Client, ns: &str, name: &str, reason: &str) -> Option<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
}

#[tokio::test]
async fn served_ingresses_get_the_publish_address_and_only_haptors_own_ingresses_get_events() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("ingress-status").await;
    service(&client, &ns, "web", 80).await;
    kit.endpoint_slice(&ns, "web", &["10.244.0.5"], 8080)
        .await
        .expect("the EndpointSlice is created");
    create_ingress(&client, &ns, "served", "haptor", "served.example").await;
    create_ingress(&client, &ns, "other", "nginx", "other.example").await;
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &library_config(&ns, no_election()))
        .await
        .expect("the config is created");
    let replica = Replica::start_with_args(
        kit.admin_kubeconfig(),
        &ns,
        "solo",
        &["--publish-address", PUBLISHED],
    );

    // A served Ingress gets the publish address.
    let served = wait_for("the served Ingress's status", &[&replica], || async {
        get_ingress(&client, &ns, "served")
            .await
            .filter(|i| published_ips(i) == [PUBLISHED])
    })
    .await;
    let other = get_ingress(&client, &ns, "other")
        .await
        .expect("the Ingress");
    assert!(
        published_ips(&other).is_empty(),
        "an Ingress of another class gets no status: {other:?}"
    );

    // A render caused by unrelated changes (a new Service, a new served Ingress) does not
    // rewrite the unchanged status.
    let version = served.metadata.resource_version.clone();
    // The new Service takes a pool backend: its render shows in services.map, which routes
    // it there.
    let services_map = || async {
        Api::<HAProxyCfg>::namespaced(client.clone(), &ns)
            .get_opt("haptor-config")
            .await
            .ok()
            .flatten()
            .and_then(|c| {
                c.spec
                    .auxiliary_files
                    .maps
                    .into_iter()
                    .find(|m| m.name == "services.map")
                    .map(|m| m.checksum)
            })
    };
    let before = services_map().await;
    service(&client, &ns, "unrelated", 81).await;
    create_ingress(&client, &ns, "second", "haptor", "second.example").await;
    wait_for("the render with the new Service", &[&replica], || async {
        services_map()
            .await
            .filter(|now| Some(now) != before.as_ref())
    })
    .await;
    wait_for("the second Ingress's status", &[&replica], || async {
        get_ingress(&client, &ns, "second")
            .await
            .filter(|i| published_ips(i) == [PUBLISHED])
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = get_ingress(&client, &ns, "served")
        .await
        .expect("the Ingress");
    assert_eq!(
        after.metadata.resource_version, version,
        "the unchanged status is not written again"
    );

    // An annotation the library cannot use leaves the Ingress served, with a Warning Event
    // naming what was left out.
    Api::<Ingress>::namespaced(client.clone(), &ns)
        .patch(
            "second",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                "haproxy.org/timeout-server": "forever",
            }}})),
        )
        .await
        .expect("the annotation is set");
    let partly = wait_for("an IngressPartlyServed Event", &[&replica], || {
        event_about(&client, &ns, "second", "IngressPartlyServed")
    })
    .await;
    assert_eq!(partly.type_.as_deref(), Some("Warning"));
    let note = partly.note.clone().unwrap_or_default();
    assert!(
        note.contains("served by haptor with parts left out")
            && note
                .contains("annotation haproxy.org/timeout-server: \"forever\" is not a duration"),
        "the note says what was left out and why: {note}"
    );
    let second = get_ingress(&client, &ns, "second")
        .await
        .expect("the Ingress");
    assert_eq!(
        published_ips(&second),
        [PUBLISHED],
        "a partly served Ingress keeps its status"
    );
    assert!(
        ignored_event(&client, &ns, "second").await.is_none(),
        "a partly served Ingress is not reported as ignored"
    );
    let regarding = partly.regarding.as_ref().expect("a regarding object");
    assert_eq!(regarding.kind.as_deref(), Some("Ingress"));
    assert_eq!(
        regarding.uid, second.metadata.uid,
        "the Event names the Ingress's uid"
    );
    // A Service carrying an annotation it cannot apply (auth-type is an Ingress's) gets a
    // Warning Event of its own, which `kubectl describe service` finds by its uid.
    Api::<Service>::namespaced(client.clone(), &ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                "haproxy.org/auth-type": "basic-auth",
            }}})),
        )
        .await
        .expect("the Service annotation is set");
    let service_event = wait_for("a ServicePartlyServed Event", &[&replica], || {
        event_about(&client, &ns, "web", "ServicePartlyServed")
    })
    .await;
    assert_eq!(service_event.type_.as_deref(), Some("Warning"));
    let note = service_event.note.clone().unwrap_or_default();
    assert!(
        note.starts_with(&format!(
            "Service {ns}/web is served by haptor with parts left out"
        )) && note.contains("haproxy.org/auth-type"),
        "the note names the Service and the annotation: {note}"
    );
    let regarding = service_event
        .regarding
        .as_ref()
        .expect("a regarding object");
    let web = Api::<Service>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .expect("the Service");
    assert_eq!(
        (regarding.kind.as_deref(), regarding.api_version.as_deref()),
        (Some("Service"), Some("v1"))
    );
    assert_eq!(
        regarding.uid, web.metadata.uid,
        "the Event names the Service's uid"
    );

    // Another controller's Ingress is in every render's store, and its Event would have been
    // recorded with the earlier ones: there is none, it is not haptor's to judge.
    assert!(
        ignored_event(&client, &ns, "other").await.is_none(),
        "an Ingress of another class gets no Event"
    );

    // The Ingress moves to another controller's class: haptor clears its status.
    Api::<Ingress>::namespaced(client.clone(), &ns)
        .patch(
            "served",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "ingressClassName": "nginx" } })),
        )
        .await
        .expect("the class changes");
    wait_for("the status cleared", &[&replica], || async {
        get_ingress(&client, &ns, "served")
            .await
            .filter(|i| published_ips(i).is_empty())
    })
    .await;
    assert!(
        ignored_event(&client, &ns, "served").await.is_none(),
        "an Ingress moved to another controller gets no Event"
    );
    let log = replica.log_text();
    assert!(
        !log.contains("an Ingress status write or Event failed"),
        "no write failed: {log}"
    );
    drop(replica);

    // With --publish-service, the Service's cluster IP, then its load balancer address.
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let balanced: Service = serde_json::from_value(json!({
        "metadata": { "name": "haproxy" },
        "spec": { "type": "LoadBalancer", "ports": [{ "name": "http", "port": 80 }] },
    }))
    .expect("a Service");
    services
        .create(&PostParams::default(), &balanced)
        .await
        .expect("the Service is created");
    let cluster_ip = services
        .get("haproxy")
        .await
        .expect("the Service")
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("the API server gives the Service a cluster IP");
    let replica = Replica::start_with_args(
        kit.admin_kubeconfig(),
        &ns,
        "solo-2",
        &["--publish-service", &format!("{ns}/haproxy")],
    );
    wait_for(
        "the Service's cluster IP on the Ingress",
        &[&replica],
        || async {
            get_ingress(&client, &ns, "second")
                .await
                .filter(|i| published_ips(i) == [cluster_ip.clone()])
        },
    )
    .await;
    services
        .patch_status(
            "haproxy",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "status": { "loadBalancer": { "ingress": [{ "ip": "198.51.100.7" }] } } }),
            ),
        )
        .await
        .expect("the Service's load balancer status is set");
    wait_for(
        "the load balancer address on the Ingress",
        &[&replica],
        || async {
            get_ingress(&client, &ns, "second")
                .await
                .filter(|i| published_ips(i) == ["198.51.100.7"])
        },
    )
    .await;
    let log = replica.log_text();
    assert!(
        !log.contains("an Ingress status write or Event failed"),
        "no write failed: {log}"
    );
}
