//! Reading `haproxy -c`: its messages (`[ALERT]`, `[WARNING]`, continuation lines, file
//! and line), the scratch directory scrubbed out of them, line numbers mapped back to the
//! rendered text, and the verdict from the exit status. No process is run here; the runner
//! in `drivers::haproxy_check` hands over a [`RunOutput`].

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use super::prepare::PreparedConfig;
use super::{CONFIG_FILE_NAME, CheckReport, SemanticCheckError};
use crate::pure::validate::{ConfigProblem, ValidationError, ValidationPhase};

/// How many trailing stderr lines stand in for the error when HAProxy failed without an
/// `[ALERT]` line.
const FALLBACK_STDERR_LINES: usize = 5;

/// What a finished `haproxy` run left behind, as the runner hands it over.
#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    /// The exit code; `None` when a signal ended the process.
    pub exit_code: Option<i32>,
    /// How the process ended, in words (`exit status: 1`, `signal: 9 (SIGKILL)`).
    pub status: String,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// The word after `version` on the first line that has one.
pub fn parse_version(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        words
            .by_ref()
            .find(|word| word.eq_ignore_ascii_case("version"))?;
        words.next().map(str::to_string)
    })
}

/// Removes scratch directory paths from file names and messages.
#[derive(Debug, Default)]
pub struct Scrubber {
    /// Longest first, so a path is never half-removed by a shorter prefix of it.
    prefixes: Vec<String>,
}

impl Scrubber {
    /// Adds a directory's path (the runner adds both its given and its canonical
    /// spelling).
    pub fn add(&mut self, dir: &str) {
        let text = dir.trim_end_matches('/').to_string();
        if !text.is_empty() && !self.prefixes.contains(&text) {
            self.prefixes.push(text);
        }
        self.prefixes
            .sort_by_key(|prefix| std::cmp::Reverse(prefix.len()));
    }

    /// `<scratch>/maps/x.map` → `maps/x.map`; a bare `<scratch>` → `.`.
    pub fn scrub(&self, text: &str) -> String {
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
        } else if let (Some(continued), Some(last)) = (continuation(line), messages.last_mut())
            && !continued.is_empty()
        {
            last.text.push(' ');
            last.text.push_str(continued);
        }
    }
    messages
}

/// The text of a line that continues the message before it: `   | text` (HAProxy's
/// multi-line warnings) or an indented `  text` (3.0 and later print the errors of a
/// `crt-list` line, each on its own indented line, under the `bind` they belong to). A line
/// starting in its first column (`Please check that ...`) continues nothing.
fn continuation(line: &str) -> Option<&str> {
    let indented = line.strip_prefix([' ', '\t'])?.trim_start();
    Some(indented.strip_prefix('|').unwrap_or(indented).trim())
}

/// Alerts that only summarize other alerts.
pub fn is_summary(text: &str) -> bool {
    [
        "Fatal errors found in configuration",
        "Error(s) found in configuration file",
        "Failed to initialize server(s) addr",
    ]
    .iter()
    .any(|summary| text.starts_with(summary))
}

/// Turns one run's output into a verdict.
pub struct Interpretation<'a> {
    /// The configuration as it was written for HAProxy (maps reported lines back).
    pub prepared: &'a PreparedConfig,
    pub scrubber: &'a Scrubber,
    /// The render's auxiliary paths, for the working-directory hint.
    pub aux_paths: Vec<&'a str>,
    /// Explain `failed to open` of a render's own file (HAProxy ran outside its config
    /// directory).
    pub hint_working_dir: bool,
}

impl Interpretation<'_> {
    /// The verdict on one finished run: a report (exit status 0, or 2 for "no listener"),
    /// a rejection with HAProxy's alerts as problems, or "killed".
    pub fn verdict(&self, output: &RunOutput) -> Result<CheckReport, SemanticCheckError> {
        let mut messages = parse_haproxy_output(&output.stderr);
        messages.extend(parse_haproxy_output(&output.stdout));
        let mut alerts = Vec::new();
        let mut warnings = Vec::new();
        for message in &messages {
            match message.severity {
                Severity::Alert => alerts.push((is_summary(&message.text), self.problem(message))),
                Severity::Warning => warnings.push(self.problem(message)),
                // 3.0 and later say some things of a config line as a notice that 2.6 warned
                // of (`could not resolve address ..., disabling server` under `-dr`): a notice
                // located on a line is the user's to see; the others (version, path) are not.
                Severity::Notice if message.location.is_some() => {
                    warnings.push(self.problem(message))
                }
                Severity::Notice | Severity::Other => {}
            }
        }
        let report = |no_listener| CheckReport {
            warnings: warnings.clone(),
            no_listener,
            from_cache: false,
            elapsed: output.elapsed,
        };
        match output.exit_code {
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
                status: output.status.clone(),
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
