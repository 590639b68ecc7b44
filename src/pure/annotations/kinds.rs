//! The kinds of value an annotation accepts, and the checked form each hands a template.
//!
//! Every kind admits only what it can place in `haproxy.cfg` safely. Kinds that end in a
//! quoted HAProxy argument (`text`, `headers`, `url`) escape it for a double-quoted
//! log-format string: `\` `"` and `$` get a backslash, `%` is doubled, so a value can neither
//! end the argument, expand an environment variable nor run a sample fetch; control
//! characters are refused outright. The others admit no character that needs quoting.

use std::net::IpAddr;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

/// Why a value or an `accepts` text was refused, in words that follow "is".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindError(pub String);

fn refuse<T>(message: impl Into<String>) -> Result<T, KindError> {
    Err(KindError(message.into()))
}

/// What an annotation accepts (the `accepts` field of its definition).
#[derive(Debug, Clone, PartialEq)]
pub enum ValueKind {
    /// `true` or `false` → a boolean.
    Bool,
    /// An HAProxy time, digits with an optional unit (us, ms, s, m, h, d) → the text.
    Duration,
    /// Whole seconds, as ingress-nginx writes timeouts → an HAProxy time (`30s`).
    Seconds,
    /// A whole number within bounds → a number.
    Integer { min: i64, max: i64 },
    /// A size as nginx writes it (`8m`, `512k`, `1g`, plain bytes) → bytes, a number.
    Size,
    /// 301, 302, 303, 307 or 308 → a number.
    RedirectCode,
    /// An HTTP status from 200 to 599 → a number.
    StatusCode,
    /// Comma-separated statuses among a fixed list → the distinct ones, numbers in order
    /// of first mention.
    Statuses(Vec<u16>),
    /// One of a fixed list of words → the word.
    OneOf(Vec<String>),
    /// Comma-separated IPv4/IPv6 addresses and CIDRs → the same, space-separated.
    Addresses,
    /// Lines of `Name value` → a list of `{name, value}`, the value escaped for quotes.
    Headers,
    /// One HTTP header name → the name.
    HeaderName,
    /// Printable text → escaped for a double-quoted argument.
    Text,
    /// A DNS name with an optional port → lower-cased.
    Host,
    /// An absolute URL path → the path, `%` doubled for a log-format argument.
    Path,
    /// An http(s) URL or an absolute path → escaped for a double-quoted argument.
    Url,
    /// A Kubernetes object name of the object's own namespace → the name.
    SecretName,
    /// Comma-separated origins (`*` or scheme://host[:port]) → a list of origins.
    Origins,
    /// Comma-separated HTTP tokens (methods, header names) → the same, joined by ", ".
    Tokens,
    /// An HAProxy `balance` algorithm → the algorithm.
    Balance,
    /// `[<regex> ]<replacement>` (haproxy.org/path-rewrite) → `{regex, replacement}`.
    PathRewrite,
    /// An ingress-nginx `upstream-hash-by` variable → an HAProxy `balance` algorithm.
    UpstreamHash,
    /// An ingress-nginx rewrite target: an absolute path that may name the groups of a
    /// regular-expression path (`$1` … `$9`) → `{target, captures}`: the target as an HAProxy
    /// log-format replacement (`\1` … `\9`, `%` doubled) and whether it names a group.
    RewriteTarget,
    /// Configuration lines for the object's own section → the lines.
    ConfigLines,
    /// Request samples HAProxy captures (headers, cookies, query parameters and a few
    /// request fetches, with simple converters), one per line → the list.
    Samples,
    /// A value that the regular expression matches whole → the value.
    Pattern(WholeMatch),
}

/// A regular expression anchored at both ends; equal when their texts are.
#[derive(Debug, Clone)]
pub struct WholeMatch(Regex);

impl PartialEq for WholeMatch {
    fn eq(&self, other: &WholeMatch) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// An HTTP token (RFC 9110): header names, methods.
static TOKEN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$").expect("a valid constant regex"));
static DNS_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$",
    )
    .expect("a valid constant regex")
});
static OBJECT_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$").expect("a valid constant regex")
});
static PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/[A-Za-z0-9._~!&'()*+,;=:@%/-]*$").expect("a valid constant regex")
});
static BALANCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(roundrobin|static-rr|leastconn|first|source|random|random\([0-9]{1,3}\)|uri|uri whole|url_param [A-Za-z0-9_.-]+|hdr\([A-Za-z0-9_-]+\)|rdp-cookie(\([A-Za-z0-9_-]+\))?)$",
    )
    .expect("a valid constant regex")
});
/// A request sample HAProxy always accepts in `http-request capture`: a fetch of the request
/// with a plain name argument, or one without argument, then up to four converters that
/// take none. Nothing else (no spaces, quotes or `%`) can reach the capture line.
static SAMPLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^((req\.)?(hdr|fhdr|cook)\([A-Za-z0-9_.-]{1,64}\)|(url_param|urlp)\([A-Za-z0-9_.-]{1,64}\)|path|url|query|method|base|src|ssl_fc_sni|req\.ver)(,(lower|upper|base64|hex|url_dec)){0,4}$",
    )
    .expect("a valid constant regex")
});
/// How many samples one annotation may capture.
const MAX_SAMPLES: usize = 16;
static DURATION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[0-9]{1,9}(us|ms|s|m|h|d)?$").expect("a valid constant regex"));
/// Words that open a section of haproxy.cfg: a snippet line may not start one.
const SECTION_KEYWORDS: &[&str] = &[
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "userlist",
    "peers",
    "resolvers",
    "mailers",
    "program",
    "http-errors",
    "ring",
    "cache",
    "fcgi-app",
    "crt-store",
    "traces",
];

impl ValueKind {
    /// The kind an `accepts` text names: a kind name, `integer MIN..MAX`, `one-of a|b|c`
    /// or `pattern REGEX`.
    pub fn parse(accepts: &str) -> Result<ValueKind, KindError> {
        let accepts = accepts.trim();
        let (word, rest) = accepts
            .split_once(' ')
            .map_or((accepts, ""), |(w, r)| (w, r.trim()));
        let kind = match word {
            "bool" => ValueKind::Bool,
            "duration" => ValueKind::Duration,
            "seconds" => ValueKind::Seconds,
            "integer" if rest.is_empty() => ValueKind::Integer {
                min: 0,
                max: i64::from(i32::MAX),
            },
            "integer" => {
                let bounds = rest.split_once("..").and_then(|(min, max)| {
                    Some((min.trim().parse().ok()?, max.trim().parse().ok()?))
                });
                match bounds {
                    Some((min, max)) if min <= max => ValueKind::Integer { min, max },
                    _ => return refuse(format!("'{rest}' is not bounds such as 1..100")),
                }
            }
            "size" => ValueKind::Size,
            "redirect-code" => ValueKind::RedirectCode,
            "status-code" => ValueKind::StatusCode,
            "statuses" => {
                let codes: Option<Vec<u16>> = rest
                    .split('|')
                    .map(|code| code.trim().parse().ok().filter(|c| (100..=599).contains(c)))
                    .collect();
                match codes {
                    Some(codes) if !codes.is_empty() => ValueKind::Statuses(codes),
                    _ => return refuse(format!("'{rest}' is not HTTP statuses separated by '|'")),
                }
            }
            "one-of" => {
                let words: Vec<String> = rest.split('|').map(|w| w.trim().to_string()).collect();
                if words.iter().any(|w| w.is_empty() || !TOKEN.is_match(w)) {
                    return refuse(format!("'{rest}' is not words separated by '|'"));
                }
                ValueKind::OneOf(words)
            }
            "addresses" => ValueKind::Addresses,
            "headers" => ValueKind::Headers,
            "header-name" => ValueKind::HeaderName,
            "text" => ValueKind::Text,
            "host" => ValueKind::Host,
            "path" => ValueKind::Path,
            "url" => ValueKind::Url,
            "secret-name" => ValueKind::SecretName,
            "origins" => ValueKind::Origins,
            "tokens" => ValueKind::Tokens,
            "balance" => ValueKind::Balance,
            "path-rewrite" => ValueKind::PathRewrite,
            "upstream-hash" => ValueKind::UpstreamHash,
            "rewrite-target" => ValueKind::RewriteTarget,
            "config-lines" => ValueKind::ConfigLines,
            "samples" => ValueKind::Samples,
            "pattern" => match Regex::new(&format!("^(?:{rest})$")) {
                Ok(regex) if !rest.is_empty() => ValueKind::Pattern(WholeMatch(regex)),
                _ => return refuse(format!("'{rest}' is not a regular expression")),
            },
            _ => {
                return refuse(format!(
                    "'{accepts}' names no kind of value (bool, duration, seconds, integer [MIN..MAX], size, \
                     redirect-code, status-code, statuses A|B, one-of A|B, addresses, headers, header-name, text, host, path, \
                     url, secret-name, origins, tokens, balance, path-rewrite, upstream-hash, rewrite-target, \
                     config-lines, samples, pattern REGEX)"
                ));
            }
        };
        Ok(kind)
    }

    /// How the reference describes what the kind accepts.
    pub fn describe(&self) -> String {
        match self {
            ValueKind::Bool => "`true` or `false`".into(),
            ValueKind::Duration => "an HAProxy time: digits and a unit (`us`, `ms`, `s`, `m`, `h`, `d`; milliseconds without one)".into(),
            ValueKind::Seconds => "whole seconds".into(),
            ValueKind::Integer { min, max } => format!("a whole number from {min} to {max}"),
            ValueKind::Size => "a size in bytes, optionally with `k`, `m` or `g`; `0` for no limit".into(),
            ValueKind::RedirectCode => "301, 302, 303, 307 or 308".into(),
            ValueKind::StatusCode => "an HTTP status from 200 to 599".into(),
            ValueKind::Statuses(codes) => format!(
                "comma-separated statuses among {}",
                codes
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ValueKind::OneOf(words) => words
                .iter()
                .map(|w| format!("`{w}`"))
                .collect::<Vec<_>>()
                .join(", "),
            ValueKind::Addresses => "IPv4/IPv6 addresses and CIDRs, comma-separated".into(),
            ValueKind::Headers => "one `Name value` per line".into(),
            ValueKind::HeaderName => "an HTTP header name".into(),
            ValueKind::Text => "printable text".into(),
            ValueKind::Host => "a DNS name, optionally with `:port`".into(),
            ValueKind::Path => "an absolute URL path".into(),
            ValueKind::Url => "an `http://` or `https://` URL, or an absolute path".into(),
            ValueKind::SecretName => "the name of a Secret in the Ingress's namespace".into(),
            ValueKind::Origins => "`*`, or origins (`https://host[:port]`), comma-separated".into(),
            ValueKind::Tokens => "HTTP tokens (methods or header names), comma-separated".into(),
            ValueKind::Balance => "`roundrobin`, `static-rr`, `leastconn`, `first`, `source`, `random`, `random(N)`, `uri`, `uri whole`, `url_param NAME`, `hdr(NAME)`, `rdp-cookie[(NAME)]`".into(),
            ValueKind::PathRewrite => "`REPLACEMENT` (the whole path) or `REGEX REPLACEMENT` (`\\1`… for groups)".into(),
            ValueKind::UpstreamHash => "`$request_uri`, `$uri`, `$remote_addr`, `$binary_remote_addr`, `$host`, `$http_NAME`, `$arg_NAME` or `$cookie_NAME`".into(),
            ValueKind::RewriteTarget => "an absolute URL path, which may name the groups of a regular-expression path as `$1` … `$9`".into(),
            ValueKind::ConfigLines => "HAProxy configuration lines (no section keyword)".into(),
            ValueKind::Samples => "request samples, one per line (up to 16): `hdr(NAME)`, `req.hdr(NAME)`, `req.fhdr(NAME)`, `cook(NAME)`, `req.cook(NAME)`, `url_param(NAME)`, `urlp(NAME)`, `path`, `url`, `query`, `method`, `base`, `src`, `ssl_fc_sni` or `req.ver`, each optionally followed by converters among `,lower`, `,upper`, `,base64`, `,hex`, `,url_dec`".into(),
            ValueKind::Pattern(regex) => {
                let text = regex.0.as_str();
                let inner = text
                    .strip_prefix("^(?:")
                    .and_then(|t| t.strip_suffix(")$"))
                    .unwrap_or(text);
                format!("text matching `{inner}`")
            }
        }
    }

    /// The checked form of `raw`, or why it is refused.
    pub fn check(&self, raw: &str) -> Result<Value, KindError> {
        let value = raw.trim();
        if !matches!(
            self,
            ValueKind::Headers | ValueKind::ConfigLines | ValueKind::Samples
        ) && value.chars().any(char::is_control)
        {
            return refuse("text with control characters");
        }
        match self {
            ValueKind::Bool => match value {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => refuse("not true or false"),
            },
            ValueKind::Duration => {
                if DURATION.is_match(value) {
                    Ok(json!(value))
                } else {
                    refuse("not a duration such as 30s or 500ms")
                }
            }
            ValueKind::Seconds => match value.parse::<u32>() {
                Ok(seconds) if value.bytes().all(|b| b.is_ascii_digit()) => {
                    Ok(json!(format!("{seconds}s")))
                }
                _ => refuse("not a whole number of seconds"),
            },
            ValueKind::Integer { min, max } => match value.parse::<i64>() {
                Ok(n) if (*min..=*max).contains(&n) => Ok(json!(n)),
                _ => refuse(format!("not a whole number from {min} to {max}")),
            },
            ValueKind::Size => size_bytes(value).map(|bytes| json!(bytes)),
            ValueKind::RedirectCode => match value {
                "301" | "302" | "303" | "307" | "308" => {
                    Ok(json!(value.parse::<u16>().unwrap_or(302)))
                }
                _ => refuse("not 301, 302, 303, 307 or 308"),
            },
            ValueKind::StatusCode => match value.parse::<u16>() {
                Ok(code) if (200..=599).contains(&code) => Ok(json!(code)),
                _ => refuse("not an HTTP status from 200 to 599"),
            },
            ValueKind::Statuses(allowed) => {
                let mut codes: Vec<u16> = Vec::new();
                for word in value.split(',').map(str::trim) {
                    match word.parse::<u16>() {
                        Ok(code) if allowed.contains(&code) && word.len() == 3 => {
                            if !codes.contains(&code) {
                                codes.push(code);
                            }
                        }
                        _ => {
                            return refuse(format!(
                                "not comma-separated statuses among {} ('{}' is not one)",
                                allowed
                                    .iter()
                                    .map(u16::to_string)
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                word.escape_debug()
                            ));
                        }
                    }
                }
                Ok(json!(codes))
            }
            ValueKind::OneOf(words) => {
                if words.iter().any(|w| w == value) {
                    Ok(json!(value))
                } else {
                    refuse(format!("not one of {}", words.join(", ")))
                }
            }
            ValueKind::Addresses => addresses(value).map(|list| json!(list.join(" "))),
            ValueKind::Headers => headers(raw),
            ValueKind::HeaderName => {
                if TOKEN.is_match(value) {
                    Ok(json!(value))
                } else {
                    refuse("not an HTTP header name")
                }
            }
            ValueKind::Text => printable(value).map(|text| json!(quoted(text))),
            ValueKind::Host => host(value).map(|host| json!(host)),
            ValueKind::Path => {
                if PATH.is_match(value) {
                    // Paths end in log-format arguments (set-path, redirect location).
                    Ok(json!(value.replace('%', "%%")))
                } else {
                    refuse("not an absolute path without spaces or quotes")
                }
            }
            ValueKind::Url => url(value).map(|url| json!(quoted(&url))),
            ValueKind::SecretName => {
                if OBJECT_NAME.is_match(value) {
                    Ok(json!(value))
                } else {
                    refuse("not the name of a Secret in the Ingress's namespace")
                }
            }
            ValueKind::Origins => origins(value).map(Value::from),
            ValueKind::Tokens => {
                let tokens: Vec<&str> = value.split(',').map(str::trim).collect();
                if tokens.iter().all(|t| TOKEN.is_match(t)) {
                    Ok(json!(tokens.join(", ")))
                } else {
                    refuse("not HTTP tokens separated by commas")
                }
            }
            ValueKind::Balance => {
                if BALANCE.is_match(value) {
                    Ok(json!(value))
                } else {
                    refuse("not a supported load-balancing algorithm")
                }
            }
            ValueKind::PathRewrite => path_rewrite(value),
            ValueKind::UpstreamHash => upstream_hash(value).map(|b| json!(b)),
            ValueKind::RewriteTarget => rewrite_target(value),
            ValueKind::ConfigLines => config_lines(raw).map(|lines| json!(lines)),
            ValueKind::Samples => samples(raw).map(Value::from),
            ValueKind::Pattern(regex) => {
                if regex.0.is_match(value) {
                    Ok(json!(value))
                } else {
                    refuse(format!("not {}", self.describe()))
                }
            }
        }
    }
}

/// `value` escaped for a double-quoted HAProxy log-format argument (quotes not included).
pub fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' | '"' | '$' => {
                out.push('\\');
                out.push(c);
            }
            '%' => out.push_str("%%"),
            _ => out.push(c),
        }
    }
    out
}

fn printable(value: &str) -> Result<&str, KindError> {
    if value.is_empty() {
        refuse("empty")
    } else if value.chars().all(|c| c == ' ' || c.is_ascii_graphic()) {
        Ok(value)
    } else {
        refuse("not printable ASCII text")
    }
}

fn size_bytes(value: &str) -> Result<u64, KindError> {
    let lower = value.to_ascii_lowercase();
    let (digits, unit) = match lower.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => lower.split_at(at),
        None => (lower.as_str(), ""),
    };
    let factor: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return refuse("not a size such as 8m, 512k or 1g"),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .filter(|n| *n <= i64::MAX as u64)
        .map_or_else(|| refuse("not a size such as 8m, 512k or 1g"), Ok)
}

fn addresses(value: &str) -> Result<Vec<String>, KindError> {
    let mut list = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (address, prefix) = entry
            .split_once('/')
            .map_or((entry, None), |(a, p)| (a, Some(p)));
        let Ok(ip) = address.parse::<IpAddr>() else {
            return refuse(format!("not a list of IP addresses or CIDRs ('{entry}')"));
        };
        let widest = if ip.is_ipv4() { 32 } else { 128 };
        if let Some(prefix) = prefix
            && !prefix.parse::<u8>().is_ok_and(|p| p <= widest)
        {
            return refuse(format!("not a list of IP addresses or CIDRs ('{entry}')"));
        }
        list.push(entry.to_string());
    }
    if list.is_empty() {
        return refuse("an empty list of addresses");
    }
    Ok(list)
}

/// An absolute path whose `$` only ever names a group (`$1` … `$9`).
static REWRITE_TARGET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/([A-Za-z0-9._~!&'()*+,;=:@%/-]|\$[1-9])*$").expect("a valid constant regex")
});
static GROUP: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$([1-9])").expect("a valid constant regex"));

fn rewrite_target(value: &str) -> Result<Value, KindError> {
    if !REWRITE_TARGET.is_match(value) {
        return refuse(
            "not an absolute path without spaces or quotes whose `$` only names a group ($1 … $9)",
        );
    }
    let escaped = value.replace('%', "%%");
    Ok(json!({
        "target": GROUP.replace_all(&escaped, r"\$1").into_owned(),
        "captures": GROUP.is_match(value),
    }))
}

fn samples(raw: &str) -> Result<Vec<String>, KindError> {
    let list: Vec<String> = raw
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(bad) = list.iter().find(|sample| !SAMPLE.is_match(sample)) {
        return refuse(format!(
            "not request samples one per line ('{}' is not a header, cookie, query parameter or request fetch with converters haptor captures)",
            bad.escape_debug()
        ));
    }
    match list.len() {
        0 => refuse("no request sample"),
        n if n > MAX_SAMPLES => refuse(format!(
            "{n} request samples, more than the {MAX_SAMPLES} one annotation may capture"
        )),
        _ => Ok(list),
    }
}

fn headers(raw: &str) -> Result<Value, KindError> {
    let mut list = Vec::new();
    for line in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once([' ', '\t'])
            .map_or((line, ""), |(n, v)| (n, v.trim()));
        if !TOKEN.is_match(name) {
            return refuse(format!(
                "not `Name value` lines ('{name}' is not a header name)"
            ));
        }
        let value = if value.is_empty() {
            ""
        } else {
            printable(value).map_err(|_| {
                KindError(format!(
                    "not `Name value` lines (the value of {name} is not printable ASCII)"
                ))
            })?
        };
        list.push(json!({"name": name, "value": quoted(value)}));
    }
    if list.is_empty() {
        return refuse("no `Name value` line");
    }
    Ok(Value::Array(list))
}

fn host(value: &str) -> Result<String, KindError> {
    let lower = value.to_ascii_lowercase();
    let (name, port) = lower
        .rsplit_once(':')
        .map_or((lower.as_str(), None), |(n, p)| (n, Some(p)));
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    if DNS_NAME.is_match(name) && !name.starts_with("*.") && port_ok {
        Ok(lower)
    } else {
        refuse("not a DNS name with an optional :port")
    }
}

fn url(value: &str) -> Result<String, KindError> {
    if value.starts_with('/') {
        return if value.chars().all(|c| c.is_ascii_graphic()) {
            Ok(value.to_string())
        } else {
            refuse("not a URL or absolute path without spaces")
        };
    }
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    let Some(rest) = rest else {
        return refuse("not an http:// or https:// URL or an absolute path");
    };
    let (authority, path) = rest
        .find(['/', '?'])
        .map_or((rest, ""), |at| rest.split_at(at));
    if host(authority).is_err() || !path.chars().all(|c| c.is_ascii_graphic()) {
        return refuse("not an http:// or https:// URL or an absolute path");
    }
    Ok(value.to_string())
}

fn origins(value: &str) -> Result<Vec<String>, KindError> {
    let mut list = Vec::new();
    for origin in value.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let valid = origin == "*"
            || origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"))
                .is_some_and(|rest| host(rest).is_ok());
        if !valid {
            return refuse(format!(
                "not a list of origins ('{origin}' is not * or scheme://host[:port])"
            ));
        }
        list.push(origin.to_ascii_lowercase());
    }
    if list.is_empty() {
        return refuse("an empty list of origins");
    }
    Ok(list)
}

/// Both parts end in single-quoted HAProxy arguments, where nothing is interpreted: the
/// regex reaches PCRE as written, and the replacement (a log-format string) has its `%`
/// doubled so that it cannot run a sample fetch.
fn path_rewrite(value: &str) -> Result<Value, KindError> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    let (regex, replacement) = match parts.as_slice() {
        [replacement] => ("^.*$", *replacement),
        [regex, replacement] => (*regex, *replacement),
        _ => return refuse("not `REPLACEMENT` or `REGEX REPLACEMENT`"),
    };
    if regex.contains('\'') || Regex::new(regex).is_err() {
        return refuse(format!("not a usable regular expression ('{regex}')"));
    }
    if !replacement.starts_with('/')
        || !replacement
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '\'' && c != '"')
    {
        return refuse(format!("not a replacement path ('{replacement}')"));
    }
    Ok(json!({"regex": regex, "replacement": replacement.replace('%', "%%")}))
}

fn upstream_hash(value: &str) -> Result<String, KindError> {
    let name_ok = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let balance = match value {
        "$request_uri" => "uri whole".to_string(),
        "$uri" => "uri".to_string(),
        "$remote_addr" | "$binary_remote_addr" => "source".to_string(),
        "$host" => "hdr(host)".to_string(),
        _ => {
            if let Some(name) = value.strip_prefix("$http_").filter(|n| name_ok(n)) {
                format!("hdr({})", name.replace('_', "-"))
            } else if let Some(name) = value.strip_prefix("$arg_").filter(|n| name_ok(n)) {
                format!("url_param {name}")
            } else if let Some(name) = value.strip_prefix("$cookie_").filter(|n| name_ok(n)) {
                format!("hdr(cookie) # {name}")
            } else {
                return refuse(
                    "not one nginx variable haptor can hash on ($request_uri, $uri, $remote_addr, $host, \
                     $http_NAME, $arg_NAME, $cookie_NAME)",
                );
            }
        }
    };
    if let Some(cookie) = balance.strip_prefix("hdr(cookie) # ") {
        // HAProxy hashes a cookie's value through rdp-cookie only for RDP; hash the
        // request's whole Cookie header instead would mix unrelated cookies, so refuse.
        return refuse(format!(
            "$cookie_{cookie}: hashing on one cookie is not something HAProxy's balance can do; use $http_NAME or haproxy.org/cookie-persistence"
        ));
    }
    Ok(balance)
}

fn config_lines(raw: &str) -> Result<String, KindError> {
    let mut lines = Vec::new();
    for line in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.chars().any(|c| c.is_control() && c != '\t') {
            return refuse("configuration lines with control characters");
        }
        let first = line.split_whitespace().next().unwrap_or_default();
        if SECTION_KEYWORDS.contains(&first) {
            return refuse(format!(
                "configuration lines that open a section ('{first}'); a snippet stays in its own section"
            ));
        }
        lines.push(line);
    }
    if lines.is_empty() {
        return refuse("no configuration line");
    }
    // The template places the first line; the others get the same two-space indent.
    Ok(lines.join("\n  "))
}
