//! The semantic validation phase: the real `haproxy -c` run against one render, behind the
//! [`SemanticCheck`] trait so the pipeline runs without the binary in tests.
//!
//! The decisions are here and pure: [`prepare`] lays out a render for the check (checked
//! auxiliary paths, `default-path` pointed at a scratch directory, lines mapped back) and
//! [`output`] turns HAProxy's output into a verdict. `drivers::haproxy_check` runs the
//! process: every check gets a fresh scratch directory holding the auxiliary files at
//! their relative paths, and `haproxy -c -dr -f <scratch>/haproxy.cfg` runs there (`-dr`
//! turns unresolvable server names into warnings, because the controller's resolver is not
//! the pods' resolver). HAProxy's `[ALERT]` lines become [`ConfigProblem`]s with the scratch
//! directory scrubbed out, and `[WARNING]` lines come back in the [`CheckReport`] of a
//! passing check. Exit status 0 and 2 ("no listener", e.g. a backends-only file) pass; any
//! other status fails.
//!
//! Errors come in two kinds, both in [`SemanticCheckError`]: [`SemanticCheckError::Rejected`]
//! means HAProxy (or the path check before it) rejected the configuration; every other
//! variant means the check could not run at all (missing binary, I/O, timeout, killed), and
//! says nothing about the configuration. `From<SemanticCheckError> for ValidationError`
//! folds both into one [`ValidationError`] for callers that treat them alike.

pub mod output;
pub mod prepare;

pub use output::{HaproxyMessage, Severity, parse_haproxy_output};
#[cfg(test)]
mod tests;

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::{ConfigProblem, ValidationError, ValidationPhase};
use crate::pure::haproxy::HaproxyVersion;
use crate::pure::rendered::RenderedConfig;

/// The name of the main configuration file inside the scratch directory, and the `file` of
/// every problem HAProxy reports in it.
pub const CONFIG_FILE_NAME: &str = "haproxy.cfg";

/// What a passing check reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// HAProxy's `[WARNING]` lines, as problems of the semantic phase. They do not make the
    /// configuration invalid.
    pub warnings: Vec<ConfigProblem>,
    /// HAProxy exited with status 2: the configuration is valid but has no listener (for
    /// example a file with only backends).
    pub no_listener: bool,
    /// The report was served from the validation cache without running HAProxy.
    pub from_cache: bool,
    /// How long the `haproxy -c` run took (for a cached report: the original run).
    pub elapsed: Duration,
}

/// Why a semantic check did not pass.
#[derive(Debug, thiserror::Error)]
pub enum SemanticCheckError {
    /// The configuration is invalid: HAProxy rejected it, or an auxiliary file path could
    /// not be laid out safely.
    #[error(transparent)]
    Rejected(#[from] ValidationError),
    /// The HAProxy binary does not exist.
    #[error(
        "haproxy binary '{binary}' not found; install haproxy (apt-get install haproxy) or pass --haproxy-bin"
    )]
    BinaryNotFound { binary: String },
    /// The HAProxy binary exists but could not be started.
    #[error("could not start haproxy binary '{binary}': {source}")]
    Spawn { binary: String, source: io::Error },
    /// Reading, writing or creating a file or directory failed.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// HAProxy ran longer than the configured timeout and was killed.
    #[error("haproxy -c timed out after {}", format_duration(*timeout))]
    TimedOut { timeout: Duration },
    /// HAProxy ended without an exit status (killed by a signal, e.g. out of memory).
    #[error("haproxy -c was killed before it finished ({status}); check memory limits")]
    Killed { status: String },
    /// No configured checker runs the target's HAProxy version: the render is not checked
    /// with another version's `haproxy -c`. `checkers` lists what there is (`3.0 (path)`).
    #[error(
        "the target runs HAProxy {target}, but no haproxy -c checker of that version is configured (checkers: {checkers}); configure one with --haproxy-checker {target}=PATH; the render is not checked with another version"
    )]
    VersionMismatch {
        target: HaproxyVersion,
        checkers: String,
    },
    /// `haproxy -v` printed nothing that looks like a version.
    #[error("could not read the version of haproxy binary '{binary}' from `-v` output: {output:?}")]
    VersionUnreadable { binary: String, output: String },
    /// A background task running the check failed.
    #[error("the haproxy -c task failed: {0}")]
    Task(String),
}

impl From<SemanticCheckError> for ValidationError {
    /// A rejection keeps its problems; a failure to run becomes one problem on
    /// `haproxy.cfg` without a line, whose message is the failure.
    fn from(error: SemanticCheckError) -> Self {
        match error {
            SemanticCheckError::Rejected(rejected) => rejected,
            other => ValidationError::single(
                ValidationPhase::Semantic,
                CONFIG_FILE_NAME,
                None,
                other.to_string(),
            ),
        }
    }
}

/// Formats a timeout the way people write it: `30s`, or `250ms` below whole seconds.
fn format_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// Runs the semantic phase on one render (the real one runs `haproxy -c`; see
/// `drivers::haproxy_check`). Called from the render thread, so it may block.
pub trait SemanticCheck: Send + Sync + std::fmt::Debug {
    /// What a verdict depends on besides the render, such as the HAProxy version: part of
    /// the validation cache's key, so a different checker never answers from the cache.
    fn identity(&self) -> Result<String, SemanticCheckError>;

    /// The HAProxy version of the target this check judges for: the schema phase accepts
    /// what that version added over 2.6. `None` (the default): 2.6.
    fn haproxy_version(&self) -> Option<HaproxyVersion> {
        None
    }

    /// Checks one render.
    fn check_blocking(&self, rendered: &RenderedConfig) -> Result<CheckReport, SemanticCheckError>;
}
