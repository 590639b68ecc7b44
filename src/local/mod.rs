//! `haptor local`: the whole controller on one machine. A folder of manifests stands in for
//! the Kubernetes API ([`folder`], scanned when [`watch`] says: on inotify's changes and on a
//! timer), a haproxy started and owned by haptor is the one instance, and the actor tree is
//! the same as in a cluster.

pub mod folder;
pub mod run;
pub mod watch;
