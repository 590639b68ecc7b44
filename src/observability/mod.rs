//! Observability as plain code: what the controller makes of its observability events
//! (`crate::messages::events`). [`metrics`] is the Prometheus registry `/metrics` serves and
//! what each event counts; [`event_log`] the bounded log of recent events `/debug/events`
//! serves; [`commentary`] the sentence a person reads in the logs about each event;
//! [`introspection`] the shared record behind `/debug/vars/*` and `/healthz` that actors and
//! drivers update as they work. Nothing here is an actor: the Metrics actor and the
//! Commentator (`crate::actors`) only pump events into these, and tests drive them directly.

pub mod commentary;
pub mod event_log;
pub mod introspection;
pub mod metrics;
