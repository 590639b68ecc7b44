//! haptor: a Kubernetes ingress controller for HAProxy, built as a tree of supervised ractor
//! actors around a pure render-and-validate core (`pure`). `messages` holds the typed
//! messages actors exchange, `actors` the thin actor adapters, `supervision` the supervisors,
//! `cli` the command line and `telemetry` the logging set-up.

pub mod actors;
pub mod cli;
pub mod local;
pub mod messages;
pub mod pure;
pub mod supervision;
pub mod telemetry;
