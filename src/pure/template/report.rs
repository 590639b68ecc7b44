//! What an instrumented render reports (`haptor render --trace` / `--profile`) and what a
//! series of timed renders summarises to (`haptor bench`).
//!
//! A *trace* names, for every line of every rendered file, the template line that wrote it
//! and the chain of includes that led there: `haproxy.cfg` line 45 included the snippet
//! `backend-servers`, whose line 7 wrote the line. Chains are kept as a tree of include
//! sites shared by all lines ([`RenderTrace`]), so a trace of a large render is a few words
//! per line. A *profile* counts the calls of every template and snippet and the time spent
//! in each, with and without the snippets it included ([`RenderProfile`]). Both are
//! collected by the hooks in `render/trace.rs`; this module only holds and presents them.
//!
//! When the config was read from a file, every template line is also given as the line of
//! that file it is at (templates are YAML block scalars in it; `located.rs` places them).
//!
//! A file registered with `register_file` has no template of its own: each of its lines
//! comes from the `register_file` call. Lines `sort_lines` reordered come from its
//! `{{#sort_lines}}` line. The trace is of the templates' output: a config's
//! `postProcessing` rewrites run after it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

/// What an instrumented template set collects while it renders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Instrument {
    /// Which template line wrote each output line.
    pub trace: bool,
    /// Calls and time per template and snippet.
    pub profile: bool,
}

impl Instrument {
    pub fn any(self) -> bool {
        self.trace || self.profile
    }
}

/// What the last render of an instrumented set collected.
#[derive(Debug, Clone, Default)]
pub struct RenderReport {
    pub trace: Option<RenderTrace>,
    pub profile: Option<RenderProfile>,
}

/// A line of a template: its index in [`RenderTrace::templates`] and its 1-based line
/// (0 when unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Place {
    pub(crate) template: u32,
    pub(crate) line: u32,
}

/// A node of the include tree: the snippet it stands for was included at `site`, inside
/// the snippet (or template) of node `parent`. Node 0 is the root: no include.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Include {
    pub(crate) parent: u32,
    pub(crate) site: Place,
}

/// Where one output line came from: the include node it was written under and the line
/// that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) include: u32,
    pub(crate) place: Place,
}

/// Which template line wrote each line of each rendered file.
#[derive(Debug, Clone, Default)]
pub struct RenderTrace {
    /// Registry names of the templates and snippets (`haproxy.cfg`, `maps/<name>`, ...).
    pub(crate) templates: Vec<String>,
    pub(crate) includes: Vec<Include>,
    /// `haproxy.cfg`, then the auxiliary files in render order, then the registered files.
    pub files: Vec<TracedFile>,
    /// The config file's lines of the template lines used, when it was read from a file.
    pub(crate) config: Option<ConfigLines>,
}

/// The lines of the config file the template lines of a trace are at.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConfigLines {
    pub(crate) file: String,
    pub(crate) lines: HashMap<Place, usize>,
}

/// One rendered file and the origin of each of its lines.
#[derive(Debug, Clone, Default)]
pub struct TracedFile {
    /// The file's path (`haproxy.cfg`, `maps/routes.map`, ...).
    pub path: String,
    /// Its text as the templates wrote it.
    pub text: String,
    pub(crate) lines: Vec<Origin>,
}

/// One step of an origin: a line of a template or snippet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site<'a> {
    /// Registry name: `haproxy.cfg`, `maps/<name>`, `files/<name>`,
    /// `sslCertificates/<name>` or a snippet's name.
    pub template: &'a str,
    /// 1-based; 0 when not known.
    pub line: u32,
    /// The line of the config file that template line is at, when known.
    pub config_line: Option<usize>,
}

impl Site<'_> {
    /// `snippet NAME` for snippets, the registry name for templates.
    fn describe(&self) -> String {
        if super::is_snippet_name(self.template) {
            format!("snippet {}", self.template)
        } else {
            self.template.to_string()
        }
    }

    fn to_json(self) -> Value {
        let mut value = json!({ "template": self.template, "line": self.line });
        if let (Some(line), Some(object)) = (self.config_line, value.as_object_mut()) {
            object.insert("config_line".into(), line.into());
        }
        value
    }
}

impl RenderTrace {
    /// The origin of line `number` (1-based) of the file at `path`: the include sites,
    /// outermost first, then the line that wrote it.
    pub fn origin_of(&self, path: &str, number: usize) -> Option<Vec<Site<'_>>> {
        let file = self.files.iter().find(|f| f.path == path)?;
        let origin = file.lines.get(number.checked_sub(1)?)?;
        Some(self.chain(*origin))
    }

    fn site(&self, place: Place) -> Site<'_> {
        Site {
            template: self
                .templates
                .get(place.template as usize)
                .map_or("?", String::as_str),
            line: place.line,
            config_line: self
                .config
                .as_ref()
                .and_then(|config| config.lines.get(&place).copied()),
        }
    }

    /// Notes the config file's line of every template line the trace uses (`line_of`: a
    /// template's registry name and line to the file's line).
    pub(crate) fn locate(&mut self, line_of: impl Fn(&str, usize) -> Option<usize>) {
        let Some(config) = &mut self.config else {
            return;
        };
        let places = self
            .files
            .iter()
            .flat_map(|file| file.lines.iter().map(|origin| origin.place))
            .chain(self.includes.iter().skip(1).map(|include| include.site));
        for place in places {
            if place.line == 0 || config.lines.contains_key(&place) {
                continue;
            }
            let Some(template) = self.templates.get(place.template as usize) else {
                continue;
            };
            if let Some(line) = line_of(template, place.line as usize) {
                config.lines.insert(place, line);
            }
        }
    }

    /// The config file's name (its last path component), for the text form.
    fn config_name(&self) -> Option<&str> {
        let file = &self.config.as_ref()?.file;
        Some(file.rsplit('/').next().unwrap_or(file))
    }

    fn chain(&self, origin: Origin) -> Vec<Site<'_>> {
        let mut chain = vec![self.site(origin.place)];
        let mut node = origin.include;
        // Bounded by the number of nodes: a malformed tree cannot loop forever.
        for _ in 0..self.includes.len() {
            let Some(include) = self.includes.get(node as usize).filter(|_| node != 0) else {
                break;
            };
            chain.push(self.site(include.site));
            node = include.parent;
        }
        chain.reverse();
        chain
    }

    /// The trace for people: per file, runs of lines that one template wrote from
    /// consecutive lines (or from one line), each run headed by the output lines and their
    /// origin (`haproxy.cfg:812-814  ← haproxy.cfg line 2113 ← snippet ingress-backends
    /// lines 14-16`), then the lines themselves.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for file in &self.files {
            let _ = writeln!(out, "==> {} ({} lines)", file.path, file.lines.len());
            let texts: Vec<&str> = file.text.lines().collect();
            for run in runs(&file.lines) {
                let first = &file.lines[run.start];
                let last = &file.lines[run.end - 1];
                let chain = self.chain(*first);
                let span = if run.len() == 1 {
                    format!("{}:{}", file.path, run.start + 1)
                } else {
                    format!("{}:{}-{}", file.path, run.start + 1, run.end)
                };
                let _ = write!(out, "{span} ");
                for (i, site) in chain.iter().enumerate() {
                    let last_site = i + 1 == chain.len();
                    let to = last_site.then(|| self.site(last.place));
                    let range = |from: u32, to: Option<u32>| match to {
                        Some(to) if to != from => format!("{from}-{to}"),
                        _ => from.to_string(),
                    };
                    let lines = match (site.line, to.map(|to| to.line)) {
                        (0, _) => "line ?".to_string(),
                        (from, Some(to)) if to != from => format!("lines {from}-{to}"),
                        (line, _) => format!("line {line}"),
                    };
                    let _ = write!(out, " ← {} {lines}", site.describe());
                    if let (Some(name), Some(from)) = (self.config_name(), site.config_line) {
                        let to = to.and_then(|to| to.config_line).map(|to| to as u32);
                        let _ = write!(out, " ({name}:{})", range(from as u32, to));
                    }
                }
                out.push('\n');
                for index in run {
                    let _ = writeln!(out, "  | {}", texts.get(index).copied().unwrap_or(""));
                }
            }
        }
        out
    }

    /// The trace for machines: `{"config_file", "files": [{"path", "lines": [{"line",
    /// "text", "template", "template_line", "config_line", "included_from": [{"template",
    /// "line", "config_line"}, ...]}]}]}`, `included_from` outermost first; `config_file`
    /// and `config_line` when the config was read from a file.
    pub fn to_json(&self) -> Value {
        let files: Vec<Value> = self
            .files
            .iter()
            .map(|file| {
                let texts: Vec<&str> = file.text.lines().collect();
                let lines: Vec<Value> = file
                    .lines
                    .iter()
                    .enumerate()
                    .map(|(index, origin)| {
                        let mut chain = self.chain(*origin);
                        let writer = chain.pop().unwrap_or(Site {
                            template: "?",
                            line: 0,
                            config_line: None,
                        });
                        let mut line = json!({
                            "line": index + 1,
                            "text": texts.get(index).copied().unwrap_or(""),
                            "template": writer.template,
                            "template_line": writer.line,
                            "included_from": chain.into_iter().map(Site::to_json).collect::<Vec<_>>(),
                        });
                        if let (Some(config_line), Some(object)) =
                            (writer.config_line, line.as_object_mut())
                        {
                            object.insert("config_line".into(), config_line.into());
                        }
                        line
                    })
                    .collect();
                json!({ "path": file.path, "lines": lines })
            })
            .collect();
        let mut value = json!({ "files": files });
        if let (Some(config), Some(object)) = (&self.config, value.as_object_mut()) {
            object.insert("config_file".into(), config.file.clone().into());
        }
        value
    }
}

/// Splits a file's lines into runs: consecutive lines under one include node, written by
/// one template from consecutive lines, or all from one line.
fn runs(lines: &[Origin]) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    while start < lines.len() {
        let first = lines[start];
        let mut end = start + 1;
        let mut step: Option<u32> = None;
        while let Some(next) = lines.get(end) {
            let previous = lines[end - 1];
            let same_writer =
                next.include == first.include && next.place.template == first.place.template;
            let delta = next.place.line.wrapping_sub(previous.place.line);
            let fits = same_writer && first.place.line != 0 && matches!(delta, 0 | 1);
            if !fits || step.is_some_and(|s| s != delta) {
                break;
            }
            step = Some(delta);
            end += 1;
        }
        runs.push(start..end);
        start = end;
    }
    runs
}

/// Calls and time per template and snippet in one render.
#[derive(Debug, Clone, Default)]
pub struct RenderProfile {
    /// Sorted by self time, longest first.
    pub rows: Vec<ProfileRow>,
    /// The whole render, hooks included.
    pub render_time: Duration,
}

/// One template's or snippet's share of a render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileRow {
    /// Registry name (`haproxy.cfg`, `maps/<name>`, a snippet's name).
    pub template: String,
    pub calls: u64,
    /// From each call's start to its end, nested snippets included (a snippet inside
    /// itself counts once).
    pub total: Duration,
    /// [`Self::total`] without the snippets it included.
    pub self_time: Duration,
}

impl ProfileRow {
    pub fn is_snippet(&self) -> bool {
        super::is_snippet_name(&self.template)
    }
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

impl RenderProfile {
    /// Sorts rows by self time, then total time, then name.
    pub(crate) fn sort(&mut self) {
        self.rows.sort_by(|a, b| {
            b.self_time
                .cmp(&a.self_time)
                .then(b.total.cmp(&a.total))
                .then(a.template.cmp(&b.template))
        });
    }

    /// A table: name, kind, calls, total and self milliseconds, self share of the render.
    pub fn to_text(&self) -> String {
        let width = self
            .rows
            .iter()
            .map(|row| row.template.chars().count())
            .max()
            .unwrap_or(0)
            .max("template or snippet".len());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<width$}  {:<8}  {:>8}  {:>10}  {:>10}  {:>6}",
            "template or snippet", "kind", "calls", "total ms", "self ms", "self %"
        );
        let whole = self.render_time.as_secs_f64().max(f64::MIN_POSITIVE);
        for row in &self.rows {
            let _ = writeln!(
                out,
                "{:<width$}  {:<8}  {:>8}  {:>10.3}  {:>10.3}  {:>5.1}%",
                row.template,
                if row.is_snippet() {
                    "snippet"
                } else {
                    "template"
                },
                row.calls,
                millis(row.total),
                millis(row.self_time),
                100.0 * row.self_time.as_secs_f64() / whole
            );
        }
        let _ = writeln!(
            out,
            "render: {:.3} ms (with the profile's own cost)",
            millis(self.render_time)
        );
        out
    }

    /// `{"render_ms", "rows": [{"template", "kind", "calls", "total_ms", "self_ms"}]}`.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                json!({
                    "template": row.template,
                    "kind": if row.is_snippet() { "snippet" } else { "template" },
                    "calls": row.calls,
                    "total_ms": millis(row.total),
                    "self_ms": millis(row.self_time),
                })
            })
            .collect();
        json!({ "render_ms": millis(self.render_time), "rows": rows })
    }
}

/// The distribution of a series of timings: mean and nearest-rank percentiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingSummary {
    pub count: usize,
    pub mean: Duration,
    pub min: Duration,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl TimingSummary {
    /// `None` for no samples.
    pub fn of(samples: &[Duration]) -> Option<TimingSummary> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let count = sorted.len();
        let (min, max) = (*sorted.first()?, *sorted.last()?);
        // Nearest rank: the smallest sample with at least p % of the samples at or below it.
        let rank = |p: usize| sorted[(p * count).div_ceil(100).clamp(1, count) - 1];
        let total: Duration = sorted.iter().sum();
        Some(TimingSummary {
            count,
            mean: total / u32::try_from(count).unwrap_or(u32::MAX),
            min,
            p50: rank(50),
            p90: rank(90),
            p99: rank(99),
            max,
        })
    }

    /// `mean 38.210 ms  p50 ...`, one figure per line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (name, value) in self.figures() {
            let _ = writeln!(out, "  {name:<4} {:>10.3} ms", millis(value));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("iterations".into(), self.count.into());
        for (name, value) in self.figures() {
            object.insert(format!("{name}_ms"), millis(value).into());
        }
        Value::Object(object)
    }

    fn figures(&self) -> [(&'static str, Duration); 6] {
        [
            ("mean", self.mean),
            ("min", self.min),
            ("p50", self.p50),
            ("p90", self.p90),
            ("p99", self.p99),
            ("max", self.max),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(include: u32, template: u32, line: u32) -> Origin {
        Origin {
            include,
            place: Place { template, line },
        }
    }

    fn trace() -> RenderTrace {
        RenderTrace {
            templates: vec!["haproxy.cfg".into(), "backend-servers".into()],
            includes: vec![
                Include {
                    parent: 0,
                    site: Place::default(),
                },
                Include {
                    parent: 0,
                    site: Place {
                        template: 0,
                        line: 45,
                    },
                },
            ],
            files: vec![TracedFile {
                path: "haproxy.cfg".into(),
                text: "global\n  maxconn 10\nbackend b\n  server a\n  server b\n".into(),
                lines: vec![
                    origin(0, 0, 1),
                    origin(0, 0, 2),
                    origin(1, 1, 6),
                    origin(1, 1, 7),
                    origin(1, 1, 7),
                ],
            }],
            config: None,
        }
    }

    #[test]
    fn an_origin_lists_the_include_sites_outermost_first_then_the_writing_line() {
        let trace = trace();
        assert_eq!(
            trace.origin_of("haproxy.cfg", 4),
            Some(vec![
                Site {
                    template: "haproxy.cfg",
                    line: 45,
                    config_line: None,
                },
                Site {
                    template: "backend-servers",
                    line: 7,
                    config_line: None,
                }
            ])
        );
        assert_eq!(trace.origin_of("haproxy.cfg", 0), None);
        assert_eq!(trace.origin_of("haproxy.cfg", 6), None);
    }

    #[test]
    fn the_text_trace_groups_lines_written_from_consecutive_lines_or_one_line() {
        let text = trace().to_text();
        assert_eq!(
            text,
            "==> haproxy.cfg (5 lines)\n\
             haproxy.cfg:1-2  ← haproxy.cfg lines 1-2\n  | global\n  |   maxconn 10\n\
             haproxy.cfg:3-4  ← haproxy.cfg line 45 ← snippet backend-servers lines 6-7\n  | backend b\n  |   server a\n\
             haproxy.cfg:5  ← haproxy.cfg line 45 ← snippet backend-servers line 7\n  |   server b\n"
        );
    }

    #[test]
    fn the_json_trace_names_the_writer_and_where_it_was_included() {
        let json = trace().to_json();
        let line = &json["files"][0]["lines"][3];
        assert_eq!(line["line"], 4);
        assert_eq!(line["text"], "  server a");
        assert_eq!(line["template"], "backend-servers");
        assert_eq!(line["template_line"], 7);
        assert_eq!(
            line["included_from"],
            json!([{"template": "haproxy.cfg", "line": 45}])
        );
        assert_eq!(json["files"][0]["lines"][0]["included_from"], json!([]));
    }

    #[test]
    fn config_file_lines_follow_the_template_lines_when_the_config_came_from_a_file() {
        let mut trace = trace();
        trace.config = Some(ConfigLines {
            file: "/work/config.yaml".into(),
            lines: HashMap::new(),
        });
        // haproxy.cfg starts at line 21 of the file, the snippet at line 11.
        trace.locate(|template, line| Some(line + if template == "haproxy.cfg" { 20 } else { 10 }));
        let text = trace.to_text();
        assert!(
            text.contains(
                "haproxy.cfg:3-4  ← haproxy.cfg line 45 (config.yaml:65) ← snippet \
                 backend-servers lines 6-7 (config.yaml:16-17)\n"
            ),
            "{text}"
        );
        let json = trace.to_json();
        assert_eq!(json["config_file"], "/work/config.yaml");
        let line = &json["files"][0]["lines"][3];
        assert_eq!(line["config_line"], 17);
        assert_eq!(line["included_from"][0]["config_line"], 65);
    }

    #[test]
    fn a_profile_sorts_by_self_time_and_tells_snippets_from_templates() {
        let ms = Duration::from_millis;
        let mut profile = RenderProfile {
            rows: vec![
                ProfileRow {
                    template: "haproxy.cfg".into(),
                    calls: 1,
                    total: ms(10),
                    self_time: ms(2),
                },
                ProfileRow {
                    template: "backend-servers".into(),
                    calls: 3,
                    total: ms(8),
                    self_time: ms(8),
                },
            ],
            render_time: ms(10),
        };
        profile.sort();
        assert_eq!(profile.rows[0].template, "backend-servers");
        let text = profile.to_text();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].starts_with("backend-servers      snippet"),
            "{text}"
        );
        assert!(lines[1].contains("  80.0%"), "{text}");
        assert!(
            lines[2].starts_with("haproxy.cfg          template"),
            "{text}"
        );
        assert_eq!(profile.to_json()["rows"][0]["calls"], 3);
        assert_eq!(profile.to_json()["rows"][1]["kind"], "template");
    }

    #[test]
    fn timing_percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let summary = TimingSummary::of(&samples).expect("samples");
        assert_eq!(summary.count, 100);
        assert_eq!(summary.p50, Duration::from_millis(50));
        assert_eq!(summary.p90, Duration::from_millis(90));
        assert_eq!(summary.p99, Duration::from_millis(99));
        assert_eq!(summary.max, Duration::from_millis(100));
        assert_eq!(summary.min, Duration::from_millis(1));
        assert_eq!(summary.mean, Duration::from_micros(50_500));
        let one = TimingSummary::of(&[Duration::from_millis(7)]).expect("one sample");
        assert_eq!(
            (one.p50, one.p99),
            (Duration::from_millis(7), Duration::from_millis(7))
        );
        assert_eq!(TimingSummary::of(&[]), None);
    }
}
