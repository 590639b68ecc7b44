//! Logging set-up: tracing-subscriber with text or JSON output on standard error and a level
//! filter that can be changed while the process runs (a config's `logging.level`).
//!
//! [`init_logging`] installs the subscriber and returns the [`LogLevelHandle`] that changes
//! its level; `main` passes the handle down (command line → `haptor local` → the actors'
//! `Services`), so there is no global to reach for. The handle remembers the level the
//! process started with, which an empty `logging.level` falls back to. kube-rs logs every
//! failed request on its own (its watcher's 403 warnings, its client's `client error
//! (Connect)`), without the address; haptor tells each failure itself (the API server's URL,
//! the cause, a refusal only once it lasts, since a restarted API server refuses for a
//! moment), so those lines are left out ([`without_watcher_refusals`]). This module imports
//! nothing of haptor.

use std::sync::Arc;

use tracing_subscriber::filter::{FilterFn, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::{SubscriberInitExt, TryInitError};
use tracing_subscriber::{EnvFilter, Registry, reload};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Why the log level could not be changed; the old level stays in force.
#[derive(Debug, thiserror::Error)]
pub enum LogLevelError {
    #[error("invalid log level '{level}': {source}")]
    Invalid {
        level: String,
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("could not change the log level: {0}")]
    Reload(#[from] reload::Error),
}

/// Changes the level of the installed subscriber while the process runs. Cheap to clone.
#[derive(Clone)]
pub struct LogLevelHandle {
    reload: reload::Handle<EnvFilter, Registry>,
    /// The level the process started with (`--log-level`, else `LOG_LEVEL`, else `info`).
    startup: Arc<str>,
}

impl std::fmt::Debug for LogLevelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogLevelHandle")
            .field("startup", &self.startup)
            .finish_non_exhaustive()
    }
}

impl LogLevelHandle {
    /// The level the process started with.
    pub fn startup_level(&self) -> &str {
        &self.startup
    }

    /// The level a config's `logging.level` asks for: the level itself, or when it is unset
    /// or empty the level the process started with (`--log-level` / `LOG_LEVEL`, then `info`).
    pub fn effective_level(&self, configured: Option<&str>) -> String {
        effective_log_level(configured, &self.startup)
    }

    /// Changes the log level of the running process. A level that does not parse is an
    /// error, and the old level stays in force then.
    pub fn set_level(&self, level: &str) -> Result<(), LogLevelError> {
        let filter = EnvFilter::try_new(level.to_ascii_lowercase()).map_err(|source| {
            LogLevelError::Invalid {
                level: level.to_string(),
                source,
            }
        })?;
        Ok(self.reload.reload(filter)?)
    }
}

/// The level a config's `logging.level` asks for, `startup` when it is unset or empty.
fn effective_log_level(configured: Option<&str>, startup: &str) -> String {
    match configured.map(str::trim).filter(|l| !l.is_empty()) {
        Some(level) => level.to_string(),
        None => startup.to_string(),
    }
}

/// The reloadable level filter for `level` (an invalid one falls back to `info`, reported as
/// the error), and its handle.
fn level_filter(
    level: &str,
) -> (
    reload::Layer<EnvFilter, Registry>,
    LogLevelHandle,
    Option<tracing_subscriber::filter::ParseError>,
) {
    let (filter, startup, bad_level) = match EnvFilter::try_new(level) {
        Ok(filter) => (filter, level, None),
        Err(e) => (EnvFilter::new("info"), "info", Some(e)),
    };
    let (layer, reload) = reload::Layer::new(filter);
    let handle = LogLevelHandle {
        reload,
        startup: Arc::from(startup),
    };
    (layer, handle, bad_level)
}

/// What kube-rs logs on its own about every failed request, by target and level, without
/// the API server's address: its watcher's warnings (all about 403s: `watch list error with
/// 403: …`, at every retry), its client's errors (`failed with error client error
/// (Connect)`, `failed with status 503`) and warnings (`eof in poll` when a watch's
/// connection ends, which the watcher resumes; a response that does not parse, which the
/// request then fails with).
const KUBE_REQUEST_FAILURES: [(&str, tracing::Level); 3] = [
    ("kube_runtime::watcher", tracing::Level::WARN),
    ("kube_client::client::builder", tracing::Level::ERROR),
    ("kube_client::client", tracing::Level::WARN),
];

/// Leaves out kube-rs's own lines about failed requests ([`KUBE_REQUEST_FAILURES`]):
/// haptor's Kubernetes drivers tell each failure themselves, with the API server's URL, the
/// real cause and what to do (the RBAC rule of a 403, and only once it lasts).
fn without_watcher_refusals() -> FilterFn {
    filter_fn(|metadata| {
        !KUBE_REQUEST_FAILURES
            .iter()
            .any(|(target, level)| metadata.target() == *target && metadata.level() == level)
    })
}

/// Installs the global subscriber and returns the handle that changes its level. `level` is
/// an EnvFilter directive (`info`, `haptor=debug,kube=warn`); an invalid one falls back to
/// `info` with a warning. Fails only when a global subscriber is installed already.
pub fn init_logging(format: LogFormat, level: &str) -> Result<LogLevelHandle, TryInitError> {
    let (filter, handle, bad_level) = level_filter(level);
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(without_watcher_refusals());
    match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    // Colour codes only for a terminal, never into a log file or pipe.
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .try_init(),
    }?;
    if let Some(e) = bad_level {
        tracing::warn!(level, error = %e, "invalid log level; using info");
    }
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_or_empty_configured_level_falls_back_to_the_startup_level() {
        assert_eq!(effective_log_level(None, "warn"), "warn");
        assert_eq!(effective_log_level(Some(""), "warn"), "warn");
        assert_eq!(effective_log_level(Some("  "), "warn"), "warn");
        assert_eq!(effective_log_level(Some(" debug "), "warn"), "debug");
    }

    #[test]
    fn an_invalid_startup_level_starts_at_info() {
        let (_, handle, bad_level) = level_filter("haptor=loud");
        assert!(bad_level.is_some());
        assert_eq!(handle.startup_level(), "info");
        assert_eq!(handle.effective_level(None), "info");
        let (_, handle, bad_level) = level_filter("haptor=debug,kube=warn");
        assert!(bad_level.is_none());
        assert_eq!(handle.effective_level(Some("")), "haptor=debug,kube=warn");
    }

    #[test]
    fn the_handle_changes_the_level_of_its_subscriber_and_keeps_it_on_an_invalid_one() {
        let (layer, handle, _) = level_filter("info");
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            assert!(!tracing::enabled!(tracing::Level::DEBUG));
            handle.set_level("DEBUG").expect("debug is a level");
            assert!(tracing::enabled!(tracing::Level::DEBUG));
            let error = handle.set_level("haptor=loud").expect_err("not a level");
            assert!(
                error
                    .to_string()
                    .starts_with("invalid log level 'haptor=loud'"),
                "{error}"
            );
            assert!(tracing::enabled!(tracing::Level::DEBUG));
            handle.set_level("warn").expect("warn is a level");
            assert!(!tracing::enabled!(tracing::Level::INFO));
        });
    }

    #[test]
    fn kube_rs_lines_about_failed_requests_are_left_out_and_its_other_lines_kept() {
        let subscriber = tracing_subscriber::registry().with(without_watcher_refusals());
        tracing::subscriber::with_default(subscriber, || {
            assert!(!tracing::enabled!(
                target: "kube_runtime::watcher",
                tracing::Level::WARN
            ));
            assert!(!tracing::enabled!(
                target: "kube_client::client::builder",
                tracing::Level::ERROR
            ));
            assert!(!tracing::enabled!(
                target: "kube_client::client",
                tracing::Level::WARN
            ));
            assert!(tracing::enabled!(
                target: "kube_runtime::watcher",
                tracing::Level::ERROR
            ));
            assert!(tracing::enabled!(target: "haptor", tracing::Level::WARN));
        });
    }

    #[test]
    fn a_handle_whose_subscriber_is_gone_reports_it() {
        let (layer, handle, _) = level_filter("info");
        drop(layer);
        assert!(matches!(
            handle.set_level("debug"),
            Err(LogLevelError::Reload(_))
        ));
    }
}
