//! The structured view of a parsed configuration: what deployment needs to know without
//! walking directives itself. Frontends with their `bind` lines, `use_backend` rules and
//! `default_backend`; backends with `balance`, `server`, `default-server` and
//! `server-template` lines; and the files the configuration refers to (map and pattern files,
//! certificates). A `listen` section is both a frontend and a backend.
//!
//! The view reports what is written, line by line: conditional blocks are not evaluated
//! (lines inside `.if` blocks are included), settings inherited from `defaults` are not
//! merged in, and environment references stay unexpanded. Everything else remains available
//! as ordered directives in the [`Config`].

use serde::Serialize;

use super::ast::{Config, Directive, Section};
use super::keywords::{KeywordTables, ParamArity};
use super::sections::SectionKind;
use super::versions::DOCUMENTED_LINES;

/// The `bind` lines of every frontend and listen section, as `(section, address)`, read from
/// the configuration text without parsing its other sections: a summary that stays cheap when
/// the configuration holds 10 000 backends.
pub fn frontend_binds(text: &str) -> Result<Vec<(String, String)>, super::ParseError> {
    let mut wanted = String::new();
    let mut keep = false;
    for line in text.split_inclusive('\n') {
        let word = line.split_whitespace().next().unwrap_or_default();
        if let Some(kind) = SectionKind::from_keyword(word) {
            keep = matches!(kind, SectionKind::Frontend | SectionKind::Listen);
        }
        if keep {
            wanted.push_str(line);
        }
    }
    let parsed = super::parse_config(&wanted)?;
    Ok(view(&parsed)
        .frontends
        .into_iter()
        .flat_map(|frontend| {
            frontend
                .binds
                .into_iter()
                .map(move |bind| (frontend.name.clone(), bind.address))
        })
        .collect())
}

/// Frontends, backends and referenced files of one configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConfigView {
    pub frontends: Vec<FrontendView>,
    pub backends: Vec<BackendView>,
    /// Map and pattern files: `map*(path…)` converters, `set-map(path)`-style actions and
    /// `-f path` in ACLs, in file order (a file referenced twice appears twice).
    pub map_files: Vec<FileReference>,
    /// Certificate files: `crt`, `crt-list`, `ca-file`, `crl-file` and `ca-verify-file` on
    /// `bind`, `server`, `default-server` and `server-template` lines, in file order.
    pub certificates: Vec<FileReference>,
}

/// A `frontend` or `listen` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrontendView {
    pub name: String,
    pub line: usize,
    /// Whether the section is a `listen` section.
    pub is_listen: bool,
    /// The last `mode` line, if any.
    pub mode: Option<String>,
    pub binds: Vec<BindView>,
    /// `use_backend` rules in order.
    pub backend_rules: Vec<BackendRule>,
    /// The last `default_backend` line, if any.
    pub default_backend: Option<String>,
}

/// One `bind` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BindView {
    pub line: usize,
    /// The address as written, e.g. `:443`, `ipv4@0.0.0.0:80,:::80` or `fd@${fe}`.
    pub address: String,
    pub params: Vec<Param>,
}

/// One `use_backend` rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendRule {
    pub line: usize,
    /// The backend name, or a log-format expression such as `%[req.hdr(host),lower]`.
    pub backend: String,
    pub condition: Option<RuleCondition>,
}

/// The `if …` / `unless …` part of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleCondition {
    /// `true` for `unless`.
    pub negated: bool,
    /// The words after `if`/`unless`.
    pub words: Vec<String>,
}

/// A `backend` or `listen` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendView {
    pub name: String,
    pub line: usize,
    /// Whether the section is a `listen` section.
    pub is_listen: bool,
    /// The last `mode` line, if any.
    pub mode: Option<String>,
    /// The last `balance` line, if any.
    pub balance: Option<Balance>,
    /// Parameters of the `default-server` lines, in order.
    pub default_server_params: Vec<Param>,
    pub servers: Vec<ServerView>,
    pub server_templates: Vec<ServerTemplateView>,
}

/// A `balance` line: `balance roundrobin`, `balance hdr(host)`, `balance url_param id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Balance {
    pub line: usize,
    /// The algorithm word as written, e.g. `hdr(host)`.
    pub algorithm: String,
    /// The words after the algorithm.
    pub args: Vec<String>,
}

/// A server address split into host and port, the way HAProxy splits it: at the last colon,
/// unless the address is a UNIX socket path, an abstract namespace or a file descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// The address as written.
    pub address: String,
    /// The part before the port, with any `ipv4@`-style prefix; the whole address when it
    /// has no port.
    pub host: String,
    /// The text after the last colon (a number, a range `8000-8010`, an offset `+1`, an
    /// environment reference, or empty), if there is a colon.
    pub port: Option<String>,
}

impl Endpoint {
    fn parse(address: &str) -> Endpoint {
        const PORTLESS_PREFIXES: &[&str] = &[
            "unix@",
            "abns@",
            "abnsz@",
            "fd@",
            "sockpair@",
            "uxst@",
            "uxdg@",
        ];
        let portless = address.starts_with('/')
            || PORTLESS_PREFIXES
                .iter()
                .any(|prefix| address.starts_with(prefix));
        match address.rsplit_once(':') {
            Some((host, port)) if !portless => Endpoint {
                address: address.to_owned(),
                host: host.to_owned(),
                port: Some(port.to_owned()),
            },
            _ => Endpoint {
                address: address.to_owned(),
                host: address.to_owned(),
                port: None,
            },
        }
    }

    /// The port as a number, when it is a plain number.
    pub fn port_number(&self) -> Option<u16> {
        self.port.as_deref()?.parse().ok()
    }
}

/// One `server` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerView {
    pub line: usize,
    pub name: String,
    #[serde(flatten)]
    pub endpoint: Endpoint,
    pub params: Vec<Param>,
}

/// One `server-template` line: `server-template <prefix> <count|range> <fqdn>[:<port>] …`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerTemplateView {
    pub line: usize,
    pub prefix: String,
    /// The number of servers (`5`) or the id range (`1-5`) as written.
    pub count: String,
    #[serde(flatten)]
    pub endpoint: Endpoint,
    pub params: Vec<Param>,
}

/// A parameter of a `bind` or `server` line with the values it takes (none for a flag such
/// as `check`). A parameter the keyword tables do not know is kept as a flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Param {
    pub name: String,
    pub values: Vec<String>,
}

impl Param {
    /// The first value, e.g. `"10"` for `weight 10`.
    pub fn value(&self) -> Option<&str> {
        self.values.first().map(String::as_str)
    }
}

/// Finds a parameter by name.
pub fn find_param<'a>(params: &'a [Param], name: &str) -> Option<&'a Param> {
    params.iter().find(|param| param.name == name)
}

impl ServerView {
    /// The parameter `name`, if present.
    pub fn param(&self, name: &str) -> Option<&Param> {
        find_param(&self.params, name)
    }

    /// Whether the flag `name` (e.g. `check`, `disabled`, `backup`) is set.
    pub fn has_flag(&self, name: &str) -> bool {
        self.param(name).is_some()
    }
}

impl BindView {
    /// The parameter `name`, if present.
    pub fn param(&self, name: &str) -> Option<&Param> {
        find_param(&self.params, name)
    }
}

/// What a referenced file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    /// A map file (`map*(path)` converters, `set-map(path)`/`del-map(path)` actions).
    Map,
    /// An ACL pattern file (`-f path`, `add-acl(path)`/`del-acl(path)` actions).
    Patterns,
    /// `crt`: a certificate (PEM, possibly with its key) or a directory of them.
    Certificate,
    /// `crt-list`.
    CertificateList,
    /// `ca-file` or `ca-verify-file`.
    CaFile,
    /// `crl-file`.
    CrlFile,
}

/// A file the configuration refers to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileReference {
    /// The path as written (relative paths are resolved by HAProxy against `crt-base`,
    /// `ca-base` or its working directory, which the view does not do).
    pub path: String,
    pub kind: FileKind,
    pub line: usize,
    /// The section, as `"<keyword> <name>"` (e.g. `"frontend fe"`).
    pub section: String,
}

/// Builds the structured view of `config`.
pub fn view(config: &Config) -> ConfigView {
    let mut result = ConfigView::default();
    for section in &config.sections {
        let is_listen = section.kind == SectionKind::Listen;
        if matches!(section.kind, SectionKind::Frontend | SectionKind::Listen) {
            result.frontends.push(frontend_view(section, is_listen));
        }
        if matches!(section.kind, SectionKind::Backend | SectionKind::Listen) {
            result.backends.push(backend_view(section, is_listen));
        }
        collect_file_references(section, &mut result);
    }
    result
}

impl Config {
    /// The structured view of this configuration (see [`view`]).
    pub fn view(&self) -> ConfigView {
        view(self)
    }
}

fn section_name(section: &Section) -> String {
    section.name.clone().unwrap_or_default()
}

fn frontend_view(section: &Section, is_listen: bool) -> FrontendView {
    let mut frontend = FrontendView {
        name: section_name(section),
        line: section.line,
        is_listen,
        mode: None,
        binds: Vec::new(),
        backend_rules: Vec::new(),
        default_backend: None,
    };
    for directive in &section.directives {
        let args = directive.args();
        match directive.keyword() {
            "mode" => frontend.mode = args.first().cloned(),
            "bind" => {
                if let Some((address, params)) = args.split_first() {
                    frontend.binds.push(BindView {
                        line: directive.line,
                        address: address.clone(),
                        params: parse_params(params, bind_param),
                    });
                }
            }
            "use_backend" => {
                if let Some((backend, rest)) = args.split_first() {
                    frontend.backend_rules.push(BackendRule {
                        line: directive.line,
                        backend: backend.clone(),
                        condition: rule_condition(rest),
                    });
                }
            }
            "default_backend" => frontend.default_backend = args.first().cloned(),
            _ => {}
        }
    }
    frontend
}

fn rule_condition(words: &[String]) -> Option<RuleCondition> {
    let (first, rest) = words.split_first()?;
    let negated = match first.as_str() {
        "if" => false,
        "unless" => true,
        _ => return None,
    };
    Some(RuleCondition {
        negated,
        words: rest.to_vec(),
    })
}

fn backend_view(section: &Section, is_listen: bool) -> BackendView {
    let mut backend = BackendView {
        name: section_name(section),
        line: section.line,
        is_listen,
        mode: None,
        balance: None,
        default_server_params: Vec::new(),
        servers: Vec::new(),
        server_templates: Vec::new(),
    };
    for directive in &section.directives {
        let args = directive.args();
        match directive.keyword() {
            "mode" => backend.mode = args.first().cloned(),
            "balance" => {
                if let Some((algorithm, rest)) = args.split_first() {
                    backend.balance = Some(Balance {
                        line: directive.line,
                        algorithm: algorithm.clone(),
                        args: rest.to_vec(),
                    });
                }
            }
            "default-server" => backend
                .default_server_params
                .extend(parse_params(args, server_param)),
            "server" => {
                if let [name, address, params @ ..] = args {
                    backend.servers.push(ServerView {
                        line: directive.line,
                        name: name.clone(),
                        endpoint: Endpoint::parse(address),
                        params: parse_params(params, server_param),
                    });
                }
            }
            "server-template" => {
                if let [prefix, count, address, params @ ..] = args {
                    backend.server_templates.push(ServerTemplateView {
                        line: directive.line,
                        prefix: prefix.clone(),
                        count: count.clone(),
                        endpoint: Endpoint::parse(address),
                        params: parse_params(params, server_param),
                    });
                }
            }
            _ => {}
        }
    }
    backend
}

/// A keyword table lookup: how many values a `bind` or `server` parameter takes.
type ArityLookup = fn(&str) -> Option<ParamArity>;

/// Splits parameter words into parameters, taking as many values as the keyword table says.
/// How many values a `bind` parameter takes on any documented HAProxy line: the view reads
/// configurations of every version.
fn bind_param(word: &str) -> Option<ParamArity> {
    DOCUMENTED_LINES
        .iter()
        .find_map(|line| KeywordTables::new(*line).bind_param(word))
}

/// How many values a `server` parameter takes on any documented HAProxy line.
fn server_param(word: &str) -> Option<ParamArity> {
    DOCUMENTED_LINES
        .iter()
        .find_map(|line| KeywordTables::new(*line).server_param(word))
}

fn parse_params(words: &[String], arity_of: ArityLookup) -> Vec<Param> {
    let mut params = Vec::new();
    let mut index = 0;
    while let Some(name) = words.get(index) {
        let count = match arity_of(name) {
            Some(ParamArity::Value) => 1,
            Some(ParamArity::Values(count)) => usize::from(count),
            Some(ParamArity::Flag) | None => 0,
        };
        let end = (index + 1 + count).min(words.len());
        params.push(Param {
            name: name.clone(),
            values: words[index + 1..end].to_vec(),
        });
        index = end;
    }
    params
}

/// The parameter words of a `bind`/`server`-like line and the table that knows their arity.
fn line_params(directive: &Directive) -> Option<(&[String], ArityLookup)> {
    let args = directive.args();
    match directive.keyword() {
        "bind" => Some((args.get(1..)?, bind_param)),
        "server" => Some((args.get(2..)?, server_param)),
        "default-server" => Some((args, server_param)),
        "server-template" => Some((args.get(3..)?, server_param)),
        _ => None,
    }
}

fn collect_file_references(section: &Section, result: &mut ConfigView) {
    let label = match &section.name {
        Some(name) => format!("{} {name}", section.keyword()),
        None => section.keyword().to_owned(),
    };
    let mut reference = |path: &str, kind: FileKind, line: usize, into_maps: bool| {
        let entry = FileReference {
            path: path.to_owned(),
            kind,
            line,
            section: label.clone(),
        };
        if into_maps {
            result.map_files.push(entry);
        } else {
            result.certificates.push(entry);
        }
    };
    for directive in &section.directives {
        for word in &directive.words {
            for (kind, path) in function_file_arguments(word) {
                reference(path, kind, directive.line, true);
            }
        }
        if section.kind.is_proxy() {
            for path in pattern_file_arguments(directive) {
                reference(path, FileKind::Patterns, directive.line, true);
            }
        }
        let Some((words, arity_of)) = line_params(directive) else {
            continue;
        };
        // Most lines name no file: skip splitting their parameters.
        if !words.iter().any(|word| certificate_kind(word).is_some()) {
            continue;
        }
        for param in parse_params(words, arity_of) {
            if let (Some(kind), Some(path)) = (certificate_kind(&param.name), param.value()) {
                reference(path, kind, directive.line, false);
            }
        }
    }
}

/// The kind of file the `bind`/`server` parameter `name` refers to, if it is one.
fn certificate_kind(name: &str) -> Option<FileKind> {
    match name {
        "crt" => Some(FileKind::Certificate),
        "crt-list" => Some(FileKind::CertificateList),
        "ca-file" | "ca-verify-file" => Some(FileKind::CaFile),
        "crl-file" => Some(FileKind::CrlFile),
        _ => None,
    }
}

/// The `-f <path>` arguments of an `acl` line, or of the condition after `if`/`unless`.
fn pattern_file_arguments(directive: &Directive) -> Vec<&str> {
    let words = directive.words.as_slice();
    let start = if directive.keyword() == "acl" {
        Some(2)
    } else {
        words
            .iter()
            .position(|word| word == "if" || word == "unless")
            .map(|at| at + 1)
    };
    let Some(start) = start else {
        return Vec::new();
    };
    words
        .get(start..)
        .unwrap_or(&[])
        .windows(2)
        .filter(|pair| pair[0] == "-f")
        .map(|pair| pair[1].as_str())
        .collect()
}

/// The file arguments of `map*(...)` converters and of `set-map(...)`, `del-map(...)`,
/// `add-acl(...)`, `del-acl(...)` actions found anywhere in `word`.
fn function_file_arguments(word: &str) -> Vec<(FileKind, &str)> {
    let mut found = Vec::new();
    let bytes = word.as_bytes();
    let mut search_from = 0;
    while let Some(open) = word[search_from..].find('(').map(|at| at + search_from) {
        search_from = open + 1;
        // By bytes: every byte of a non-ASCII character ends the name, so the name starts
        // after the last such byte, on a character boundary.
        let name_start = bytes[..open]
            .iter()
            .rposition(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')))
            .map_or(0, |at| at + 1);
        let name = &word[name_start..open];
        let kind = if is_map_converter(name) || name == "set-map" || name == "del-map" {
            FileKind::Map
        } else if name == "add-acl" || name == "del-acl" {
            FileKind::Patterns
        } else {
            continue;
        };
        let end = bytes[open + 1..]
            .iter()
            .position(|&b| b == b',' || b == b')')
            .map_or(word.len(), |at| open + 1 + at);
        let path = word[open + 1..end].trim();
        if !path.is_empty() {
            found.push((kind, path));
        }
    }
    found
}

/// `map`, `map_<match>` and `map_<match>_<output>` (e.g. `map_beg`, `map_str_int`).
fn is_map_converter(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("map") else {
        return false;
    };
    rest.is_empty()
        || (rest.starts_with('_')
            && rest.split('_').skip(1).count() <= 2
            && rest
                .split('_')
                .skip(1)
                .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase())))
}

#[cfg(test)]
mod tests;
