//! `helm upgrade` that changes the controller pods' template: the Deployment rolls them one
//! at a time (maxUnavailable 0 is the chart's rule for the controllers), the Lease passes from
//! an old pod to a new one, and the API server, asked to admit an Ingress every quarter
//! second through the rollout, never gets a refusal or a failed webhook call.

use crate::node_kit::Node;
use crate::release::Release;
use crate::webhook::{applications, ingress, refused};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[test]
fn helm_upgrade_rolls_the_controllers_hands_the_lease_over_and_refuses_no_admission() {
    let (node, _turn) = Node::take();
    let release = Release::install_wait(node, "upgrade", &[]);
    release.registered_webhook();
    // The webhook judges the applications' namespace (not the release's own): a broken
    // Ingress there is refused, so the admissions below are the webhook's.
    let apps = applications(node);
    refused(
        node,
        &apps,
        &ingress("broken-tls", "broken.example", Some("mismatched")),
    );
    let old = release.ready_controllers();
    assert_eq!(old.len(), 2, "{old:?}");
    let old_holder = node.wait_for("the Lease held by a controller pod", || {
        release.lease_holder().filter(|holder| old.contains(holder))
    });

    // Admissions through the rollout: each a server-side dry run the webhook judges.
    let stop = Arc::new(AtomicBool::new(false));
    let admissions = {
        let stop = Arc::clone(&stop);
        let apps = apps.clone();
        std::thread::spawn(move || {
            let good = ingress("good", "good.example", None);
            let (mut admitted, mut refused) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let output = node.kubectl_output(
                    &["-n", &apps, "apply", "--dry-run=server", "-f", "-"],
                    Some(&good),
                );
                if output.status.success() {
                    admitted += 1;
                } else {
                    refused.push(String::from_utf8_lossy(&output.stderr).into_owned());
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            (admitted, refused)
        })
    };

    release.roll_controllers();
    let new_holder = node.wait_for("the Lease held by a new controller pod", || {
        let ready = release.ready_controllers();
        let holder = release.lease_holder()?;
        (ready.len() == 2 && ready.iter().all(|pod| !old.contains(pod)) && ready.contains(&holder))
            .then_some(holder)
    });
    // The old pods' endpoints may still be leaving kube-proxy's rules: a few more admissions.
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let (admitted, refused) = admissions.join().expect("the admissions thread ends");

    eprintln!(
        "upgrade: the Lease went from {old_holder} to {new_holder}; {admitted} admissions during the rollout, {} refused",
        refused.len()
    );
    assert_ne!(old_holder, new_holder);
    assert!(admitted > 0, "admissions were tried through the rollout");
    assert!(
        refused.is_empty(),
        "no admission is refused while the controllers roll: {refused:#?}"
    );
}
