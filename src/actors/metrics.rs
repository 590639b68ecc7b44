//! The Metrics actor: takes observability events from its fan-out queue (through an
//! [`EventPump`], so a slow actor makes the bounded queue drop and count, never its mailbox
//! grow) and hands each to [`Metrics::observe`]. The registry and what each event counts live
//! in [`crate::observability::metrics`]; this actor only pumps.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::event_pump::{EventPump, SharedEventReceiver, spawn_event_pump};
use crate::messages::events::ObservedEvent;
use crate::observability::metrics::Metrics;

/// Messages the Metrics actor accepts.
#[derive(Debug)]
pub enum MetricsMsg {
    Event(ObservedEvent),
}

/// Start arguments of the Metrics actor, cloned for every (re)start.
#[derive(Debug, Clone)]
pub struct MetricsArgs {
    pub metrics: Arc<Metrics>,
    /// The fan-out queue to pump from; `None` when events are sent to the actor directly.
    pub events: Option<SharedEventReceiver>,
    /// Where the actor marks itself busy for `/healthz` (`None`: nobody watches).
    pub busy: Option<crate::observability::introspection::Introspection>,
}

/// Updates [`Metrics`] from observability events.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsActor;

pub struct MetricsState {
    metrics: Arc<Metrics>,
    busy: Option<crate::observability::introspection::Introspection>,
    _pump: Option<EventPump>,
}

impl Actor for MetricsActor {
    type Msg = MetricsMsg;
    type State = MetricsState;
    type Arguments = MetricsArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: MetricsArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let pump = args
            .events
            .map(|events| spawn_event_pump(events, myself, MetricsMsg::Event));
        Ok(MetricsState {
            metrics: args.metrics,
            busy: args.busy,
            _pump: pump,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = state.busy.as_ref().map(|i| i.busy("metrics"));
        match msg {
            MetricsMsg::Event(event) => state.metrics.observe(&event),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::messages::events::{EventFanout, EventKind};
    use crate::pure::validate::ValidationPhase;

    /// The value of the sample line that starts with `series` (name plus labels).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .and_then(|v| v.trim().parse().ok())
    }

    #[tokio::test]
    async fn the_metrics_actor_counts_pumped_events() {
        let (fanout, mut receivers) = EventFanout::new(&["metrics"], 16);
        let metrics = Arc::new(Metrics::new().expect("metrics build"));
        let events = receivers.pop().map(SharedEventReceiver::new);
        let args = MetricsArgs {
            metrics: Arc::clone(&metrics),
            events,
            busy: None,
        };
        let (actor, handle) = Actor::spawn(None, MetricsActor, args)
            .await
            .expect("metrics actor starts");
        fanout.publish(
            Some(1),
            EventKind::ValidationFailed {
                phase: ValidationPhase::Syntax,
                error: "x".into(),
            },
        );
        let mut errors = None;
        for _ in 0..100 {
            let text = metrics.encode_text().expect("metrics encode");
            errors = sample(&text, "haptor_validation_errors_total{phase=\"syntax\"}");
            if errors == Some(1.0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(errors, Some(1.0));
        actor.stop(None);
        handle.await.expect("metrics actor stops");
    }
}
