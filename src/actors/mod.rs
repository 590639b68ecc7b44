//! The actors of haptor's tree: thin adapters that hold the state of one concern, call into
//! `crate::pure` to do the work, and exchange the typed messages of `crate::messages`.
//! [`introspection`] is the shared, read-mostly record the debug endpoints serve.

pub mod commentator;
pub mod context;
pub mod controller;
pub mod coordinator;
pub mod deployer;
pub mod drift;
pub mod edge;
pub mod event_pump;
pub mod http;
pub mod http_resources;
pub mod leadership;
pub mod metrics;
pub mod publisher;
pub mod reconciler;
pub mod render_thread;
pub mod scheduler;
pub mod tree;
pub mod validators;
pub mod watcher;
