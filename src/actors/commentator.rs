//! The Commentator: records every observability event in the shared
//! [`EventLog`] (which `/debug/events` serves) and logs, through `tracing`, what
//! [`comment_on`] says about it given the events before it. Both the log and the commentary
//! are plain code in `crate::observability`; this actor only feeds them.
//!
//! Events reach the actor through an [`EventPump`] from the fan-out's bounded queue, started
//! in `pre_start` from a [`SharedEventReceiver`], so a restarted Commentator picks up the same
//! queue where its predecessor left it. `/debug/events` reads the shared [`EventLog`]
//! directly rather than asking the actor: the log is handed to the actor in its arguments, so
//! it survives restarts and stays readable while the actor is busy.
//! [`CommentatorMsg::Recent`] answers the same snapshot over RPC.

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::actors::event_pump::{EventPump, SharedEventReceiver, spawn_event_pump};
use crate::messages::events::ObservedEvent;
use crate::observability::commentary::{Comment, CommentLevel, comment_on};
use crate::observability::event_log::EventLog;

fn log_comment(event: &ObservedEvent, comment: &Comment) {
    let kind = event.kind.name();
    let correlation = event.correlation;
    match comment.level {
        CommentLevel::Debug => tracing::debug!(event = kind, correlation, "{}", comment.text),
        CommentLevel::Info => tracing::info!(event = kind, correlation, "{}", comment.text),
        CommentLevel::Warn => tracing::warn!(event = kind, correlation, "{}", comment.text),
    }
}

/// Messages the Commentator accepts.
#[derive(Debug)]
pub enum CommentatorMsg {
    /// An event to record and comment on.
    Event(ObservedEvent),
    /// The ring buffer's contents, oldest first.
    Recent(RpcReplyPort<Vec<ObservedEvent>>),
}

/// Start arguments of the Commentator. Cloned for every (re)start: the log and the queue are
/// shared, so a restart loses neither.
#[derive(Debug, Clone, Default)]
pub struct CommentatorArgs {
    pub log: EventLog,
    /// The fan-out queue to pump from; `None` when events are sent to the actor directly.
    pub events: Option<SharedEventReceiver>,
    /// Where the actor marks itself busy for `/healthz` (`None`: nobody watches).
    pub busy: Option<crate::observability::introspection::Introspection>,
}

/// The Commentator actor (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Commentator;

pub struct CommentatorState {
    log: EventLog,
    busy: Option<crate::observability::introspection::Introspection>,
    _pump: Option<EventPump>,
}

impl Actor for Commentator {
    type Msg = CommentatorMsg;
    type State = CommentatorState;
    type Arguments = CommentatorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: CommentatorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let pump = args
            .events
            .map(|events| spawn_event_pump(events, myself, CommentatorMsg::Event));
        Ok(CommentatorState {
            log: args.log,
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
        let _busy = state.busy.as_ref().map(|i| i.busy("commentator"));
        match msg {
            CommentatorMsg::Event(event) => {
                let logged = event.clone();
                let comment = state.log.relate_and_push(event, comment_on);
                log_comment(&logged, &comment);
            }
            CommentatorMsg::Recent(reply) => {
                let _ = reply.send(state.log.snapshot());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::messages::events::test_events::at;
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;
    use crate::messages::events::EventKind;

    #[tokio::test]
    async fn the_commentator_records_pumped_events_and_answers_recent() {
        let (tx, rx) = mpsc::channel(8);
        let log = EventLog::new(4);
        let args = CommentatorArgs {
            log: log.clone(),
            events: Some(SharedEventReceiver::new(rx)),
            busy: None,
        };
        let (actor, handle) = Actor::spawn(None, Commentator, args)
            .await
            .expect("commentator starts");
        for i in 0..6u64 {
            tx.send(at(Some(i), i, EventKind::AllIndexesSynced))
                .await
                .expect("queue open");
        }
        let mut recent = Vec::new();
        for _ in 0..100 {
            recent = ractor::call!(actor, CommentatorMsg::Recent).expect("commentator answers");
            if recent.last().and_then(|e| e.correlation) == Some(5) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let correlations: Vec<_> = recent.iter().map(|e| e.correlation).collect();
        assert_eq!(correlations, vec![Some(2), Some(3), Some(4), Some(5)]);
        assert_eq!(log.len(), 4);
        actor.stop(None);
        handle.await.expect("commentator stops");
    }

    #[tokio::test]
    async fn a_restarted_commentator_takes_over_the_same_queue() {
        let (tx, rx) = mpsc::channel(8);
        let log = EventLog::new(10);
        let args = CommentatorArgs {
            log: log.clone(),
            events: Some(SharedEventReceiver::new(rx)),
            busy: None,
        };
        let (first, handle) = Actor::spawn(None, Commentator, args.clone())
            .await
            .expect("commentator starts");
        first.stop(None);
        handle.await.expect("commentator stops");
        let (second, handle) = Actor::spawn(None, Commentator, args)
            .await
            .expect("commentator restarts");
        tx.send(at(Some(42), 0, EventKind::AllIndexesSynced))
            .await
            .expect("queue open");
        for _ in 0..100 {
            if !log.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(log.snapshot().first().and_then(|e| e.correlation), Some(42));
        second.stop(None);
        handle.await.expect("commentator stops");
    }
}
