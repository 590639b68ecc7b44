//! The semantic validation phase: the real `haproxy -c` run against one render.
//!
//! Every check gets a fresh scratch directory. The auxiliary files are written at their
//! relative paths inside it, the `global` section's `default-path` is pointed at it (or a
//! `default-path origin` line is inserted after `global`), and `haproxy -c -dr -f
//! <scratch>/haproxy.cfg` runs there. `-dr` turns unresolvable server names into warnings,
//! because the controller's resolver is not the pods' resolver. HAProxy's `[ALERT]` lines
//! become [`ConfigProblem`]s with the scratch directory scrubbed out of file names and
//! messages, and line numbers mapped back to the rendered text; `[WARNING]` lines come back
//! in the [`CheckReport`] of a passing check. Exit status 0 and 2 ("no listener", e.g. a
//! backends-only file) pass; any other status fails.
//!
//! Errors come in two kinds, both in [`SemanticCheckError`]: [`SemanticCheckError::Rejected`]
//! means HAProxy (or the path check before it) rejected the configuration; every other
//! variant means the check could not run at all (missing binary, I/O, timeout, killed), and
//! says nothing about the configuration. `From<SemanticCheckError> for ValidationError`
//! folds both into one [`ValidationError`] for callers that treat them alike.
//!
//! HAProxy opens the files named by a dynamic `use_backend %[...]` rule after it has parsed
//! the file, relative to its working directory rather than to `default-path` (measured on
//! 2.6.12). By default the check therefore runs in a separate empty working directory, so
//! such a rule fails here as it would in a pod whose HAProxy does not start from its
//! configuration directory; [`CheckerSettings::run_in_config_dir`] turns that off.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, LazyLock, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use regex::Regex;
use tokio::sync::Semaphore;

use super::cache::{CacheKey, ValidationCache};
use super::{ConfigProblem, ValidationError, ValidationPhase};
use crate::pure::rendered::RenderedConfig;

/// The name of the main configuration file inside the scratch directory, and the `file` of
/// every problem HAProxy reports in it.
pub const CONFIG_FILE_NAME: &str = "haproxy.cfg";

/// The binary used when none is configured (looked up in `PATH`).
pub const DEFAULT_BINARY: &str = "haproxy";

/// The environment variable naming the haproxy the test suite and the benches run.
pub const TEST_BINARY_ENV: &str = "HAPTOR_HAPROXY_BIN";

/// The haproxy the test suite and the benches run, found one way for all of them: the path
/// in `HAPTOR_HAPROXY_BIN`, else the Debian package's `/usr/sbin/haproxy` (a normal user's
/// `PATH` does not name `/usr/sbin`), else [`DEFAULT_BINARY`] looked up in `PATH`. The
/// controller itself runs the binary it is configured with (`--haproxy-bin`).
pub fn haproxy_binary() -> PathBuf {
    if let Some(configured) = std::env::var_os(TEST_BINARY_ENV) {
        return PathBuf::from(configured);
    }
    let installed = Path::new("/usr/sbin/haproxy");
    if installed.exists() {
        installed.to_path_buf()
    } else {
        PathBuf::from(DEFAULT_BINARY)
    }
}

/// How long one `haproxy -c` run may take before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest pause between two polls of a running `haproxy -c`.
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How many trailing stderr lines stand in for the error when HAProxy failed without an
/// `[ALERT]` line.
const FALLBACK_STDERR_LINES: usize = 5;

/// How the checker runs `haproxy -c`.
#[derive(Debug, Clone)]
pub struct CheckerSettings {
    /// The HAProxy binary: a name looked up in `PATH`, or a path.
    pub binary: PathBuf,
    /// How many `haproxy -c` runs may be in flight at once, across [`HaproxyChecker::check`]
    /// and [`HaproxyChecker::check_blocking`] and every clone of the checker. Each run holds
    /// its own parsed configuration in memory (hundreds of MB for very large configs).
    pub max_concurrent: usize,
    /// How long one run may take before it is killed.
    pub timeout: Duration,
    /// Extra environment variables for the HAProxy process (the configuration may expand
    /// `"${NAME}"`), on top of the controller's own environment.
    pub env: Vec<(String, String)>,
    /// Run HAProxy with the scratch configuration directory as its working directory.
    /// When false (the default) it runs in a separate empty directory, so paths HAProxy
    /// resolves against its working directory instead of `default-path` fail here too.
    pub run_in_config_dir: bool,
    /// When set, successful checks are remembered and an identical render (same HAProxy
    /// version, same text, same auxiliary files) is not checked again.
    pub cache: Option<Arc<ValidationCache>>,
}

impl Default for CheckerSettings {
    fn default() -> Self {
        CheckerSettings {
            binary: PathBuf::from(DEFAULT_BINARY),
            max_concurrent: thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            timeout: DEFAULT_TIMEOUT,
            env: Vec::new(),
            run_in_config_dir: false,
            cache: None,
        }
    }
}

/// What a passing check reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// HAProxy's `[WARNING]` lines, as problems of the semantic phase. They do not make the
    /// configuration invalid.
    pub warnings: Vec<ConfigProblem>,
    /// HAProxy exited with status 2: the configuration is valid but has no listener (for
    /// example a file with only backends).
    pub no_listener: bool,
    /// The report was served from the [`ValidationCache`] without running HAProxy.
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
    /// `haproxy -v` printed nothing that looks like a version.
    #[error("could not read the version of haproxy binary '{binary}' from `-v` output: {output:?}")]
    VersionUnreadable { binary: String, output: String },
    /// A background task running the check failed.
    #[error("the haproxy -c task failed: {0}")]
    Task(String),
}

impl SemanticCheckError {
    /// True when the configuration itself was rejected, false when the check could not run.
    pub fn is_rejection(&self) -> bool {
        matches!(self, SemanticCheckError::Rejected(_))
    }
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

/// Runs `haproxy -c` on renders with bounded concurrency. Cheap to clone; clones share the
/// concurrency limit, the cached version and the cache.
#[derive(Debug, Clone)]
pub struct HaproxyChecker {
    inner: Arc<CheckerInner>,
}

#[derive(Debug)]
struct CheckerInner {
    settings: CheckerSettings,
    permits: Arc<Semaphore>,
    version: OnceLock<String>,
}

impl Default for HaproxyChecker {
    fn default() -> Self {
        HaproxyChecker::new(CheckerSettings::default())
    }
}

/// The outcome of looking a render up in the cache.
enum Lookup {
    Hit(CheckReport),
    Miss(Option<CacheKey>),
}

impl HaproxyChecker {
    pub fn new(settings: CheckerSettings) -> Self {
        let permits = settings.max_concurrent.clamp(1, Semaphore::MAX_PERMITS);
        HaproxyChecker {
            inner: Arc::new(CheckerInner {
                permits: Arc::new(Semaphore::new(permits)),
                settings,
                version: OnceLock::new(),
            }),
        }
    }

    pub fn settings(&self) -> &CheckerSettings {
        &self.inner.settings
    }

    /// The HAProxy version (`2.6.12-1+deb12u4`), read once with `haproxy -v` and then
    /// remembered. A failure is not remembered.
    pub fn version(&self) -> Result<String, SemanticCheckError> {
        if let Some(version) = self.inner.version.get() {
            return Ok(version.clone());
        }
        let version =
            haproxy_version_with_timeout(&self.inner.settings.binary, self.inner.settings.timeout)?;
        Ok(self.inner.version.get_or_init(|| version).clone())
    }

    /// Checks a render, blocking the calling thread (also while waiting for a free slot).
    /// Do not call it on an async runtime's worker thread; use [`HaproxyChecker::check`].
    pub fn check_blocking(
        &self,
        rendered: &RenderedConfig,
    ) -> Result<CheckReport, SemanticCheckError> {
        let key = match self.lookup(rendered)? {
            Lookup::Hit(report) => return Ok(report),
            Lookup::Miss(key) => key,
        };
        let _permit = futures::executor::block_on(self.inner.permits.acquire())
            .map_err(|closed| SemanticCheckError::Task(closed.to_string()))?;
        let report = self.run(rendered)?;
        self.remember(key, &report);
        Ok(report)
    }

    /// Checks a render without blocking the async runtime: the scratch directory and the
    /// HAProxy process are handled on the blocking thread pool, and waiting for a free slot
    /// is asynchronous. A cache hit takes no slot.
    pub async fn check(
        &self,
        rendered: &RenderedConfig,
    ) -> Result<CheckReport, SemanticCheckError> {
        let rendered = Arc::new(rendered.clone());
        let key = if self.inner.settings.cache.is_some() {
            let checker = self.clone();
            let for_lookup = Arc::clone(&rendered);
            let lookup = tokio::task::spawn_blocking(move || checker.lookup(&for_lookup))
                .await
                .map_err(|failed| SemanticCheckError::Task(failed.to_string()))??;
            match lookup {
                Lookup::Hit(report) => return Ok(report),
                Lookup::Miss(key) => key,
            }
        } else {
            None
        };
        let permit = Arc::clone(&self.inner.permits)
            .acquire_owned()
            .await
            .map_err(|closed| SemanticCheckError::Task(closed.to_string()))?;
        let checker = self.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let report = checker.run(&rendered)?;
            checker.remember(key, &report);
            Ok(report)
        })
        .await
        .map_err(|failed| SemanticCheckError::Task(failed.to_string()))?
    }

    /// Looks the render up in the cache, when there is one. The key covers the HAProxy
    /// version and the working-directory mode, both of which can change the verdict.
    fn lookup(&self, rendered: &RenderedConfig) -> Result<Lookup, SemanticCheckError> {
        let Some(cache) = &self.inner.settings.cache else {
            return Ok(Lookup::Miss(None));
        };
        let identity = format!(
            "{}\0run_in_config_dir={}",
            self.version()?,
            self.inner.settings.run_in_config_dir
        );
        let key = ValidationCache::key(&identity, rendered);
        Ok(match cache.get(&key) {
            Some(report) => Lookup::Hit(report),
            None => Lookup::Miss(Some(key)),
        })
    }

    fn remember(&self, key: Option<CacheKey>, report: &CheckReport) {
        if let (Some(cache), Some(key)) = (&self.inner.settings.cache, key) {
            cache.insert_success(key, report);
        }
    }

    /// One full check: lay out the scratch directory, run HAProxy, read its verdict.
    fn run(&self, rendered: &RenderedConfig) -> Result<CheckReport, SemanticCheckError> {
        let settings = &self.inner.settings;
        let aux_paths = checked_aux_paths(rendered)?;

        let scratch = scratch_dir("haptor-check-")?;
        let scratch_path = scratch.path();
        for (relative, content) in &aux_paths {
            let target = scratch_path.join(relative);
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent).map_err(|source| SemanticCheckError::Io {
                    action: "create directory",
                    path: parent.to_path_buf(),
                    source,
                })?;
            }
            fs::write(&target, content).map_err(|source| SemanticCheckError::Io {
                action: "write auxiliary file",
                path: target.clone(),
                source,
            })?;
        }

        let scratch_text = scratch_path
            .to_str()
            .ok_or_else(|| SemanticCheckError::Io {
                action: "use scratch directory",
                path: scratch_path.to_path_buf(),
                source: io::Error::new(io::ErrorKind::InvalidData, "the path is not valid UTF-8"),
            })?;
        let prepared = PreparedConfig::new(&rendered.haproxy_cfg, &quote_config_word(scratch_text));
        let config_path = scratch_path.join(CONFIG_FILE_NAME);
        fs::write(&config_path, &prepared.text).map_err(|source| SemanticCheckError::Io {
            action: "write",
            path: config_path.clone(),
            source,
        })?;

        let empty_cwd = if settings.run_in_config_dir {
            None
        } else {
            Some(scratch_dir("haptor-cwd-")?)
        };
        let cwd = empty_cwd.as_ref().map_or(scratch_path, |dir| dir.path());

        let binary = absolute_binary(&settings.binary);
        let mut command = Command::new(&binary);
        command
            .arg("-c")
            .arg("-dr")
            .arg("-f")
            .arg(&config_path)
            .current_dir(cwd)
            .envs(settings.env.iter().map(|(name, value)| (name, value)));
        let output = run_with_timeout(command, &settings.binary, settings.timeout)?;
        tracing::debug!(
            status = %output.status,
            elapsed_ms = output.elapsed.as_millis() as u64,
            "haproxy -c finished"
        );

        let mut scrubber = Scrubber::default();
        scrubber.add(scratch_path);
        scrubber.add(cwd);
        let context = Interpretation {
            prepared: &prepared,
            scrubber: &scrubber,
            aux_paths: aux_paths.iter().map(|(path, _)| path.as_str()).collect(),
            hint_working_dir: !settings.run_in_config_dir,
        };
        context.verdict(&output)
    }
}

/// Reads the HAProxy version from `<binary> -v` (first line, e.g. `HAProxy version
/// 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/` gives `2.6.12-1+deb12u4`).
pub fn haproxy_version(binary: impl AsRef<Path>) -> Result<String, SemanticCheckError> {
    haproxy_version_with_timeout(binary.as_ref(), DEFAULT_TIMEOUT)
}

fn haproxy_version_with_timeout(
    binary: &Path,
    timeout: Duration,
) -> Result<String, SemanticCheckError> {
    let mut command = Command::new(absolute_binary(binary));
    command.arg("-v");
    let output = run_with_timeout(command, binary, timeout)?;
    let text = if output.stdout.trim().is_empty() {
        &output.stderr
    } else {
        &output.stdout
    };
    parse_version(text).ok_or_else(|| SemanticCheckError::VersionUnreadable {
        binary: binary.display().to_string(),
        output: text.lines().next().unwrap_or_default().to_string(),
    })
}

/// The word after `version` on the first line that has one.
fn parse_version(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        words
            .by_ref()
            .find(|word| word.eq_ignore_ascii_case("version"))?;
        words.next().map(str::to_string)
    })
}

/// A relative binary path with a directory part (`./bin/haproxy`) is made absolute against
/// the controller's working directory, because the child runs in another directory.
fn absolute_binary(binary: &Path) -> PathBuf {
    if binary.is_relative()
        && binary.components().count() > 1
        && let Ok(cwd) = std::env::current_dir()
    {
        return cwd.join(binary);
    }
    binary.to_path_buf()
}

fn scratch_dir(prefix: &str) -> Result<tempfile::TempDir, SemanticCheckError> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|source| SemanticCheckError::Io {
            action: "create a scratch directory in",
            path: std::env::temp_dir(),
            source,
        })
}

/// Checks that every auxiliary file can be written inside the scratch directory: a
/// non-empty relative path without `..`, not `haproxy.cfg`, not shared with another file.
/// Returns the normalized paths with their contents, or every problem found.
fn checked_aux_paths(rendered: &RenderedConfig) -> Result<Vec<(String, &str)>, ValidationError> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut accepted = Vec::new();
    for file in rendered.aux_files.values() {
        let raw = file.path.as_str();
        let problem = |message: String| ConfigProblem {
            phase: ValidationPhase::Semantic,
            file: raw.to_string(),
            line: None,
            message,
        };
        match normalize_aux_path(raw) {
            Err(message) => problems.push(problem(message)),
            Ok(normalized) if normalized == CONFIG_FILE_NAME => problems.push(problem(format!(
                "{} '{raw}' would overwrite the main configuration file; rename it",
                file.kind
            ))),
            Ok(normalized) if !seen.insert(normalized.clone()) => problems.push(problem(format!(
                "two auxiliary files are written to '{normalized}'; give them distinct names"
            ))),
            Ok(normalized) => accepted.push((normalized, file.content.as_str())),
        }
    }
    if problems.is_empty() {
        Ok(accepted)
    } else {
        Err(ValidationError {
            phase: ValidationPhase::Semantic,
            problems,
        })
    }
}

/// `maps/./hosts.map` → `maps/hosts.map`; an error message for anything that could leave
/// the base directory or is not a file path.
fn normalize_aux_path(raw: &str) -> Result<String, String> {
    if raw.trim().is_empty() {
        return Err("an auxiliary file has an empty path".to_string());
    }
    if raw.contains('\0') {
        return Err(format!(
            "auxiliary file path {raw:?} contains a NUL character"
        ));
    }
    if raw.ends_with('/') {
        return Err(format!(
            "auxiliary file path '{raw}' names a directory, not a file"
        ));
    }
    let mut parts = Vec::new();
    for component in Path::new(raw).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!(
                    "auxiliary file path '{raw}' contains '..' and could escape the configuration directory; use a path relative to it without '..'"
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "auxiliary file path '{raw}' is absolute; auxiliary files must use paths relative to the configuration directory (`default-path origin`)"
                ));
            }
        }
    }
    if parts.is_empty() {
        return Err(format!("auxiliary file path '{raw}' does not name a file"));
    }
    Ok(parts.join("/"))
}

/// Section keywords: a line starting with one of them opens a new section.
const SECTION_KEYWORDS: &[&str] = &[
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "peers",
    "resolvers",
    "userlist",
    "mailers",
    "program",
    "http-errors",
    "ring",
    "cache",
    "fcgi-app",
    "log-forward",
    "dynamic-update",
    "crt-store",
    "traces",
    "acme",
];

/// The configuration text as written to the scratch directory, and how to map HAProxy's
/// line numbers back to the rendered text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PreparedConfig {
    text: String,
    /// How many rendered lines come before the inserted ones.
    inserted_after: usize,
    /// How many lines were inserted (0 when a `default-path` line was rewritten in place).
    inserted: usize,
}

impl PreparedConfig {
    /// Rewrites every `default-path` line of a `global` section in place to
    /// `default-path origin <base>`. Without one, inserts that line right after the first
    /// `global` line, or prepends a `global` section holding it when there is none.
    fn new(rendered: &str, base: &str) -> Self {
        let directive = format!("default-path origin {base}");
        let mut text = String::with_capacity(rendered.len() + directive.len() + 16);
        let mut section = "";
        let mut first_global: Option<usize> = None;
        let mut rewritten = false;
        let lines: Vec<&str> = rendered.split_inclusive('\n').collect();
        for (index, line) in lines.iter().enumerate() {
            let first_word = line.split_whitespace().next().unwrap_or_default();
            if let Some(keyword) = SECTION_KEYWORDS
                .iter()
                .find(|keyword| **keyword == first_word)
            {
                section = keyword;
                if *keyword == "global" && first_global.is_none() {
                    first_global = Some(index);
                }
            }
            if section == "global" && first_word == "default-path" {
                let indent = &line[..line.len() - line.trim_start().len()];
                let ending = &line[line.trim_end_matches(['\r', '\n']).len()..];
                text.push_str(indent);
                text.push_str(&directive);
                text.push_str(ending);
                rewritten = true;
            } else {
                text.push_str(line);
            }
        }
        if rewritten {
            return PreparedConfig {
                text,
                inserted_after: lines.len(),
                inserted: 0,
            };
        }
        match first_global {
            Some(global) => {
                let mut text = String::with_capacity(rendered.len() + directive.len() + 8);
                for (index, line) in lines.iter().enumerate() {
                    text.push_str(line);
                    if index == global {
                        if !line.ends_with('\n') {
                            text.push('\n');
                        }
                        text.push_str("    ");
                        text.push_str(&directive);
                        text.push('\n');
                    }
                }
                PreparedConfig {
                    text,
                    inserted_after: global + 1,
                    inserted: 1,
                }
            }
            None => PreparedConfig {
                text: format!("global\n    {directive}\n{rendered}"),
                inserted_after: 0,
                inserted: 2,
            },
        }
    }

    /// The rendered line for a line HAProxy reported. A line haptor inserted maps to the
    /// `global` line it follows, or to none when haptor added the whole `global` section.
    fn original_line(&self, reported: usize) -> Option<usize> {
        if reported == 0 {
            None
        } else if reported <= self.inserted_after {
            Some(reported)
        } else if reported <= self.inserted_after + self.inserted {
            (self.inserted_after > 0).then_some(self.inserted_after)
        } else {
            Some(reported - self.inserted)
        }
    }
}

/// Writes a word so HAProxy's config tokenizer reads it back unchanged.
fn quote_config_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=@,:".contains(c));
    if plain {
        word.to_string()
    } else if !word.contains('\'') {
        format!("'{word}'")
    } else {
        let mut quoted = String::from("\"");
        for c in word.chars() {
            if matches!(c, '"' | '\\' | '$') {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        quoted
    }
}

/// What a finished child process left behind.
struct RunOutput {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Runs a command, collecting its output, and kills it when it outlives `timeout`.
fn run_with_timeout(
    mut command: Command,
    binary: &Path,
    timeout: Duration,
) -> Result<RunOutput, SemanticCheckError> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = command.spawn().map_err(|source| {
        let binary = binary.display().to_string();
        if source.kind() == io::ErrorKind::NotFound {
            SemanticCheckError::BinaryNotFound { binary }
        } else {
            SemanticCheckError::Spawn { binary, source }
        }
    })?;
    let stdout = collect(child.stdout.take());
    let stderr = collect(child.stderr.take());
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SemanticCheckError::Io {
                    action: "wait for",
                    path: binary.to_path_buf(),
                    source,
                });
            }
        }
        let elapsed = started.elapsed();
        if elapsed >= timeout {
            // The pipes close when the child dies, so the readers finish; their output is
            // not needed.
            let _ = child.kill();
            let _ = child.wait();
            tracing::warn!(
                timeout_ms = timeout.as_millis() as u64,
                "haproxy -c timed out and was killed"
            );
            return Err(SemanticCheckError::TimedOut { timeout });
        }
        thread::sleep(pause.min(timeout - elapsed));
        pause = (pause * 2).min(MAX_POLL_INTERVAL);
    };
    let elapsed = started.elapsed();
    Ok(RunOutput {
        status,
        stdout: stdout.finish(),
        stderr: stderr.finish(),
        elapsed,
    })
}

/// A pipe being drained on its own thread, so a chatty child never blocks on a full pipe.
struct Collector(Option<thread::JoinHandle<Vec<u8>>>);

fn collect(pipe: Option<impl Read + Send + 'static>) -> Collector {
    Collector(pipe.and_then(|mut pipe| {
        thread::Builder::new()
            .name("haproxy-c-output".to_string())
            .spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                bytes
            })
            .ok()
    }))
}

impl Collector {
    fn finish(self) -> String {
        let bytes = self
            .0
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Removes scratch directory paths from file names and messages.
#[derive(Debug, Default)]
struct Scrubber {
    /// Longest first, so a path is never half-removed by a shorter prefix of it.
    prefixes: Vec<String>,
}

impl Scrubber {
    /// Adds a directory under both its given and its canonical spelling.
    fn add(&mut self, dir: &Path) {
        let canonical = dir.canonicalize().ok();
        for path in std::iter::once(dir.to_path_buf()).chain(canonical) {
            let text = path.to_string_lossy().trim_end_matches('/').to_string();
            if !text.is_empty() && !self.prefixes.contains(&text) {
                self.prefixes.push(text);
            }
        }
        self.prefixes
            .sort_by_key(|prefix| std::cmp::Reverse(prefix.len()));
    }

    /// `<scratch>/maps/x.map` → `maps/x.map`; a bare `<scratch>` → `.`.
    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_string();
        for prefix in &self.prefixes {
            text = text
                .replace(&format!("{prefix}/"), "")
                .replace(prefix.as_str(), ".");
        }
        text
    }
}

/// The severity HAProxy prints in brackets at the start of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Alert,
    Warning,
    Notice,
    /// Any other tag (`DIAG`, `DEBUG`, ...).
    Other,
}

/// One message from `haproxy -c` output, continuation lines (`   | ...`) included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaproxyMessage {
    pub severity: Severity,
    /// The `[file:line]` the message points at, as HAProxy printed it.
    pub location: Option<(String, usize)>,
    pub text: String,
}

/// `[ALERT]    (1234) : <rest>`, also with the older `[ALERT] 123/456789 (1234) : <rest>`.
static MESSAGE_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    // A literal pattern: it compiles, which the unit tests exercise.
    Regex::new(r"^\[([A-Z]+)\]\s*(?:\S+\s+)?\(\d+\)\s*:\s?(.*)$").expect("literal regex compiles")
});

/// `parsing [file:12] : msg`, `Parsing [file:12]: msg` and `[file:12] : msg`.
static LOCATION: LazyLock<Regex> = LazyLock::new(|| {
    // A literal pattern: it compiles, which the unit tests exercise.
    Regex::new(r"^(?i:parsing)?\s*\[([^\]]+):(\d+)\]\s*:?\s*(.*)$").expect("literal regex compiles")
});

/// Splits `haproxy -c` output into messages. Lines that are neither a message header nor a
/// continuation are ignored.
pub fn parse_haproxy_output(output: &str) -> Vec<HaproxyMessage> {
    let mut messages: Vec<HaproxyMessage> = Vec::new();
    for line in output.lines() {
        let line = line.trim_end();
        if let Some(header) = MESSAGE_HEADER.captures(line) {
            let severity = match &header[1] {
                "ALERT" => Severity::Alert,
                "WARNING" => Severity::Warning,
                "NOTICE" => Severity::Notice,
                _ => Severity::Other,
            };
            let rest = header[2].trim();
            let rest = rest
                .strip_prefix("config :")
                .map(str::trim_start)
                .unwrap_or(rest);
            let (location, text) = match LOCATION.captures(rest) {
                Some(found) => match found[2].parse::<usize>() {
                    Ok(line) => (Some((found[1].to_string(), line)), found[3].to_string()),
                    Err(_) => (None, rest.to_string()),
                },
                None => (None, rest.to_string()),
            };
            messages.push(HaproxyMessage {
                severity,
                location,
                text,
            });
        } else if let (Some(continued), Some(last)) =
            (line.trim_start().strip_prefix('|'), messages.last_mut())
        {
            let continued = continued.trim();
            if !continued.is_empty() {
                last.text.push(' ');
                last.text.push_str(continued);
            }
        }
    }
    messages
}

/// Alerts that only summarize other alerts.
fn is_summary(text: &str) -> bool {
    [
        "Fatal errors found in configuration",
        "Error(s) found in configuration file",
        "Failed to initialize server(s) addr",
    ]
    .iter()
    .any(|summary| text.starts_with(summary))
}

/// Turns one run's output into a verdict.
struct Interpretation<'a> {
    prepared: &'a PreparedConfig,
    scrubber: &'a Scrubber,
    aux_paths: Vec<&'a str>,
    hint_working_dir: bool,
}

impl Interpretation<'_> {
    fn verdict(&self, output: &RunOutput) -> Result<CheckReport, SemanticCheckError> {
        let mut messages = parse_haproxy_output(&output.stderr);
        messages.extend(parse_haproxy_output(&output.stdout));
        let mut alerts = Vec::new();
        let mut warnings = Vec::new();
        for message in &messages {
            match message.severity {
                Severity::Alert => alerts.push((is_summary(&message.text), self.problem(message))),
                Severity::Warning => warnings.push(self.problem(message)),
                Severity::Notice | Severity::Other => {}
            }
        }
        let report = |no_listener| CheckReport {
            warnings: warnings.clone(),
            no_listener,
            from_cache: false,
            elapsed: output.elapsed,
        };
        match output.status.code() {
            Some(0) => Ok(report(false)),
            Some(2) => Ok(report(true)),
            Some(code) => {
                let specific = alerts.iter().any(|(summary, _)| !summary);
                let mut problems: Vec<ConfigProblem> = alerts
                    .into_iter()
                    .filter(|(summary, _)| !specific || !summary)
                    .map(|(_, problem)| problem)
                    .collect();
                if problems.is_empty() {
                    problems.push(self.fallback(code, &output.stderr));
                }
                Err(SemanticCheckError::Rejected(ValidationError {
                    phase: ValidationPhase::Semantic,
                    problems,
                }))
            }
            None => Err(SemanticCheckError::Killed {
                status: output.status.to_string(),
            }),
        }
    }

    fn problem(&self, message: &HaproxyMessage) -> ConfigProblem {
        let (file, line) = match &message.location {
            Some((path, line)) => {
                let file = self.scrubber.scrub(path);
                if file == CONFIG_FILE_NAME {
                    (file, self.prepared.original_line(*line))
                } else {
                    (file, Some(*line))
                }
            }
            None => (CONFIG_FILE_NAME.to_string(), None),
        };
        let mut text = self.scrubber.scrub(&message.text);
        if self.hint_working_dir
            && text.contains("failed to open")
            && let Some(path) = self
                .aux_paths
                .iter()
                .find(|path| text.contains(&format!("<{path}>")))
        {
            text.push_str(&format!(
                " ('{path}' is part of this render, but HAProxy opens files named in a dynamic `use_backend %[...]` rule after parsing, relative to its working directory instead of `default-path`; look it up into a variable with `http-request set-var(...)` and use `use_backend %[var(...)]`)"
            ));
        }
        ConfigProblem {
            phase: ValidationPhase::Semantic,
            file,
            line,
            message: text,
        }
    }

    /// A problem built from the last stderr lines, for a failure without any `[ALERT]`.
    fn fallback(&self, code: i32, stderr: &str) -> ConfigProblem {
        let tail: Vec<&str> = stderr
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with("[NOTICE]"))
            .collect();
        let tail = &tail[tail.len().saturating_sub(FALLBACK_STDERR_LINES)..];
        let message = if tail.is_empty() {
            format!("haproxy -c exited with status {code} without printing an error")
        } else {
            format!(
                "haproxy -c exited with status {code}: {}",
                self.scrubber.scrub(&tail.join(" / "))
            )
        };
        ConfigProblem {
            phase: ValidationPhase::Semantic,
            file: CONFIG_FILE_NAME.to_string(),
            line: None,
            message,
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Alert => "ALERT",
            Severity::Warning => "WARNING",
            Severity::Notice => "NOTICE",
            Severity::Other => "other",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from HAProxy 2.6.12 (`haproxy -c -dr -f /tmp/hcap/t6.cfg`) with two broken
    /// frontend lines.
    const TWO_PARSE_ERRORS: &str = "\
[NOTICE]   (8698) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (8698) : path to executable is /usr/sbin/haproxy
[ALERT]    (8698) : config : parsing [/tmp/hcap/t6.cfg:10] : error detected while parsing switching rule : missing closing '}' in condition.
[ALERT]    (8698) : config : parsing [/tmp/hcap/t6.cfg:11] : error detected in frontend 'fe' while parsing 'http-request set-header' rule : failed to parse sample expression <unknownfetch]> : unknown fetch method 'unknownfetch'.
[ALERT]    (8698) : config : Error(s) found in configuration file : /tmp/hcap/t6.cfg
";

    /// Captured from HAProxy 2.6.12: a bad regex in a map, plus multi-line warnings.
    const CAPITAL_PARSING_AND_CONTINUATIONS: &str = "\
[NOTICE]   (8659) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (8659) : path to executable is /usr/sbin/haproxy
[ALERT]    (8659) : config : Parsing [/tmp/hcap/t3.cfg:7]: failed to parse use_backend rule '%[req.hdr(host),lower,map_reg(maps/bad.map,be1)]' : failed to parse sample expression <req.hdr(host),lower,map_reg(maps/bad.map,be1)]> : invalid args in converter 'map_reg' : regex 'foo(' is invalid (error=missing closing parenthesis, erroffset=4) at line 1 of file 'maps/bad.map'.
[WARNING]  (8659) : config : missing timeouts for frontend 'fe'.
   | While not properly invalid, you will certainly encounter various problems
   | with such a configuration. To fix this, please ensure that all following
   | timeouts are set to a non-zero value: 'client', 'connect', 'server'.
[WARNING]  (8659) : config : log format ignored for frontend 'fe' since it has no log address.
[ALERT]    (8659) : config : Fatal errors found in configuration.
";

    /// Captured from HAProxy 2.6.12: a backends-only file with an unresolvable server (-dr).
    const LOCATED_WARNING: &str = "\
[NOTICE]   (8537) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (8537) : path to executable is /usr/sbin/haproxy
[WARNING]  (8537) : config : [beonly.cfg:10] : 'server be1/s2' : could not resolve address 'nonexistent.invalid', disabling server.
";

    /// Captured from HAProxy 2.6.12: a post-parse error without a location.
    const UNLOCATED_ALERT: &str = "\
[NOTICE]   (8695) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (8695) : path to executable is /usr/sbin/haproxy
[ALERT]    (8695) : config : Proxy 'fe': unable to find required default_backend: 'nope'.
[ALERT]    (8695) : config : Fatal errors found in configuration.
";

    fn alerts(output: &str) -> Vec<HaproxyMessage> {
        parse_haproxy_output(output)
            .into_iter()
            .filter(|m| m.severity == Severity::Alert)
            .collect()
    }

    fn exit_status(code: i32) -> ExitStatus {
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            ExitStatus::from_raw(code << 8)
        }
    }

    fn interpret(
        stderr: &str,
        code: i32,
        scratch: &str,
        prepared: &PreparedConfig,
    ) -> Result<CheckReport, SemanticCheckError> {
        let scrubber = Scrubber {
            prefixes: vec![scratch.to_string()],
        };
        let context = Interpretation {
            prepared,
            scrubber: &scrubber,
            aux_paths: vec!["maps/bad.map"],
            hint_working_dir: false,
        };
        context.verdict(&RunOutput {
            status: exit_status(code),
            stdout: String::new(),
            stderr: stderr.to_string(),
            elapsed: Duration::ZERO,
        })
    }

    fn unchanged() -> PreparedConfig {
        PreparedConfig {
            text: String::new(),
            inserted_after: usize::MAX / 2,
            inserted: 0,
        }
    }

    #[test]
    fn a_parsing_alert_yields_its_file_line_and_message() {
        let found = alerts(TWO_PARSE_ERRORS);
        assert_eq!(
            found[0].location,
            Some(("/tmp/hcap/t6.cfg".to_string(), 10))
        );
        assert_eq!(
            found[0].text,
            "error detected while parsing switching rule : missing closing '}' in condition."
        );
        assert_eq!(
            found[1].location,
            Some(("/tmp/hcap/t6.cfg".to_string(), 11))
        );
        assert!(found[1].text.starts_with("error detected in frontend 'fe'"));
    }

    #[test]
    fn notices_are_recognized_but_are_not_alerts() {
        let all = parse_haproxy_output(TWO_PARSE_ERRORS);
        assert_eq!(
            all.iter()
                .filter(|m| m.severity == Severity::Notice)
                .count(),
            2
        );
        assert_eq!(alerts(TWO_PARSE_ERRORS).len(), 3);
    }

    #[test]
    fn the_capitalized_parsing_form_without_a_space_is_located() {
        let found = alerts(CAPITAL_PARSING_AND_CONTINUATIONS);
        assert_eq!(found[0].location, Some(("/tmp/hcap/t3.cfg".to_string(), 7)));
        assert!(
            found[0]
                .text
                .starts_with("failed to parse use_backend rule")
        );
    }

    #[test]
    fn continuation_lines_join_the_warning_they_follow() {
        let warnings: Vec<_> = parse_haproxy_output(CAPITAL_PARSING_AND_CONTINUATIONS)
            .into_iter()
            .filter(|m| m.severity == Severity::Warning)
            .collect();
        assert_eq!(warnings.len(), 2);
        assert!(
            warnings[0]
                .text
                .starts_with("missing timeouts for frontend 'fe'. While not properly invalid")
        );
        assert!(warnings[0].text.ends_with("'client', 'connect', 'server'."));
        assert!(!warnings[0].text.contains('|'));
        assert_eq!(
            warnings[1].text,
            "log format ignored for frontend 'fe' since it has no log address."
        );
    }

    #[test]
    fn a_warning_with_a_bare_bracket_location_is_located() {
        let all = parse_haproxy_output(LOCATED_WARNING);
        let warning = all
            .iter()
            .find(|m| m.severity == Severity::Warning)
            .expect("one warning");
        assert_eq!(warning.location, Some(("beonly.cfg".to_string(), 10)));
        assert!(
            warning
                .text
                .starts_with("'server be1/s2' : could not resolve")
        );
    }

    #[test]
    fn the_older_header_with_a_date_is_understood() {
        let found = parse_haproxy_output(
            "[ALERT] 123/456789 (42) : parsing [/x/haproxy.cfg:3] : unknown keyword 'x'.",
        );
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].location, Some(("/x/haproxy.cfg".to_string(), 3)));
    }

    #[test]
    fn summary_alerts_are_dropped_when_a_specific_alert_exists() {
        let prepared = unchanged();
        let scratch = "/tmp/hcap";
        let error = interpret(
            &TWO_PARSE_ERRORS.replace("t6.cfg", CONFIG_FILE_NAME),
            1,
            scratch,
            &prepared,
        )
        .expect_err("exit 1 fails");
        let SemanticCheckError::Rejected(rejected) = error else {
            panic!("a rejection")
        };
        assert_eq!(rejected.problems.len(), 2);
        assert!(rejected.problems.iter().all(|p| !is_summary(&p.message)));
        assert_eq!(rejected.problems[0].file, CONFIG_FILE_NAME);
        assert_eq!(rejected.problems[0].line, Some(10));
    }

    #[test]
    fn an_unlocated_alert_is_kept_on_the_main_file_without_a_line() {
        let error =
            interpret(UNLOCATED_ALERT, 1, "/tmp/hcap", &unchanged()).expect_err("exit 1 fails");
        let SemanticCheckError::Rejected(rejected) = error else {
            panic!("a rejection")
        };
        assert_eq!(rejected.problems.len(), 1);
        assert_eq!(rejected.problems[0].file, CONFIG_FILE_NAME);
        assert_eq!(rejected.problems[0].line, None);
        assert!(rejected.problems[0].message.contains("default_backend"));
    }

    #[test]
    fn a_lone_summary_alert_is_kept() {
        let output = "[ALERT]    (1) : config : Fatal errors found in configuration.\n";
        let error = interpret(output, 1, "/tmp/hcap", &unchanged()).expect_err("exit 1 fails");
        let SemanticCheckError::Rejected(rejected) = error else {
            panic!("a rejection")
        };
        assert_eq!(rejected.problems.len(), 1);
        assert!(is_summary(&rejected.problems[0].message));
    }

    #[test]
    fn the_scratch_directory_is_scrubbed_from_files_and_messages() {
        let output = "[ALERT]    (8662) : config : parsing [/tmp/hcap/haproxy.cfg:8] : error detected while parsing ACL 'a' : failed to open pattern file </tmp/hcap/maps/nothere.lst>.\n\
[ALERT]    (8662) : config : Error(s) found in configuration file : /tmp/hcap/haproxy.cfg\n";
        let error = interpret(output, 1, "/tmp/hcap", &unchanged()).expect_err("exit 1 fails");
        let SemanticCheckError::Rejected(rejected) = error else {
            panic!("a rejection")
        };
        assert_eq!(rejected.problems.len(), 1);
        assert_eq!(rejected.problems[0].file, CONFIG_FILE_NAME);
        assert!(rejected.problems[0].message.contains("<maps/nothere.lst>"));
        assert!(!rejected.problems[0].message.contains("/tmp/hcap"));
    }

    #[test]
    fn warnings_of_a_passing_run_come_back_in_the_report() {
        let report = interpret(
            &LOCATED_WARNING.replace("beonly.cfg", "/s/haproxy.cfg"),
            2,
            "/s",
            &unchanged(),
        )
        .expect("exit 2 passes");
        assert!(report.no_listener);
        assert_eq!(report.warnings.len(), 1);
        assert_eq!(report.warnings[0].line, Some(10));
        assert_eq!(report.warnings[0].file, CONFIG_FILE_NAME);
    }

    #[test]
    fn a_failure_without_alerts_falls_back_to_the_last_stderr_lines() {
        let error = interpret(
            "[NOTICE] (1) : hello\nsomething odd happened\n",
            3,
            "/s",
            &unchanged(),
        )
        .expect_err("fails");
        let SemanticCheckError::Rejected(rejected) = error else {
            panic!("a rejection")
        };
        assert!(
            rejected.problems[0]
                .message
                .contains("something odd happened")
        );
        assert!(rejected.problems[0].message.contains("status 3"));
        assert!(!rejected.problems[0].message.contains("hello"));
    }

    #[test]
    fn an_existing_default_path_is_rewritten_in_place() {
        let rendered = "global\n    maxconn 10\n    default-path origin /etc/haproxy\ndefaults\n";
        let prepared = PreparedConfig::new(rendered, "/scratch");
        assert_eq!(
            prepared.text,
            "global\n    maxconn 10\n    default-path origin /scratch\ndefaults\n"
        );
        assert_eq!(prepared.original_line(4), Some(4));
    }

    #[test]
    fn a_default_path_outside_global_is_left_alone() {
        let rendered = "global\n    maxconn 10\nfrontend f\n    default-path origin /etc/haproxy\n";
        let prepared = PreparedConfig::new(rendered, "/scratch");
        assert!(
            prepared
                .text
                .contains("frontend f\n    default-path origin /etc/haproxy\n")
        );
        assert!(
            prepared
                .text
                .starts_with("global\n    default-path origin /scratch\n")
        );
    }

    #[test]
    fn an_inserted_default_path_does_not_shift_reported_lines() {
        let rendered = "# header\nglobal\n    maxconn 10\ndefaults\n    mode http";
        let prepared = PreparedConfig::new(rendered, "/scratch");
        let lines: Vec<&str> = prepared.text.lines().collect();
        assert_eq!(lines[2], "    default-path origin /scratch");
        let original: Vec<&str> = rendered.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let reported = index + 1;
            match prepared.original_line(reported) {
                Some(back) if *line != "    default-path origin /scratch" => {
                    assert_eq!(original[back - 1], *line)
                }
                Some(back) => assert_eq!(original[back - 1], "global"),
                None => panic!("line {reported} maps back"),
            }
        }
    }

    #[test]
    fn a_global_on_the_last_line_gets_its_directive_on_a_new_line() {
        let prepared = PreparedConfig::new("global", "/s");
        assert_eq!(prepared.text, "global\n    default-path origin /s\n");
    }

    #[test]
    fn a_config_without_global_gets_one_and_lines_still_map_back() {
        let rendered = "defaults\n    mode http\n";
        let prepared = PreparedConfig::new(rendered, "/s");
        assert!(
            prepared
                .text
                .starts_with("global\n    default-path origin /s\ndefaults\n")
        );
        assert_eq!(prepared.original_line(1), None);
        assert_eq!(prepared.original_line(2), None);
        assert_eq!(prepared.original_line(4), Some(2));
    }

    #[test]
    fn crlf_line_endings_survive_the_rewrite() {
        let prepared = PreparedConfig::new("global\r\n  default-path config\r\n", "/s");
        assert_eq!(prepared.text, "global\r\n  default-path origin /s\r\n");
    }

    #[test]
    fn words_with_spaces_or_quotes_are_quoted_for_haproxy() {
        assert_eq!(
            quote_config_word("/tmp/haptor-check-Ab1"),
            "/tmp/haptor-check-Ab1"
        );
        assert_eq!(quote_config_word("/tmp/with space"), "'/tmp/with space'");
        assert_eq!(
            quote_config_word("/tmp/it's \"$x\""),
            "\"/tmp/it's \\\"\\$x\\\"\""
        );
    }

    #[test]
    fn the_version_is_the_word_after_version() {
        let first =
            "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/\nStatus: long-term";
        assert_eq!(parse_version(first).as_deref(), Some("2.6.12-1+deb12u4"));
        assert_eq!(
            parse_version("HA-Proxy version 1.8.19 2019/02/11").as_deref(),
            Some("1.8.19")
        );
        assert_eq!(parse_version("no such thing"), None);
    }

    #[test]
    fn aux_paths_are_normalized_and_escapes_refused() {
        assert_eq!(
            normalize_aux_path("maps/./hosts.map").as_deref(),
            Ok("maps/hosts.map")
        );
        assert!(
            normalize_aux_path("../x")
                .expect_err("refused")
                .contains("..")
        );
        assert!(
            normalize_aux_path("maps/../../x")
                .expect_err("refused")
                .contains("..")
        );
        assert!(
            normalize_aux_path("/etc/passwd")
                .expect_err("refused")
                .contains("absolute")
        );
        assert!(normalize_aux_path("maps/").is_err());
        assert!(normalize_aux_path("").is_err());
        assert!(normalize_aux_path(".").is_err());
    }

    #[test]
    fn a_timeout_message_names_the_duration() {
        let whole = SemanticCheckError::TimedOut {
            timeout: Duration::from_secs(30),
        };
        assert_eq!(whole.to_string(), "haproxy -c timed out after 30s");
        let part = SemanticCheckError::TimedOut {
            timeout: Duration::from_millis(250),
        };
        assert_eq!(part.to_string(), "haproxy -c timed out after 250ms");
    }

    #[test]
    fn a_run_failure_folds_into_one_semantic_problem() {
        let folded: ValidationError = SemanticCheckError::BinaryNotFound {
            binary: "hx".into(),
        }
        .into();
        assert_eq!(folded.phase, ValidationPhase::Semantic);
        assert_eq!(folded.problems.len(), 1);
        assert!(folded.problems[0].message.contains("'hx' not found"));
    }
}
