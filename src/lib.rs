//! haptor: a Kubernetes ingress controller for HAProxy, built as a tree of supervised ractor
//! actors around a pure render-and-validate core (`pure`). `messages` holds the typed
//! messages actors exchange, `actors` the thin actor adapters, `supervision` the supervisors,
//! `observability` the metrics, event log and commentary made of observability events, `cli`
//! the command line, `local` and `run` the two ways of running the controller, `telemetry` the logging set-up and `output` the command line's writing
//! to standard output.

pub mod actors;
pub mod cli;
pub mod drivers;
pub mod local;
pub mod messages;
pub mod observability;
pub mod output;
pub mod pure;
pub mod run;
pub mod seams;
pub mod supervision;
pub mod telemetry;
