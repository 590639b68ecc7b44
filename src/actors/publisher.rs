//! The leader-only ConfigPublisher: publishes what was rendered (the `HAProxyCfg` spec: the
//! configuration, its checksum and a summary of its auxiliary files) and each instance's
//! deployment state through a [`PublishSink`] — the Kubernetes API in-cluster, memory in
//! `haptor local` and tests.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current, set};
use crate::messages::ConfigPublisherMsg;
use crate::pure::checksum::AuxDigests;
use crate::pure::config::{AuxiliaryFileSummary, HAProxyCfgSpec, HAProxyCfgStatus, InstanceStatus};
use crate::pure::rendered::RenderedConfig;
use crate::seams::PublishSink;

/// Publishes the rendered configuration and each instance's state.
#[derive(Clone)]
pub struct ConfigPublisher {
    pub iteration: Arc<Iteration>,
    pub sink: Arc<dyn PublishSink>,
}

pub struct PublisherState {
    spec: Option<HAProxyCfgSpec>,
    status: HAProxyCfgStatus,
    /// The render last published and the digests of its auxiliary files: the next summary
    /// hashes only the files that changed.
    digests: Option<(Arc<RenderedConfig>, AuxDigests)>,
}

impl Actor for ConfigPublisher {
    type Msg = ConfigPublisherMsg;
    type State = PublisherState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        set(&self.iteration.wiring.publisher, Some(myself));
        // State replay: the HTTP resources' states known before this publisher started.
        let http_resources = self
            .iteration
            .with_latest(|l| l.http_resources.values().cloned().collect());
        Ok(PublisherState {
            spec: None,
            status: HAProxyCfgStatus {
                http_resources,
                ..HAProxyCfgStatus::default()
            },
            digests: None,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self
            .iteration
            .services
            .introspection
            .busy("config-publisher");
        match msg {
            ConfigPublisherMsg::Publish(render) => {
                self.sink.outcomes(&render.rendered.outcomes);
                self.sink.gateway_statuses(&render.rendered.status_records);
                let (path, base_dir) = self.iteration.with_latest(|l| {
                    let dataplane = &l.compiled.spec.dataplane;
                    (
                        dataplane.config_file.clone(),
                        dataplane.path_resolver().base_dir,
                    )
                });
                let digests = AuxDigests::after(
                    &render.rendered,
                    state
                        .digests
                        .as_ref()
                        .map(|(rendered, digests)| (&**rendered, digests)),
                );
                state.spec = Some(HAProxyCfgSpec {
                    path,
                    // Userlist password hashes are not published.
                    content: crate::pure::redact::redact_secrets(&render.rendered.haproxy_cfg),
                    // How the content is stored is the Kubernetes sink's business
                    // (`pure::config::published`).
                    content_encoding: None,
                    size: None,
                    checksum: render.checksum.prefixed(),
                    auxiliary_files: AuxiliaryFileSummary::with_digests(
                        &render.rendered,
                        &base_dir,
                        &digests,
                    ),
                });
                state.digests = Some((Arc::clone(&render.rendered), digests));
            }
            ConfigPublisherMsg::HttpResource(resource) => {
                let list = &mut state.status.http_resources;
                match list.iter_mut().find(|r| r.name == resource.name) {
                    Some(entry) => *entry = resource,
                    None => {
                        list.push(resource);
                        list.sort_by(|a, b| a.name.cmp(&b.name));
                    }
                }
            }
            ConfigPublisherMsg::InstanceResult {
                instance,
                checksum,
                result,
            } => {
                let now = now_rfc3339();
                let entry = match state
                    .status
                    .instances
                    .iter_mut()
                    .find(|i| i.name == instance)
                {
                    Some(entry) => entry,
                    None => {
                        state.status.instances.push(InstanceStatus {
                            name: instance.clone(),
                            ..Default::default()
                        });
                        state.status.instances.sort_by(|a, b| a.name.cmp(&b.name));
                        match state
                            .status
                            .instances
                            .iter_mut()
                            .find(|i| i.name == instance)
                        {
                            Some(entry) => entry,
                            None => return Ok(()),
                        }
                    }
                };
                match result {
                    Ok(outcome) => {
                        entry.deployed_at = Some(now.clone());
                        entry.checksum = Some(checksum.prefixed());
                        if outcome.reloaded {
                            entry.last_reload_at = Some(now);
                        }
                        entry.last_error = None;
                        entry.consecutive_errors = 0;
                    }
                    Err(error) => {
                        entry.last_error = Some(error.to_string());
                        entry.consecutive_errors += 1;
                    }
                }
            }
        }
        if let Some(spec) = &state.spec {
            self.sink.publish(spec, &state.status);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if current(&self.iteration.wiring.publisher).is_some_and(|p| p.get_id() == myself.get_id())
        {
            set(&self.iteration.wiring.publisher, None);
        }
        Ok(())
    }
}

/// Now, as RFC 3339 in UTC to the second (`2026-12-01T08:41:01Z`), as Kubernetes writes
/// times; the fraction is cut, never rounded up into the next second.
pub(crate) fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}
