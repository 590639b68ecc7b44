//! The `haproxy -c` runner of the validation pipeline ([`HaproxyChecker`], the real
//! [`SemanticCheck`]): a fresh scratch directory per check holding the auxiliary files at
//! their relative paths, the prepared configuration beside them, `haproxy -c -dr -f` run
//! with a timeout (killed and reaped when it outlives it) and bounded concurrency, and the
//! verdict read by `pure::validate::semantic::output`. Successful checks can be remembered
//! in the validation cache, keyed on the HAProxy version.
//!
//! HAProxy opens the files named by a dynamic `use_backend %[...]` rule after it has parsed
//! the file, relative to its working directory rather than to `default-path`. By default
//! the check therefore runs in a separate empty working directory, so such a rule fails here
//! as it would in a pod whose HAProxy does not start from its configuration directory;
//! [`CheckerSettings::run_in_config_dir`] turns that off.
//!
//! `haproxy -c` must be of the target's HAProxy version (major.minor): a
//! [`VersionedChecker`] holds the checkers configured per version (`--haproxy-checker
//! 3.0=/usr/local/bin/haproxy-3.0`, repeatable; by default the one `haproxy` binary, for its
//! own version), checks with the one of the target's version after confirming it with
//! `haproxy -v`, and fails with [`SemanticCheckError::VersionMismatch`] when there is none:
//! a render is never checked with another version's binary. Its version is also the one
//! the schema phase judges for.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::pure::haproxy::HaproxyVersion;
use crate::pure::pipeline::Validator;
use crate::pure::rendered::RenderedConfig;
use crate::pure::validate::cache::{CacheKey, ValidationCache};
use crate::pure::validate::semantic::output::{Interpretation, RunOutput, Scrubber, parse_version};
use crate::pure::validate::semantic::prepare::{
    PreparedConfig, checked_aux_paths, quote_config_word,
};
use crate::pure::validate::semantic::{
    CONFIG_FILE_NAME, CheckReport, SemanticCheck, SemanticCheckError,
};

/// The binary used when none is configured (looked up in `PATH`).
pub const DEFAULT_BINARY: &str = "haproxy";

/// The environment variable naming the haproxy the test suite and the benches run.
pub const TEST_BINARY_ENV: &str = "HAPTOR_HAPROXY_BIN";

/// The haproxy haptor runs when `--haproxy-bin` and `HAPROXY_BIN` name none: `haproxy` when
/// `PATH` has it, else the Debian package's `/usr/sbin/haproxy` when it exists (a normal
/// user's `PATH` does not name `/usr/sbin`), else `haproxy`, which then fails with a message
/// saying how to install it.
pub fn installed_haproxy() -> String {
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.join(DEFAULT_BINARY).is_file())
    });
    let packaged = Path::new("/usr/sbin/haproxy");
    if !on_path && packaged.is_file() {
        packaged.display().to_string()
    } else {
        DEFAULT_BINARY.to_string()
    }
}

/// The haproxy the test suite and the benches run: the path in `HAPTOR_HAPROXY_BIN`, else
/// the one haptor itself would run ([`installed_haproxy`]).
pub fn haproxy_binary() -> PathBuf {
    match std::env::var_os(TEST_BINARY_ENV) {
        Some(configured) => PathBuf::from(configured),
        None => PathBuf::from(installed_haproxy()),
    }
}

/// How long one `haproxy -c` run may take before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest pause between two polls of a running `haproxy -c`.
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(20);

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
    /// Run HAProxy with none of the controller's environment (only a fixed `PATH` and
    /// [`Self::env`]): the admission webhook checks renders that hold users' objects, and
    /// nothing of the controller's (tokens, credentials) may be within their reach.
    pub clean_env: bool,
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
            clean_env: false,
        }
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
        if settings.clean_env {
            command.env_clear().env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            );
        }
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
        for dir in [scratch_path, cwd] {
            // Both spellings: HAProxy may print the canonical path.
            let canonical = dir.canonicalize().ok();
            for path in std::iter::once(dir.to_path_buf()).chain(canonical) {
                scrubber.add(&path.to_string_lossy());
            }
        }
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
        exit_code: status.code(),
        status: status.to_string(),
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

impl SemanticCheck for HaproxyChecker {
    fn identity(&self) -> Result<String, SemanticCheckError> {
        self.version()
    }

    /// The checker's own version: a lone checker judges for the version it is.
    fn haproxy_version(&self) -> Option<HaproxyVersion> {
        self.version().ok().and_then(|v| HaproxyVersion::parse(&v))
    }

    fn check_blocking(&self, rendered: &RenderedConfig) -> Result<CheckReport, SemanticCheckError> {
        HaproxyChecker::check_blocking(self, rendered)
    }
}

/// A validation pipeline whose semantic phase runs `binary -c`, with a validation cache of
/// `cache_entries` renders.
pub fn validator(binary: impl Into<PathBuf>, cache_entries: usize) -> Validator {
    let settings = CheckerSettings {
        binary: binary.into(),
        ..CheckerSettings::default()
    };
    Validator::new(Arc::new(HaproxyChecker::new(settings)), cache_entries)
}

/// The whole version `binary` reports (`haproxy -v`: `2.6.12-1+deb12u4`), or why it
/// reports none.
pub fn reported_version(binary: &Path) -> Result<String, SemanticCheckError> {
    haproxy_version_with_timeout(binary, DEFAULT_TIMEOUT)
}

/// The major.minor version of `binary` (`haproxy -v`), or `None` when it does not run or
/// prints no version.
pub fn binary_version(binary: &Path) -> Option<HaproxyVersion> {
    haproxy_version_with_timeout(binary, DEFAULT_TIMEOUT)
        .ok()
        .and_then(|version| HaproxyVersion::parse(&version))
}

/// The target's HAProxy version where nothing reports one: `explicit` (`--haproxy-version`),
/// else the version of `binary` (the `haproxy` found), else [`HaproxyVersion::DEFAULT`].
pub fn target_version(explicit: Option<HaproxyVersion>, binary: &Path) -> HaproxyVersion {
    explicit
        .or_else(|| binary_version(binary))
        .unwrap_or_default()
}

/// Reads a `--haproxy-checker` value, `VERSION=PATH` (`3.0=/usr/local/bin/haproxy-3.0`).
pub fn parse_checker(text: &str) -> Result<(HaproxyVersion, PathBuf), String> {
    let (version, path) = text.split_once('=').ok_or_else(|| {
        format!("'{text}' is not VERSION=PATH (e.g. 3.0=/usr/local/bin/haproxy-3.0)")
    })?;
    let version = version.trim().parse::<HaproxyVersion>()?;
    if path.trim().is_empty() {
        return Err(format!("'{text}' names no haproxy binary after '='"));
    }
    Ok((version, PathBuf::from(path.trim())))
}

/// The `haproxy -c` checkers per HAProxy version and the target's version: checks run with
/// the checker of the target's major.minor, confirmed by its `haproxy -v`, and fail with
/// [`SemanticCheckError::VersionMismatch`] when no checker has it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct VersionedChecker {
    target: HaproxyVersion,
    /// Each with the version it was configured for (`None`: whatever it reports).
    checkers: Vec<(Option<HaproxyVersion>, HaproxyChecker)>,
}

impl VersionedChecker {
    /// Checkers for `target`: the `configured` ones (version, binary), or when there are
    /// none `default_binary` for its own version; each runs with `settings` but its binary.
    pub fn new(
        target: HaproxyVersion,
        configured: &[(HaproxyVersion, PathBuf)],
        default_binary: &Path,
        settings: CheckerSettings,
    ) -> VersionedChecker {
        let with_binary = |binary: &Path| {
            HaproxyChecker::new(CheckerSettings {
                binary: binary.to_path_buf(),
                ..settings.clone()
            })
        };
        let checkers = if configured.is_empty() {
            vec![(None, with_binary(default_binary))]
        } else {
            configured
                .iter()
                .map(|(version, binary)| (Some(*version), with_binary(binary)))
                .collect()
        };
        VersionedChecker { target, checkers }
    }

    /// The HAProxy version of the target.
    pub fn target(&self) -> HaproxyVersion {
        self.target
    }

    /// The checker of the target's version: configured for it (when configured with a
    /// version) and reporting it in `haproxy -v`.
    pub fn chosen(&self) -> Result<&HaproxyChecker, SemanticCheckError> {
        let mut seen = Vec::new();
        for (configured, checker) in &self.checkers {
            let binary = checker.settings().binary.display().to_string();
            if let Some(other) = configured.filter(|version| *version != self.target) {
                seen.push(format!("{other} ({binary})"));
                continue;
            }
            let reported = checker.version()?;
            match HaproxyVersion::parse(&reported) {
                Some(version) if version == self.target => return Ok(checker),
                _ => seen.push(match configured {
                    Some(configured) => {
                        format!("{configured} ({binary}, whose haproxy -v says {reported})")
                    }
                    None => format!("{reported} ({binary})"),
                }),
            }
        }
        Err(SemanticCheckError::VersionMismatch {
            target: self.target,
            checkers: seen.join(", "),
        })
    }
}

impl SemanticCheck for VersionedChecker {
    fn identity(&self) -> Result<String, SemanticCheckError> {
        self.chosen()?.version()
    }

    fn haproxy_version(&self) -> Option<HaproxyVersion> {
        Some(self.target)
    }

    fn check_blocking(&self, rendered: &RenderedConfig) -> Result<CheckReport, SemanticCheckError> {
        self.chosen()?.check_blocking(rendered)
    }
}

/// A validation pipeline for a target running HAProxy `target`: its schema phase judges for
/// that version and its semantic phase runs the checker of that version (see
/// [`VersionedChecker::new`]), with a validation cache of `cache_entries` renders.
pub fn versioned_validator(
    target: HaproxyVersion,
    configured: &[(HaproxyVersion, PathBuf)],
    default_binary: impl Into<PathBuf>,
    cache_entries: usize,
) -> Validator {
    let checker = VersionedChecker::new(
        target,
        configured,
        &default_binary.into(),
        CheckerSettings::default(),
    );
    Validator::new(Arc::new(checker), cache_entries)
}
