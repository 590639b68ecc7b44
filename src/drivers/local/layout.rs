//! Where the local target keeps things, and the two settings it adds to every configuration it
//! writes.
//!
//! A [`WorkDir`] holds `haproxy.cfg`, the auxiliary files at their relative paths, the master
//! CLI and runtime API sockets, the pid file, HAProxy's log, the fencing epoch and the manifest
//! of the last deployment. Renders never name these sockets or this directory, so before
//! `haproxy.cfg` is written [`inject_local_settings`] adds a `stats socket` line (the runtime
//! API) and a `default-path origin` line (relative auxiliary paths resolve inside the work
//! directory) to `global`, and comments out the render's own `default-path` and `daemon`
//! lines (the target owns the process and the paths). Every change carries a marker, so
//! [`strip_local_settings`] gives back the rendered text exactly: plans and checksums always
//! compare rendered text, never the text on disk.

use std::borrow::Cow;
use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::pure::haproxy::{SectionKind, quote_word};

use super::LocalTargetError;

/// The comment that ends every line the local target added.
pub const LOCAL_MARKER: &str = "# added by haptor local target";

/// The prefix that comments out a rendered line the local target overrides.
const DISABLED_PREFIX: &str = "#haptor-local-disabled# ";

/// `global` keywords the local target overrides: the paths and the process mode are its own.
const OVERRIDDEN_GLOBAL_KEYWORDS: &[&str] = &["default-path", "daemon"];

/// The file names of the work directory that auxiliary files may not take.
const RESERVED_NAMES: &[&str] = &[
    CONFIG_FILE,
    MASTER_SOCKET,
    RUNTIME_SOCKET,
    PID_FILE,
    LOG_FILE,
    EPOCH_FILE,
    MANIFEST_FILE,
];

const CONFIG_FILE: &str = "haproxy.cfg";
const MASTER_SOCKET: &str = "master.sock";
const RUNTIME_SOCKET: &str = "runtime.sock";
const PID_FILE: &str = "haproxy.pid";
const LOG_FILE: &str = "haproxy.log";
const EPOCH_FILE: &str = "haptor-epoch";
const MANIFEST_FILE: &str = "haptor-deployed.json";

/// The longest socket path a Unix socket address holds (`sun_path` less its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The directory one local HAProxy instance lives in (absolute, existing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkDir {
    root: PathBuf,
}

impl WorkDir {
    /// Creates the directory if needed and resolves it to an absolute path. Fails when the
    /// path is not UTF-8, cannot be written into `haproxy.cfg`, or is too long for the socket
    /// paths inside it.
    pub fn new(path: impl AsRef<Path>) -> Result<WorkDir, LocalTargetError> {
        let path = path.as_ref();
        fs::create_dir_all(path).map_err(|source| LocalTargetError::Io {
            action: "create the work directory",
            path: path.to_path_buf(),
            source,
        })?;
        let root = fs::canonicalize(path).map_err(|source| LocalTargetError::Io {
            action: "resolve the work directory",
            path: path.to_path_buf(),
            source,
        })?;
        let text = root
            .to_str()
            .ok_or_else(|| LocalTargetError::UnusableWorkDir {
                path: root.clone(),
                reason: "the path is not valid UTF-8".into(),
            })?;
        config_word(text).map_err(|reason| LocalTargetError::UnusableWorkDir {
            path: root.clone(),
            reason,
        })?;
        let work_dir = WorkDir { root };
        for socket in [work_dir.master_socket(), work_dir.runtime_socket()] {
            let length = socket.as_os_str().len();
            if length > MAX_SOCKET_PATH {
                return Err(LocalTargetError::UnusableWorkDir {
                    path: work_dir.root.clone(),
                    reason: format!(
                        "the socket path {} is {length} bytes long; Unix sockets allow at most {MAX_SOCKET_PATH}",
                        socket.display()
                    ),
                });
            }
        }
        Ok(work_dir)
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `haproxy.cfg`, as HAProxy reads it (with the local settings added).
    pub fn config_file(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    /// The master CLI socket (`haproxy -S`): `reload`, `show proc`.
    pub fn master_socket(&self) -> PathBuf {
        self.root.join(MASTER_SOCKET)
    }

    /// The runtime API socket (`stats socket` in `global`).
    pub fn runtime_socket(&self) -> PathBuf {
        self.root.join(RUNTIME_SOCKET)
    }

    /// The pid file (`haproxy -p`), holding the master's pid.
    pub fn pid_file(&self) -> PathBuf {
        self.root.join(PID_FILE)
    }

    /// HAProxy's standard output and error, when [`super::HaproxyProcess`] started it.
    pub fn log_file(&self) -> PathBuf {
        self.root.join(LOG_FILE)
    }

    /// The highest epoch this instance accepted (fencing survives a controller restart).
    pub fn epoch_file(&self) -> PathBuf {
        self.root.join(EPOCH_FILE)
    }

    /// Which auxiliary files (path, kind, name) the last deployment wrote.
    pub fn manifest_file(&self) -> PathBuf {
        self.root.join(MANIFEST_FILE)
    }

    /// The absolute path of an auxiliary file. Refuses absolute paths, `..`, and the names
    /// the work directory reserves, so a render cannot write outside it or over its state.
    pub fn aux_file(&self, relative: &str) -> Result<PathBuf, LocalTargetError> {
        let unsafe_path = |reason: &str| LocalTargetError::UnsafeAuxPath {
            path: relative.to_string(),
            reason: reason.to_string(),
        };
        if relative.is_empty() {
            return Err(unsafe_path("the path is empty"));
        }
        let path = Path::new(relative);
        if !path
            .components()
            .all(|component| matches!(component, Component::Normal(_)))
        {
            return Err(unsafe_path(
                "auxiliary paths must be relative and may not contain '.' or '..'",
            ));
        }
        if RESERVED_NAMES.contains(&relative) {
            return Err(unsafe_path(
                "the name is reserved for the local target's own files",
            ));
        }
        Ok(self.root.join(path))
    }
}

/// Writes a word so HAProxy's configuration tokenizer reads it back unchanged (haptor's one
/// quoting rule, [`quote_word`]); refuses a word with a quote or a control character, which
/// the local settings never need.
fn config_word(word: &str) -> Result<String, String> {
    if word.contains('\'') || word.chars().any(char::is_control) {
        Err(format!(
            "'{}' contains a quote or a control character, which cannot be written into haproxy.cfg",
            word.escape_debug()
        ))
    } else {
        Ok(quote_word(word))
    }
}

/// The lines the local target adds to `global`, without indentation or line ending.
fn local_setting_lines(work_dir: &WorkDir) -> Vec<String> {
    // WorkDir::new checked that its paths are UTF-8 and quotable.
    let word = |path: &Path| {
        let text = path.to_string_lossy();
        config_word(&text).unwrap_or_else(|_| text.into_owned())
    };
    vec![
        format!(
            "stats socket {} mode 600 level admin expose-fd listeners {LOCAL_MARKER}",
            word(&work_dir.runtime_socket())
        ),
        format!(
            "default-path origin {} {LOCAL_MARKER}",
            word(work_dir.root())
        ),
    ]
}

fn first_word(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or_default()
}

fn indentation(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// The rendered text as the local target writes it: the runtime API socket and the
/// `default-path origin <work dir>` line added right after the first `global` line (a
/// `global` section is prepended when there is none), and the render's own `default-path`
/// and `daemon` lines in `global` commented out. [`strip_local_settings`] undoes it exactly.
///
/// Only `global` sections change, so only they are gone through line by line; the text
/// between them is copied whole (a megabyte at 10 000 backends, written on every endpoint
/// change).
pub fn inject_local_settings(rendered: &str, work_dir: &WorkDir) -> String {
    with_local_settings(rendered, work_dir).concat()
}

/// [`inject_local_settings`]' text in the parts it is made of: the rendered text between
/// `global` sections as it is, each `global` section as it becomes. Written one after the
/// other, they are the file, with no copy of the megabyte in between.
pub(crate) fn with_local_settings<'a>(rendered: &'a str, work_dir: &WorkDir) -> Vec<Cow<'a, str>> {
    let settings = local_setting_lines(work_dir);
    let mut parts = Vec::new();
    let mut injected = false;
    let mut copied = 0;
    for section in global_sections(rendered) {
        parts.push(Cow::Borrowed(&rendered[copied..section.start]));
        copied = section.end;
        let mut out = String::with_capacity(section.len() + 256);
        for line in rendered[section].split_inclusive('\n') {
            let word = first_word(line);
            if OVERRIDDEN_GLOBAL_KEYWORDS.contains(&word) {
                let indent = indentation(line);
                out.push_str(indent);
                out.push_str(DISABLED_PREFIX);
                out.push_str(&line[indent.len()..]);
            } else {
                out.push_str(line);
            }
            if !injected && word == "global" {
                injected = true;
                if line.ends_with('\n') {
                    let ending = if line.ends_with("\r\n") { "\r\n" } else { "\n" };
                    for setting in &settings {
                        out.push_str("    ");
                        out.push_str(setting);
                        out.push_str(ending);
                    }
                } else {
                    // The text ends on its `global` line: the added lines go after a line break
                    // and the last one has none, so stripping can tell the break was added.
                    for setting in &settings {
                        out.push_str("\n    ");
                        out.push_str(setting);
                    }
                }
            }
        }
        parts.push(Cow::Owned(out));
    }
    parts.push(Cow::Borrowed(&rendered[copied..]));
    if !injected {
        let mut prepended = format!("global {LOCAL_MARKER}\n");
        for setting in &settings {
            prepended.push_str("    ");
            prepended.push_str(setting);
            prepended.push('\n');
        }
        parts.insert(0, Cow::Owned(prepended));
    }
    parts
}

/// The byte ranges of the `global` sections of a text, in order: each from a line whose first
/// word is `global` to the next line whose first word is a section keyword (or the end).
/// Lines whose first word is `global` are found by searching the text for the word, not by
/// splitting it into lines.
fn global_sections(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut sections: Vec<std::ops::Range<usize>> = Vec::new();
    for at in memchr::memmem::find_iter(text.as_bytes(), b"global") {
        // `global` is ASCII, so `at` and the end of the word are char boundaries.
        let line_start = text[..at].rfind('\n').map_or(0, |newline| newline + 1);
        let is_first_word = text[line_start..at].chars().all(char::is_whitespace)
            && text[at + "global".len()..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace);
        if !is_first_word || sections.last().is_some_and(|last| line_start < last.end) {
            continue;
        }
        let mut end = text[at..]
            .find('\n')
            .map_or(text.len(), |newline| at + newline + 1);
        while end < text.len() {
            let line_end = text[end..]
                .find('\n')
                .map_or(text.len(), |newline| end + newline + 1);
            if SectionKind::from_keyword(first_word(&text[end..line_end])).is_some() {
                break;
            }
            end = line_end;
        }
        sections.push(line_start..end);
    }
    sections
}

/// The rendered text a written `haproxy.cfg` came from: lines ending in [`LOCAL_MARKER`]
/// removed, commented-out lines restored.
pub fn strip_local_settings(written: &str) -> String {
    let mut out = String::with_capacity(written.len());
    let mut removed_unterminated_line = false;
    for line in written.split_inclusive('\n') {
        if line.trim_end().ends_with(LOCAL_MARKER) {
            removed_unterminated_line = !line.ends_with('\n');
            continue;
        }
        let indent = indentation(line);
        match line[indent.len()..].strip_prefix(DISABLED_PREFIX) {
            Some(original) => {
                out.push_str(indent);
                out.push_str(original);
            }
            None => out.push_str(line),
        }
    }
    if removed_unterminated_line && out.ends_with('\n') {
        out.pop();
    }
    out
}

/// The configuration HAProxy starts with before anything was deployed: an empty `global`
/// section with the local settings (HAProxy 2.6 starts in master-worker mode without any
/// proxy).
pub fn bootstrap_config(work_dir: &WorkDir) -> String {
    inject_local_settings("global\n", work_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work_dir() -> (tempfile::TempDir, WorkDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let work_dir = WorkDir::new(dir.path()).expect("work dir");
        (dir, work_dir)
    }

    #[test]
    fn the_socket_and_default_path_go_right_after_global() {
        let (_dir, wd) = work_dir();
        let written = inject_local_settings("global\n    maxconn 10\ndefaults\n", &wd);
        let lines: Vec<&str> = written.lines().collect();
        assert_eq!(lines[0], "global");
        assert_eq!(
            lines[1],
            format!(
                "    stats socket {} mode 600 level admin expose-fd listeners {LOCAL_MARKER}",
                wd.runtime_socket().display()
            )
        );
        assert_eq!(
            lines[2],
            format!(
                "    default-path origin {} {LOCAL_MARKER}",
                wd.root().display()
            )
        );
        assert_eq!(lines[3], "    maxconn 10");
    }

    #[test]
    fn the_renders_own_default_path_and_daemon_are_commented_out() {
        let (_dir, wd) = work_dir();
        let rendered =
            "global\n  default-path origin /etc/haproxy\n  daemon\nfrontend f\n  daemon\n";
        let written = inject_local_settings(rendered, &wd);
        assert!(!written.contains("\n  default-path origin /etc/haproxy"));
        assert!(!written.contains("\n  daemon\nfrontend"));
        assert!(
            written.contains("frontend f\n  daemon\n"),
            "only global is touched"
        );
        assert_eq!(strip_local_settings(&written), rendered);
    }

    #[test]
    fn stripping_gives_back_every_rendered_text_exactly() {
        let (_dir, wd) = work_dir();
        for rendered in [
            "",
            "global",
            "global\n",
            "global\r\n  maxconn 5\r\n",
            "defaults\n  mode http\n",
            "# header\nglobal # comment\n  daemon\nglobal\n  default-path config\n",
            "frontend f\n  bind :80\nglobal\n  nbthread 2",
        ] {
            let written = inject_local_settings(rendered, &wd);
            assert_ne!(written, rendered);
            assert_eq!(strip_local_settings(&written), rendered, "{rendered:?}");
        }
    }

    /// The settings added by going through every line, as `inject_local_settings` did
    /// before it looked for `global` sections first: the reference it must equal.
    fn injected_line_by_line(rendered: &str, work_dir: &WorkDir) -> String {
        let settings = local_setting_lines(work_dir);
        let mut out = String::new();
        let (mut in_global, mut injected) = (false, false);
        for line in rendered.split_inclusive('\n') {
            let word = first_word(line);
            if SectionKind::from_keyword(word).is_some() {
                in_global = word == "global";
            }
            if in_global && OVERRIDDEN_GLOBAL_KEYWORDS.contains(&word) {
                let indent = indentation(line);
                out.push_str(&format!(
                    "{indent}{DISABLED_PREFIX}{}",
                    &line[indent.len()..]
                ));
            } else {
                out.push_str(line);
            }
            if in_global && !injected && word == "global" {
                injected = true;
                for setting in &settings {
                    out.push_str(&match line.strip_suffix('\n') {
                        Some(body) if body.ends_with('\r') => format!("    {setting}\r\n"),
                        Some(_) => format!("    {setting}\n"),
                        None => format!("\n    {setting}"),
                    });
                }
            }
        }
        if injected {
            return out;
        }
        let added: String = settings.iter().map(|s| format!("    {s}\n")).collect();
        format!("global {LOCAL_MARKER}\n{added}{out}")
    }

    #[test]
    fn only_global_sections_change_exactly_as_going_through_every_line_would_change_them() {
        let (_dir, wd) = work_dir();
        for rendered in [
            "",
            "global",
            "global\n",
            "  global\n  daemon\n",
            "\u{a0}global\n  daemon\n",
            "global\u{a0}\n  daemon\n",
            "global#x\n  daemon\n",
            "globals\n  daemon\nbackend b\n  daemon\n",
            "backend global\n  daemon\nglobal\n daemon\n",
            "defaults\n  option global-x\n  daemon\nglobal\n\tdaemon\r\n  default-path config\r\n",
            "global\r\n  daemon\r\ndefaults\r\n  daemon\r\nglobal\r\n  default-path x\r\n",
            "global\n  nbthread 2\n  global\n  daemon\n    frontend f\n  daemon\n",
            "frontend f\n  bind :80\nglobal\n  daemon",
            "# global\nbackend b\n  server s 127.0.0.1:1 # global\n",
            "global global\n  daemon\nglobal\n  daemon\n",
        ] {
            assert_eq!(
                inject_local_settings(rendered, &wd),
                injected_line_by_line(rendered, &wd),
                "{rendered:?}"
            );
        }
    }

    #[test]
    fn a_config_without_global_gets_one_in_front() {
        let (_dir, wd) = work_dir();
        let written = inject_local_settings("defaults\n  mode http\n", &wd);
        assert!(written.starts_with(&format!("global {LOCAL_MARKER}\n")));
        assert!(written.ends_with("defaults\n  mode http\n"));
    }

    #[test]
    fn aux_paths_cannot_leave_the_work_dir_or_replace_its_state() {
        let (_dir, wd) = work_dir();
        assert_eq!(
            wd.aux_file("maps/hosts.map").expect("safe"),
            wd.root().join("maps/hosts.map")
        );
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "maps/../../x",
            "./x",
            "haptor-epoch",
            "haproxy.cfg",
        ] {
            assert!(
                matches!(
                    wd.aux_file(bad),
                    Err(LocalTargetError::UnsafeAuxPath { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_work_dir_with_spaces_is_quoted_and_one_with_a_quote_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let spaced = WorkDir::new(dir.path().join("with space")).expect("quotable");
        let written = bootstrap_config(&spaced);
        assert!(written.contains(&format!(
            "default-path origin '{}' {LOCAL_MARKER}",
            spaced.root().display()
        )));
        assert!(matches!(
            WorkDir::new(dir.path().join("it's")),
            Err(LocalTargetError::UnusableWorkDir { .. })
        ));
    }

    #[test]
    fn a_work_dir_too_long_for_a_socket_path_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let long = dir.path().join("d".repeat(120));
        match WorkDir::new(&long) {
            Err(LocalTargetError::UnusableWorkDir { reason, .. }) => {
                assert!(reason.contains("at most 107"), "{reason}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
