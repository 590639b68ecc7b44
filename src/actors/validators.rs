//! The config validators of the config-change scatter-gather: `basic` (structure),
//! `template` (every template compiles) and `jsonpath` (index paths and field selectors
//! compile). Each is an actor answering `ValidatorMsg::Validate`; [`gather_verdicts`] asks
//! them all at once, each with a timeout, so one slow or stuck validator makes the config
//! invalid within the timeout instead of hanging the loader.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, set};
use crate::messages::{ValidatorMsg, ValidatorVerdict};
use crate::pure::config::{HAProxyTemplateConfigSpec, validate_spec};
use crate::pure::pipeline::template_input;
use crate::pure::store::ResourceStore;
use crate::pure::template::TemplateSet;

/// Which check a validator actor runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidatorKind {
    Basic,
    Template,
    JsonPath,
}

impl ValidatorKind {
    pub fn name(self) -> &'static str {
        match self {
            ValidatorKind::Basic => "basic",
            ValidatorKind::Template => "template",
            ValidatorKind::JsonPath => "jsonpath",
        }
    }

    /// Runs the check (pure; the actor only wraps it).
    pub fn check(self, spec: &HAProxyTemplateConfigSpec) -> Vec<String> {
        match self {
            ValidatorKind::Basic => validate_spec(spec)
                .iter()
                .map(ToString::to_string)
                .collect(),
            ValidatorKind::Template => match TemplateSet::compile(template_input(spec)) {
                Ok(_) => vec![],
                Err(e) => vec![e.to_string()],
            },
            ValidatorKind::JsonPath => {
                let mut problems = Vec::new();
                for (name, watched) in &spec.watched_resources {
                    if let Err(e) = ResourceStore::new(
                        name.clone(),
                        watched.index_by.clone(),
                        spec.watched_resources_ignore_fields.clone(),
                    ) {
                        problems.push(format!("spec.watchedResources.{name}: {e}"));
                    }
                    if let Some(selector) = watched.field_selector.as_deref() {
                        let path = selector.split(['=', '!']).next().unwrap_or_default().trim();
                        if let Err(e) = crate::pure::store::FieldPath::parse(path) {
                            problems
                                .push(format!("spec.watchedResources.{name}.fieldSelector: {e}"));
                        }
                    }
                }
                problems
            }
        }
    }
}

/// A validator actor.
#[derive(Clone)]
pub struct ConfigValidator {
    pub kind: ValidatorKind,
    pub iteration: Arc<Iteration>,
}

impl Actor for ConfigValidator {
    type Msg = ValidatorMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        let mut validators = self
            .iteration
            .wiring
            .validators
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        validators.retain(|(name, _)| *name != self.kind.name());
        validators.push((self.kind.name(), myself));
        set(&self.iteration.wiring.validators, validators);
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let ValidatorMsg::Validate(spec, reply) = msg;
        let _busy = self.iteration.services.introspection.busy(self.kind.name());
        let kind = self.kind;
        // Template compilation can be slow for large configs; keep it off the async workers.
        let problems = tokio::task::spawn_blocking(move || kind.check(&spec))
            .await
            .unwrap_or_else(|e| vec![format!("validator crashed: {e}")]);
        let _ = reply.send(ValidatorVerdict {
            validator: kind.name(),
            problems,
        });
        Ok(())
    }
}

/// Asks every validator concurrently, each with `timeout`. A validator that does not answer
/// in time (or is gone) yields the problem "validator X timed out" (or "is not running").
pub async fn gather_verdicts(
    validators: &[(&'static str, ActorRef<ValidatorMsg>)],
    spec: Arc<HAProxyTemplateConfigSpec>,
    timeout: Duration,
) -> Vec<ValidatorVerdict> {
    let asks = validators.iter().map(|(name, validator)| {
        let spec = Arc::clone(&spec);
        async move {
            match validator
                .call(|reply| ValidatorMsg::Validate(spec, reply), Some(timeout))
                .await
            {
                Ok(ractor::rpc::CallResult::Success(verdict)) => verdict,
                Ok(ractor::rpc::CallResult::Timeout) => ValidatorVerdict {
                    validator: name,
                    problems: vec![format!("validator {name} timed out after {timeout:?}")],
                },
                Ok(ractor::rpc::CallResult::SenderError) | Err(_) => ValidatorVerdict {
                    validator: name,
                    problems: vec![format!("validator {name} is not running")],
                },
            }
        }
    });
    futures::future::join_all(asks).await
}

#[cfg(test)]
mod tests {
    use ractor::RpcReplyPort;

    use super::*;

    /// A validator that holds every request and never answers.
    struct StuckValidator;

    impl Actor for StuckValidator {
        type Msg = ValidatorMsg;
        type State = Vec<RpcReplyPort<ValidatorVerdict>>;
        type Arguments = ();

        async fn pre_start(
            &self,
            _: ActorRef<Self::Msg>,
            _: (),
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(vec![])
        }

        async fn handle(
            &self,
            _: ActorRef<Self::Msg>,
            msg: Self::Msg,
            held: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            let ValidatorMsg::Validate(_, reply) = msg;
            held.push(reply);
            Ok(())
        }
    }

    /// A validator that answers at once with the basic check.
    struct QuickValidator;

    impl Actor for QuickValidator {
        type Msg = ValidatorMsg;
        type State = ();
        type Arguments = ();

        async fn pre_start(&self, _: ActorRef<Self::Msg>, _: ()) -> Result<(), ActorProcessingErr> {
            Ok(())
        }

        async fn handle(
            &self,
            _: ActorRef<Self::Msg>,
            msg: Self::Msg,
            _: &mut (),
        ) -> Result<(), ActorProcessingErr> {
            let ValidatorMsg::Validate(spec, reply) = msg;
            let _ = reply.send(ValidatorVerdict {
                validator: "basic",
                problems: ValidatorKind::Basic.check(&spec),
            });
            Ok(())
        }
    }

    /// The clock is paused, so the validator timeout passes in virtual time; a gather that
    /// waited for the stuck validator would never answer, and the guard (far beyond the
    /// validator timeout) turns that into a failure.
    #[tokio::test(start_paused = true)]
    async fn a_validator_that_never_answers_gets_a_timeout_verdict_beside_the_others_verdicts() {
        let (stuck, _) = Actor::spawn(None, StuckValidator, ())
            .await
            .expect("spawns");
        let (quick, _) = Actor::spawn(None, QuickValidator, ())
            .await
            .expect("spawns");
        let spec = Arc::new(HAProxyTemplateConfigSpec {
            haproxy_config: crate::pure::config::HaproxyConfigTemplate {
                template: "global\n".into(),
                post_processing: vec![],
            },
            ..Default::default()
        });
        let verdicts = tokio::time::timeout(
            Duration::from_secs(3600),
            gather_verdicts(
                &[("basic", quick.clone()), ("template", stuck.clone())],
                spec,
                Duration::from_millis(200),
            ),
        )
        .await
        .expect("the gather answers although one validator never does");
        let verdicts: Vec<_> = verdicts
            .into_iter()
            .map(|v| (v.validator, v.problems))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                ("basic", vec![]),
                (
                    "template",
                    vec!["validator template timed out after 200ms".to_string()]
                ),
            ]
        );
        stuck.stop(None);
        quick.stop(None);
    }

    #[test]
    fn each_validator_kind_catches_its_own_problems() {
        let mut spec = HAProxyTemplateConfigSpec {
            haproxy_config: crate::pure::config::HaproxyConfigTemplate {
                template: "{{#if}}".into(),
                post_processing: vec![],
            },
            ..Default::default()
        };
        spec.watched_resources.insert(
            "svc".into(),
            crate::pure::config::WatchedResource {
                api_version: "v1".into(),
                resources: "services".into(),
                index_by: vec!["metadata..name".into()],
                ..Default::default()
            },
        );
        assert!(ValidatorKind::Basic.check(&spec).is_empty());
        assert_eq!(ValidatorKind::Template.check(&spec).len(), 1);
        let jsonpath = ValidatorKind::JsonPath.check(&spec);
        assert_eq!(jsonpath.len(), 1);
        assert!(jsonpath[0].contains("metadata..name"), "{jsonpath:?}");
    }
}
