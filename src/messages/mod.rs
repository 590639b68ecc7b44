//! The typed messages haptor's actors exchange. There is no event bus: each actor has one
//! message enum, requests that need an answer carry a ractor `RpcReplyPort`, and business
//! messages are sent to a known `ActorRef` and never dropped. Observability events
//! ([`events::ObservedEvent`]) are the one exception: they fan out to the Commentator and
//! Metrics through a lossy, counted channel ([`events::EventFanout`]).

pub mod events;
