//! Logging set-up: tracing-subscriber with text or JSON output on standard error and a level
//! filter that can be changed while the process runs (a config's `logging.level`).

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

use crate::cli::LogFormat;

static LEVEL_HANDLE: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
/// The level the process started with (`--log-level`, else `LOG_LEVEL`, else `info`).
static STARTUP_LEVEL: OnceLock<String> = OnceLock::new();

/// The level a config's `logging.level` asks for: the level itself, or when it is unset
/// or empty the level the process started with (`--log-level` / `LOG_LEVEL`, then `info`).
pub fn effective_log_level(configured: Option<&str>) -> String {
    match configured.map(str::trim).filter(|l| !l.is_empty()) {
        Some(level) => level.to_string(),
        None => STARTUP_LEVEL
            .get()
            .cloned()
            .unwrap_or_else(|| "info".to_string()),
    }
}

/// Installs the global subscriber. `level` is an EnvFilter directive (`info`,
/// `haptor=debug,kube=warn`); an invalid one falls back to `info` with a warning.
pub fn init_logging(format: LogFormat, level: &str) {
    let (filter, bad_level) = match EnvFilter::try_new(level) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let _ = STARTUP_LEVEL.set(if bad_level.is_none() {
        level.to_string()
    } else {
        "info".to_string()
    });
    let (filter, handle) = reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .try_init(),
    };
    if result.is_ok() {
        let _ = LEVEL_HANDLE.set(handle);
    }
    if let Some(e) = bad_level {
        tracing::warn!(level, error = %e, "invalid log level; using info");
    }
}

/// Changes the log level of the running process. Returns an error message for a level that
/// does not parse; the old level stays in force then.
pub fn set_log_level(level: &str) -> Result<(), String> {
    let filter = EnvFilter::try_new(level.to_ascii_lowercase())
        .map_err(|e| format!("invalid log level '{level}': {e}"))?;
    match LEVEL_HANDLE.get() {
        Some(handle) => handle
            .reload(filter)
            .map_err(|e| format!("could not change the log level: {e}")),
        None => Err("logging is not initialised".to_string()),
    }
}
