//! The config's durations as typed settings. A `HAProxyTemplateConfig` writes its durations
//! as Go-style text (`dataplane.deploymentTimeout`, `minDeploymentInterval`,
//! `driftPreventionInterval`, each watched resource's `debounce`, `rendering.timeout`, the
//! three `leaderElection` timings); [`ConfigTimings::from_spec`] parses each of them once,
//! when the spec is validated (`validate_spec`, `CompiledConfig::compile`), applies the rules
//! they must keep, and reports every bad one with its field path. `CompiledConfig` keeps the
//! result, and every actor reads its durations from there: nothing parses a duration text
//! again or falls back to a default of its own. [`LeaseTimings`] are the election's part:
//! [`LeaseTimings::check`] is the one statement of how they nest, which both the validation
//! and the Lease elector (which starts from the `leaderElection` settings alone) apply.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{
    DurationError, HAProxyTemplateConfigSpec, LeaderElectionSettings, SpecProblem, WatchedResource,
    parse_duration,
};

/// Every duration of a validated spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigTimings {
    /// `dataplane.deploymentTimeout`: how long one deployment attempt may take.
    pub deployment_timeout: Duration,
    /// `dataplane.minDeploymentInterval`: the least time between two reloads of an instance.
    pub min_deployment_interval: Duration,
    /// `dataplane.driftPreventionInterval`: how often instances are compared with the render.
    pub drift_prevention_interval: Duration,
    /// `rendering.timeout`: how long one render may take (never zero).
    pub rendering_timeout: Duration,
    /// `leaderElection`'s three durations, nested as [`LeaseTimings::check`] requires.
    pub leader_election: LeaseTimings,
    /// Each watched resource's debounce (its `debounce`, else [`default_debounce`]).
    debounce: BTreeMap<String, Duration>,
}

impl ConfigTimings {
    /// Parses and checks every duration of `spec`; the problems name their fields.
    pub fn from_spec(spec: &HAProxyTemplateConfigSpec) -> Result<ConfigTimings, Vec<SpecProblem>> {
        let mut problems = Vec::new();
        let mut parse = |path: String, text: &str| match parse_duration(text) {
            Ok(duration) => Some(duration),
            Err(error) => {
                problems.push(SpecProblem {
                    path,
                    message: error.to_string(),
                });
                None
            }
        };
        let dp = &spec.dataplane;
        let min_deployment_interval = parse(
            "spec.dataplane.minDeploymentInterval".into(),
            &dp.min_deployment_interval,
        );
        let drift_prevention_interval = parse(
            "spec.dataplane.driftPreventionInterval".into(),
            &dp.drift_prevention_interval,
        );
        let deployment_timeout = parse(
            "spec.dataplane.deploymentTimeout".into(),
            &dp.deployment_timeout,
        );
        let rendering_timeout = parse("spec.rendering.timeout".into(), &spec.rendering.timeout);
        let mut debounce = BTreeMap::new();
        for (name, watched) in &spec.watched_resources {
            let duration = match &watched.debounce {
                Some(text) => parse(format!("spec.watchedResources.{name}.debounce"), text),
                None => Some(default_debounce(watched)),
            };
            if let Some(duration) = duration {
                debounce.insert(name.clone(), duration);
            }
        }
        let leader_election = LeaseTimings::check(&spec.leader_election)
            .map_err(|errors| problems.extend(errors.iter().map(TimingsError::to_problem)))
            .ok();
        if rendering_timeout.is_some_and(|t| t.is_zero()) {
            problems.push(SpecProblem {
                path: "spec.rendering.timeout".into(),
                message: "must be longer than zero".into(),
            });
        }
        match (
            deployment_timeout,
            min_deployment_interval,
            drift_prevention_interval,
            rendering_timeout,
            leader_election,
        ) {
            (
                Some(deployment_timeout),
                Some(min_deployment_interval),
                Some(drift_prevention_interval),
                Some(rendering_timeout),
                Some(leader_election),
            ) if problems.is_empty() => Ok(ConfigTimings {
                deployment_timeout,
                min_deployment_interval,
                drift_prevention_interval,
                rendering_timeout,
                leader_election,
                debounce,
            }),
            _ => Err(problems),
        }
    }

    /// The debounce of the watched resource `resource`; `None` for a name the spec does not
    /// watch.
    pub fn debounce(&self, resource: &str) -> Option<Duration> {
        self.debounce.get(resource).copied()
    }
}

/// The debounce of a watched resource that sets none: 0 for EndpointSlices (endpoint
/// changes should reach HAProxy at once), 100 ms for everything else.
pub fn default_debounce(watched: &WatchedResource) -> Duration {
    if watched.resources == "endpointslices" {
        Duration::ZERO
    } else {
        Duration::from_millis(100)
    }
}

/// The three durations of `spec.leaderElection`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a Lease stays held after its last renewal (`leaseDuration`).
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal (`renewDeadline`).
    pub renew_deadline: Duration,
    /// How often a leader renews and a candidate looks again (`retryPeriod`).
    pub retry_period: Duration,
}

/// `spec.leaderElection` durations that cannot drive an election.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingsError {
    #[error("spec.leaderElection.{field}: {source}")]
    Duration {
        field: &'static str,
        source: DurationError,
    },
    #[error("spec.leaderElection: {}", not_nested(*.lease, *.renew, *.retry))]
    NotNested {
        lease: Duration,
        renew: Duration,
        retry: Duration,
    },
}

fn not_nested(lease: Duration, renew: Duration, retry: Duration) -> String {
    format!(
        "leaseDuration ({lease:?}) must be longer than renewDeadline ({renew:?}), and \
         renewDeadline longer than retryPeriod ({retry:?}), which must not be 0"
    )
}

impl TimingsError {
    /// The error as a validation problem: its field path and what is wrong there.
    pub fn to_problem(&self) -> SpecProblem {
        match self {
            TimingsError::Duration { field, source } => SpecProblem {
                path: format!("spec.leaderElection.{field}"),
                message: source.to_string(),
            },
            TimingsError::NotNested {
                lease,
                renew,
                retry,
            } => SpecProblem {
                path: "spec.leaderElection".into(),
                message: not_nested(*lease, *renew, *retry),
            },
        }
    }
}

impl LeaseTimings {
    /// The timings of `settings`, or the first thing wrong with them.
    pub fn from_settings(settings: &LeaderElectionSettings) -> Result<LeaseTimings, TimingsError> {
        LeaseTimings::check(settings).map_err(|mut errors| errors.swap_remove(0))
    }

    /// The timings of `settings`, or everything wrong with them: each duration must parse,
    /// and `leaseDuration > renewDeadline > retryPeriod > 0`.
    pub fn check(settings: &LeaderElectionSettings) -> Result<LeaseTimings, Vec<TimingsError>> {
        let mut errors = Vec::new();
        let mut parse = |field, text: &str| {
            parse_duration(text)
                .map_err(|source| errors.push(TimingsError::Duration { field, source }))
                .ok()
        };
        let lease = parse("leaseDuration", &settings.lease_duration);
        let renew = parse("renewDeadline", &settings.renew_deadline);
        let retry = parse("retryPeriod", &settings.retry_period);
        let (Some(lease), Some(renew), Some(retry)) = (lease, renew, retry) else {
            return Err(errors);
        };
        if !(lease > renew && renew > retry && !retry.is_zero()) {
            return Err(vec![TimingsError::NotNested {
                lease,
                renew,
                retry,
            }]);
        }
        Ok(LeaseTimings {
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
        })
    }

    /// `leaseDurationSeconds` as written to the Lease: whole seconds, rounded up, at least 1.
    pub fn lease_seconds(&self) -> i32 {
        let seconds =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::config::validate_spec;

    fn spec() -> HAProxyTemplateConfigSpec {
        let mut spec = HAProxyTemplateConfigSpec::default();
        for (name, resources) in [("ingresses", "ingresses"), ("slices", "endpointslices")] {
            spec.watched_resources.insert(
                name.into(),
                WatchedResource {
                    resources: resources.into(),
                    ..WatchedResource::default()
                },
            );
        }
        spec
    }

    #[test]
    fn every_duration_of_a_spec_is_parsed_once_into_the_timings() {
        let mut spec = spec();
        spec.dataplane.deployment_timeout = "1m30s".into();
        spec.dataplane.min_deployment_interval = "500ms".into();
        spec.watched_resources
            .get_mut("ingresses")
            .expect("present")
            .debounce = Some("250ms".into());
        let timings = ConfigTimings::from_spec(&spec).expect("valid");
        assert_eq!(timings.deployment_timeout, Duration::from_secs(90));
        assert_eq!(timings.min_deployment_interval, Duration::from_millis(500));
        assert_eq!(timings.drift_prevention_interval, Duration::from_secs(60));
        assert_eq!(timings.rendering_timeout, Duration::from_secs(30));
        assert_eq!(
            timings.leader_election.lease_duration,
            Duration::from_secs(15)
        );
        assert_eq!(
            timings.debounce("ingresses"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(timings.debounce("slices"), Some(Duration::ZERO));
        assert_eq!(timings.debounce("widgets"), None);
    }

    #[test]
    fn a_spec_that_sets_no_duration_gets_the_documented_defaults() {
        let timings = ConfigTimings::from_spec(&spec()).expect("valid");
        assert_eq!(
            timings.deployment_timeout,
            crate::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT
        );
        assert_eq!(timings.min_deployment_interval, Duration::from_secs(2));
    }

    #[test]
    fn endpoint_slices_trigger_at_once_and_other_kinds_after_100ms() {
        let watched = |resources: &str| WatchedResource {
            resources: resources.into(),
            ..Default::default()
        };
        assert_eq!(default_debounce(&watched("endpointslices")), Duration::ZERO);
        assert_eq!(
            default_debounce(&watched("ingresses")),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn every_bad_duration_is_refused_at_validation_naming_its_field() {
        let mut spec = spec();
        spec.dataplane.deployment_timeout = "soon".into();
        spec.dataplane.drift_prevention_interval = "1 minute".into();
        spec.rendering.timeout = "0".into();
        spec.leader_election.retry_period = "-2s".into();
        spec.watched_resources
            .get_mut("slices")
            .expect("present")
            .debounce = Some("fast".into());
        let problems = ConfigTimings::from_spec(&spec).expect_err("refused");
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.dataplane.driftPreventionInterval",
                "spec.dataplane.deploymentTimeout",
                "spec.watchedResources.slices.debounce",
                "spec.leaderElection.retryPeriod",
                "spec.rendering.timeout",
            ],
            "{problems:#?}"
        );
        assert!(problems[1].message.contains("'soon' is not a duration"));
        assert_eq!(problems[4].message, "must be longer than zero");
        let validated = validate_spec(&spec);
        for problem in &problems {
            assert!(validated.contains(problem), "{problem} in {validated:#?}");
        }
    }

    #[test]
    fn lease_timings_must_nest_with_a_retry_period_above_zero() {
        let mut settings = LeaderElectionSettings::default();
        let nested = LeaseTimings::check(&settings).expect("the defaults nest");
        assert_eq!(LeaseTimings::from_settings(&settings), Ok(nested));
        settings.retry_period = "0".into();
        let errors = LeaseTimings::check(&settings).expect_err("a zero retry period");
        assert!(matches!(errors[..], [TimingsError::NotNested { .. }]));
        assert_eq!(errors[0].to_problem().path, "spec.leaderElection");
        settings.lease_duration = "x".into();
        settings.renew_deadline = "y".into();
        let errors = LeaseTimings::check(&settings).expect_err("two bad durations");
        let paths: Vec<String> = errors.iter().map(|e| e.to_problem().path).collect();
        assert_eq!(
            paths,
            [
                "spec.leaderElection.leaseDuration",
                "spec.leaderElection.renewDeadline"
            ]
        );
    }
}
