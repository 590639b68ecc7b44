//! The stateless template helpers: collections (`sort_by`, `group_by`, `nested`, `filter`,
//! `pluck`, `sum`, `items`, `join`, `keys`, `first`, `last`, `dig`, `default`/`fallback`,
//! `seq`, and the block `sort_lines`), Kubernetes matching (`hostname_intersection`,
//! `selector_matches`), strings (`lower`, `upper`,
//! `replace`, `trim`, `contains`, `starts_with`, `ends_with`, `split`, `concat`,
//! `regex_match`, `regex_replace`, `is_regex`, `regex_escape`, `glob_match`, `sanitize`,
//! `indent`), encodings
//! (`b64decode`, `b64encode`, `to_json`, `to_int`), arithmetic (`add`, `sub`, `mul`, `div`,
//! `mod`, `zero_pad`), versions (`version_at_least haproxy.version "3.0"`) and `fail`. They are registered once per [`TemplateSet`](super::TemplateSet).
//! handlebars' own `eq`, `ne`, `lt`, `lte`, `gt`, `gte`, `and`, `or`, `not` and `len` are
//! used as they are.
//!
//! Every helper returns a value (so it composes as a subexpression) and reports misuse as a
//! [`HelperFailure`] whose message names the helper and the argument.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine;
use handlebars::{
    Context, Handlebars, Helper, HelperDef, RenderContext, RenderError, RenderErrorReason,
    ScopedJson,
};
use regex::Regex;
use serde_json::{Map, Number, Value};

/// Why a helper refused to produce a value. Carried through handlebars as a nested error
/// and turned into a [`TemplateError`](super::TemplateError) with the template position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HelperFailure {
    /// Misuse: wrong argument types, unknown store, bad regex, ...
    #[error("{0}")]
    Misuse(String),
    /// The template called `fail`; the text is the author's, unchanged.
    #[error("{0}")]
    Fail(String),
    /// The render ran past its time limit.
    #[error("render time limit exceeded")]
    TimeLimit,
}

impl From<HelperFailure> for RenderError {
    fn from(failure: HelperFailure) -> RenderError {
        RenderErrorReason::NestedError(Box::new(failure)).into()
    }
}

pub(crate) fn misuse(message: impl Into<String>) -> HelperFailure {
    HelperFailure::Misuse(message.into())
}

/// Typed access to one helper call's arguments.
pub(crate) struct Args<'h, 'rc> {
    pub name: &'static str,
    pub helper: &'h Helper<'rc>,
}

impl<'h, 'rc> Args<'h, 'rc> {
    pub fn count(&self) -> usize {
        self.helper.params().len()
    }

    /// Argument `index` (0-based); an error when it was not given or names an undefined
    /// variable.
    pub fn value(&self, index: usize) -> Result<&'h Value, HelperFailure> {
        let param = self.helper.param(index).ok_or_else(|| {
            misuse(format!(
                "{} needs at least {} argument(s)",
                self.name,
                index + 1
            ))
        })?;
        if param.is_value_missing() {
            let what = param
                .relative_path()
                .map(|p| format!(" (`{p}`)"))
                .unwrap_or_default();
            return Err(misuse(format!(
                "argument {} of {}{what} is not defined",
                index + 1,
                self.name
            )));
        }
        Ok(param.value())
    }

    /// Argument `index` if given, defined and not null.
    pub fn optional(&self, index: usize) -> Option<&'h Value> {
        self.helper
            .param(index)
            .filter(|p| !p.is_value_missing())
            .map(|p| p.value())
            .filter(|v| !v.is_null())
    }

    /// Argument `index` as text: strings as they are, numbers and booleans printed, null as
    /// the empty string.
    pub fn text(&self, index: usize) -> Result<Cow<'h, str>, HelperFailure> {
        let value = self.value(index)?;
        as_text(value).ok_or_else(|| {
            misuse(format!(
                "argument {} of {} must be text, not {}",
                index + 1,
                self.name,
                kind_of(value)
            ))
        })
    }

    pub fn int(&self, index: usize) -> Result<i64, HelperFailure> {
        let value = self.value(index)?;
        as_int(value).ok_or_else(|| {
            misuse(format!(
                "argument {} of {} must be an integer, not {}",
                index + 1,
                self.name,
                describe(value)
            ))
        })
    }

    /// Argument `index` as a list; null counts as the empty list.
    pub fn list(&self, index: usize) -> Result<&'h [Value], HelperFailure> {
        match self.value(index)? {
            Value::Array(items) => Ok(items),
            Value::Null => Ok(&[]),
            other => Err(misuse(format!(
                "argument {} of {} must be a list, not {}",
                index + 1,
                self.name,
                kind_of(other)
            ))),
        }
    }

    pub fn hash_bool(&self, key: &str) -> bool {
        self.helper
            .hash_get(key)
            .is_some_and(|v| v.value().as_bool().unwrap_or(false))
    }
}

pub(crate) fn as_text(value: &Value) -> Option<Cow<'_, str>> {
    match value {
        Value::String(text) => Some(Cow::Borrowed(text)),
        Value::Number(n) => Some(Cow::Owned(n.to_string())),
        Value::Bool(b) => Some(Cow::Owned(b.to_string())),
        Value::Null => Some(Cow::Borrowed("")),
        Value::Array(_) | Value::Object(_) => None,
    }
}

fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(text) => format!("'{text}'"),
        Value::Number(n) => n.to_string(),
        other => kind_of(other).to_string(),
    }
}

/// A helper defined by a plain function over its arguments.
struct FnHelper {
    name: &'static str,
    run: fn(&Args<'_, '_>) -> Result<Value, HelperFailure>,
}

impl HelperDef for FnHelper {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut RenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let args = Args {
            name: self.name,
            helper,
        };
        Ok(ScopedJson::Derived((self.run)(&args)?))
    }
}

/// `regex_match text pattern` and `regex_replace text pattern replacement`, with compiled
/// patterns cached across renders (patterns are almost always literals in templates).
struct RegexHelper {
    name: &'static str,
    replace: bool,
    cache: Arc<Mutex<HashMap<String, Arc<Regex>>>>,
}

/// Enough for every literal pattern of a large template set; a runaway set of dynamic
/// patterns just resets the cache.
const REGEX_CACHE_LIMIT: usize = 512;

impl RegexHelper {
    fn compiled(&self, pattern: &str) -> Result<Arc<Regex>, HelperFailure> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = cache.get(pattern) {
            return Ok(Arc::clone(found));
        }
        let regex = Regex::new(pattern).map_err(|err| {
            misuse(format!(
                "{}: pattern '{pattern}' is invalid: {err}",
                self.name
            ))
        })?;
        if cache.len() >= REGEX_CACHE_LIMIT {
            cache.clear();
        }
        let regex = Arc::new(regex);
        cache.insert(pattern.to_string(), Arc::clone(&regex));
        Ok(regex)
    }
}

impl HelperDef for RegexHelper {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut RenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let args = Args {
            name: self.name,
            helper,
        };
        let text = args.text(0)?;
        let regex = self.compiled(&args.text(1)?)?;
        let result = if self.replace {
            Value::String(
                regex
                    .replace_all(&text, args.text(2)?.as_ref())
                    .into_owned(),
            )
        } else {
            Value::Bool(regex.is_match(&text))
        };
        Ok(ScopedJson::Derived(result))
    }
}

/// Names of the helpers handlebars itself provides and haptor relies on.
pub(crate) const BUILTIN_HELPERS: &[&str] = &[
    "if", "unless", "each", "with", "lookup", "raw", "log", "eq", "ne", "gt", "gte", "lt", "lte",
    "and", "or", "not", "len",
];

type HelperFn = fn(&Args<'_, '_>) -> Result<Value, HelperFailure>;

const FN_HELPERS: &[(&str, HelperFn)] = &[
    ("sort_by", sort_by),
    ("group_by", group_by),
    ("nested", nested),
    ("items", items),
    ("sum", sum),
    ("filter", filter),
    ("pluck", pluck),
    ("zero_pad", zero_pad),
    ("hostname_intersection", hostname_intersection),
    ("selector_matches", selector_matches),
    ("join", join),
    ("keys", keys),
    ("first", first),
    ("last", last),
    ("default", default),
    ("fallback", default),
    ("choose", choose),
    ("dig", dig),
    ("seq", seq),
    ("lower", |a| Ok(Value::String(a.text(0)?.to_lowercase()))),
    ("upper", |a| Ok(Value::String(a.text(0)?.to_uppercase()))),
    ("trim", |a| Ok(Value::String(a.text(0)?.trim().to_string()))),
    ("replace", |a| {
        Ok(Value::String(
            a.text(0)?.replace(a.text(1)?.as_ref(), a.text(2)?.as_ref()),
        ))
    }),
    ("contains", contains),
    ("is_regex", is_regex),
    ("regex_escape", |a| {
        Ok(Value::String(regex::escape(&a.text(0)?)))
    }),
    ("starts_with", |a| {
        Ok(Value::Bool(a.text(0)?.starts_with(a.text(1)?.as_ref())))
    }),
    ("ends_with", |a| {
        Ok(Value::Bool(a.text(0)?.ends_with(a.text(1)?.as_ref())))
    }),
    ("split", split),
    ("concat", concat),
    ("glob_match", |a| {
        Ok(Value::Bool(glob_match(&a.text(1)?, &a.text(0)?)))
    }),
    ("sanitize", |a| Ok(Value::String(sanitize(&a.text(0)?)))),
    ("indent", indent),
    ("b64decode", b64decode),
    ("b64encode", |a| {
        Ok(Value::String(
            base64::engine::general_purpose::STANDARD.encode(a.text(0)?.as_bytes()),
        ))
    }),
    ("to_json", to_json),
    ("to_int", |a| Ok(Value::from(a.int(0)?))),
    ("version_at_least", version_at_least),
    ("add", |a| arithmetic(a, i64::checked_add, |x, y| x + y)),
    ("sub", |a| arithmetic(a, i64::checked_sub, |x, y| x - y)),
    ("mul", |a| arithmetic(a, i64::checked_mul, |x, y| x * y)),
    ("div", |a| arithmetic(a, i64::checked_div, |x, y| x / y)),
    ("mod", |a| arithmetic(a, i64::checked_rem, |x, y| x % y)),
    ("fail", |a| {
        Err(HelperFailure::Fail(a.text(0)?.into_owned()))
    }),
];

/// `version_at_least VERSION MINIMUM`: whether a dotted version (`3.2`, `2.6.12`) is
/// `MINIMUM` or later, comparing each number in turn (a missing one counts as 0).
fn version_at_least(a: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let numbers = |index: usize| -> Result<Vec<u64>, HelperFailure> {
        let text = a.text(index)?;
        let parsed: Option<Vec<u64>> = text
            .trim()
            .split('.')
            .map(|part| part.parse::<u64>().ok())
            .collect();
        parsed.filter(|n| !n.is_empty()).ok_or_else(|| {
            misuse(format!(
                "version_at_least: argument {} is '{text}', not a dotted version like 3.0",
                index + 1
            ))
        })
    };
    let (version, minimum) = (numbers(0)?, numbers(1)?);
    let width = version.len().max(minimum.len());
    let at = |n: &[u64], i: usize| n.get(i).copied().unwrap_or(0);
    let ordering = (0..width)
        .map(|i| at(&version, i).cmp(&at(&minimum, i)))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal);
    Ok(Value::Bool(ordering.is_ge()))
}

/// Every helper name this module registers.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    FN_HELPERS
        .iter()
        .map(|(name, _)| *name)
        .chain(["regex_match", "regex_replace", "sort_lines"])
}

/// Registers every stateless helper.
pub(crate) fn register(registry: &mut Handlebars<'static>) {
    registry.register_helper("sort_lines", Box::new(SortLines));
    for (name, run) in FN_HELPERS {
        registry.register_helper(name, Box::new(FnHelper { name, run: *run }));
    }
    let cache = Arc::new(Mutex::new(HashMap::new()));
    registry.register_helper(
        "regex_match",
        Box::new(RegexHelper {
            name: "regex_match",
            replace: false,
            cache: Arc::clone(&cache),
        }),
    );
    registry.register_helper(
        "regex_replace",
        Box::new(RegexHelper {
            name: "regex_replace",
            replace: true,
            cache,
        }),
    );
}

/// Splits a dotted field path (`metadata.labels.app`, `spec.ports[0].port`,
/// `metadata.labels.kubernetes\.io/name`) into its segments.
pub(crate) fn path_segments(path: &str) -> Vec<String> {
    let path = path.strip_prefix('$').unwrap_or(path);
    let path = path.strip_prefix('.').unwrap_or(path);
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            '.' => segments.push(std::mem::take(&mut current)),
            '[' => {
                if !current.is_empty() {
                    segments.push(std::mem::take(&mut current));
                }
                let inner: String = chars.by_ref().take_while(|c| *c != ']').collect();
                segments.push(inner.trim_matches(|c| c == '\'' || c == '"').to_string());
                // A `.` right after `]` starts the next segment, not an empty one.
                let rest = chars.as_str();
                if let Some(after) = rest.strip_prefix('.') {
                    chars = after.chars();
                }
            }
            other => current.push(other),
        }
    }
    if !current.is_empty() || segments.is_empty() {
        segments.push(current);
    }
    segments.retain(|s| !s.is_empty());
    segments
}

/// Walks `segments` down objects (by key) and arrays (by numeric index).
pub(crate) fn walk<'v, S: AsRef<str>>(mut value: &'v Value, segments: &[S]) -> Option<&'v Value> {
    for segment in segments {
        let segment = segment.as_ref();
        value = match value {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// A total order over JSON values: null < booleans < numbers < text < lists < objects.
fn compare(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            Value::Array(_) => 4,
            Value::Object(_) => 5,
        }
    }
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => x
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&y.as_f64().unwrap_or(0.0)),
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => x
            .iter()
            .zip(y)
            .map(|(p, q)| compare(p, q))
            .find(|o| o.is_ne())
            .unwrap_or(x.len().cmp(&y.len())),
        _ => rank(a).cmp(&rank(b)),
    }
}

static NULL: Value = Value::Null;

/// `sort_by list "field.path" ["other.field:desc" ...]`: a stable sort by one or more
/// fields; `:desc` reverses a field. Missing fields sort first.
fn sort_by(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let items = args.list(0)?;
    if args.count() < 2 {
        return Err(misuse("sort_by needs a list and at least one field path"));
    }
    let mut keys = Vec::with_capacity(args.count() - 1);
    for index in 1..args.count() {
        let spec = args.text(index)?;
        let (path, descending) = match spec.strip_suffix(":desc") {
            Some(path) => (path, true),
            None => (spec.strip_suffix(":asc").unwrap_or(&spec), false),
        };
        keys.push((path_segments(path), descending));
    }
    let mut sorted: Vec<&Value> = items.iter().collect();
    sorted.sort_by(|a, b| {
        keys.iter()
            .map(|(path, descending)| {
                let order = compare(
                    walk(a, path).unwrap_or(&NULL),
                    walk(b, path).unwrap_or(&NULL),
                );
                if *descending { order.reverse() } else { order }
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    });
    Ok(Value::Array(sorted.into_iter().cloned().collect()))
}

/// `group_by list "field.path"`: an object from each field value (as text) to the items
/// holding it, in their original order. Keys come out sorted.
fn group_by(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let items = args.list(0)?;
    let path = path_segments(&args.text(1)?);
    let mut groups: std::collections::BTreeMap<String, Vec<Value>> =
        std::collections::BTreeMap::new();
    for item in items {
        let key = walk(item, &path)
            .and_then(as_text)
            .unwrap_or_default()
            .into_owned();
        groups.entry(key).or_default().push(item.clone());
    }
    Ok(Value::Object(
        groups
            .into_iter()
            .map(|(key, members)| (key, Value::Array(members)))
            .collect::<Map<_, _>>(),
    ))
}

/// `sum list "field.path" [default=N] [first=N]`: the sum of the integer field over the
/// list's items (or only its first N), counting an item without the field as `default`
/// (0 unless given): e.g. the weight before a backend reference, for cumulative ranges.
fn sum(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let items = args.list(0)?;
    let path = path_segments(&args.text(1)?);
    let hash_int = |key: &str| -> Result<Option<i64>, HelperFailure> {
        match args.helper.hash_get(key).map(|v| v.value()) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => as_int(value)
                .map(Some)
                .ok_or_else(|| misuse(format!("sum: {key}={value} is not an integer"))),
        }
    };
    let missing = hash_int("default")?.unwrap_or(0);
    let count = hash_int("first")?.map_or(items.len(), |n| n.clamp(0, i64::MAX) as usize);
    let mut total: i64 = 0;
    for item in items.iter().take(count) {
        let value = match walk(item, &path) {
            None | Some(Value::Null) => missing,
            Some(value) => as_int(value)
                .ok_or_else(|| misuse(format!("sum: {} is not an integer", describe(value))))?,
        };
        total = total
            .checked_add(value)
            .ok_or_else(|| misuse("sum: the total overflows"))?;
    }
    Ok(Value::from(total))
}

/// `items value`: the list `value` is, or the empty list when it is null or missing, so
/// `{{#each (items (dig obj "spec" "optional"))}}` needs no `{{else}}` in strict mode.
fn items(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    match args.optional(0) {
        None => Ok(Value::Array(Vec::new())),
        Some(Value::Array(list)) => Ok(Value::Array(list.clone())),
        Some(other) => Err(misuse(format!(
            "items: the argument is {}, not a list",
            kind_of(other)
        ))),
    }
}

/// `nested list "field.path"`: every item of the lists found at the path in each item of
/// `list`, as `{"parent": item, "item": nested, "index": position}` (position in its own
/// list), in order: e.g. every listener of every Gateway, each with its Gateway.
fn nested(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let items = args.list(0)?;
    let path = path_segments(&args.text(1)?);
    let mut out = Vec::new();
    for item in items {
        if let Some(Value::Array(children)) = walk(item, &path) {
            for (index, child) in children.iter().enumerate() {
                let mut entry = Map::new();
                entry.insert("parent".into(), item.clone());
                entry.insert("item".into(), child.clone());
                entry.insert("index".into(), Value::from(index));
                out.push(Value::Object(entry));
            }
        }
    }
    Ok(Value::Array(out))
}

/// `filter list "field.path" value`: the items whose field equals `value` (printed as
/// text), or, when `value` is a list, equals one of its members.
fn filter(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let items = args.list(0)?;
    let path = path_segments(&args.text(1)?);
    let wanted: Vec<String> = match args.value(2)? {
        Value::Array(values) => values
            .iter()
            .filter_map(|v| as_text(v).map(Cow::into_owned))
            .collect(),
        other => vec![as_text(other).map(Cow::into_owned).ok_or_else(|| {
            misuse("filter: argument 3 must be text, a number, a boolean or a list of them")
        })?],
    };
    Ok(Value::Array(
        items
            .iter()
            .filter(|item| {
                walk(item, &path)
                    .and_then(as_text)
                    .is_some_and(|text| wanted.iter().any(|w| *w == text))
            })
            .cloned()
            .collect(),
    ))
}

/// `pluck list "field.path"`: the field of each item that has it.
fn pluck(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let items = args.list(0)?;
    let path = path_segments(&args.text(1)?);
    Ok(Value::Array(
        items
            .iter()
            .filter_map(|item| walk(item, &path).cloned())
            .collect(),
    ))
}

/// `zero_pad number width`: the integer printed with leading zeros to `width` digits (for
/// sort keys that compare as text); a negative number is an error.
fn zero_pad(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let number = args.int(0)?;
    let width = args.int(1)?.clamp(0, 32) as usize;
    if number < 0 {
        return Err(misuse(format!("zero_pad: {number} is negative")));
    }
    Ok(Value::String(format!("{number:0width$}")))
}

/// `hostname_intersection a b`: the host names both Gateway API hostname patterns admit, as
/// one pattern: the more specific of the two when one admits the other (`*.example.com`
/// and `foo.example.com` give `foo.example.com`; `*` or an empty or null value admits
/// every host), `*` when both admit every host, and null when they share no host. A
/// wildcard `*.example.com` admits one or more labels before `.example.com`, not
/// `example.com` itself; names compare case-insensitively.
fn hostname_intersection(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let pattern = |index: usize| -> Result<Option<String>, HelperFailure> {
        let text = args
            .optional(index)
            .map(as_text)
            .unwrap_or(Some(Cow::Borrowed("")));
        let text = text.ok_or_else(|| {
            misuse(format!(
                "hostname_intersection: argument {} must be a host name",
                index + 1
            ))
        })?;
        let text = text.trim().to_ascii_lowercase();
        Ok((!text.is_empty() && text != "*").then_some(text))
    };
    Ok(match intersect_hostnames(pattern(0)?, pattern(1)?) {
        Intersection::Everything => Value::String("*".into()),
        Intersection::Host(host) => Value::String(host),
        Intersection::Nothing => Value::Null,
    })
}

enum Intersection {
    Everything,
    Host(String),
    Nothing,
}

/// Whether wildcard pattern `*.suffix` admits `host` (itself a name or a wildcard).
fn wildcard_admits(suffix: &str, host: &str) -> bool {
    let bare = host.strip_prefix("*.").unwrap_or(host);
    host.len() > suffix.len() + 1
        && bare.len() >= suffix.len()
        && host.ends_with(&format!(".{suffix}"))
}

fn intersect_hostnames(a: Option<String>, b: Option<String>) -> Intersection {
    match (a, b) {
        (None, None) => Intersection::Everything,
        (Some(one), None) | (None, Some(one)) => Intersection::Host(one),
        (Some(a), Some(b)) => {
            let admits = |pattern: &str, other: &str| match pattern.strip_prefix("*.") {
                Some(suffix) => other == pattern || wildcard_admits(suffix, other),
                None => other == pattern,
            };
            if admits(&a, &b) {
                Intersection::Host(b)
            } else if admits(&b, &a) {
                Intersection::Host(a)
            } else {
                Intersection::Nothing
            }
        }
    }
}

/// `selector_matches selector labels`: whether a Kubernetes label selector object
/// (`matchLabels`, `matchExpressions` with In, NotIn, Exists, DoesNotExist) selects an
/// object with `labels`; an empty or null selector selects everything.
fn selector_matches(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let selector = args.optional(0).cloned().unwrap_or(Value::Null);
    let labels = args.optional(1).cloned().unwrap_or(Value::Null);
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    if let Some(Value::Object(wanted)) = selector.get("matchLabels") {
        for (key, value) in wanted {
            if label(key) != value.as_str() {
                return Ok(Value::Bool(false));
            }
        }
    }
    if let Some(Value::Array(expressions)) = selector.get("matchExpressions") {
        for expression in expressions {
            let key = expression.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = expression
                .get("values")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let operator = expression
                .get("operator")
                .and_then(Value::as_str)
                .unwrap_or("");
            let holds = match operator {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                other => {
                    return Err(misuse(format!(
                        "selector_matches: unknown operator '{other}' (In, NotIn, Exists, DoesNotExist)"
                    )));
                }
            };
            if !holds {
                return Ok(Value::Bool(false));
            }
        }
    }
    Ok(Value::Bool(true))
}

/// `{{#sort_lines}}KEY<tab>LINE ...{{/sort_lines}}`: renders the block, then prints its
/// non-blank lines ordered by the text before each line's first separator (a tab, or the
/// `separator=` text; compared as text; equal keys keep their order; a line without one has
/// the empty key), without the key and the separator; with `unique=true`, a line whose key
/// and text repeat the line before it is printed once; with `unique_by="SEP"`, only the
/// first line (in the sorted order) of each text before SEP is printed (a map's first entry
/// for a key wins).
/// Lets a template emit rules in an order it computes, e.g. by precedence.
struct SortLines;

impl HelperDef for SortLines {
    fn call<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        registry: &'reg Handlebars<'reg>,
        context: &'rc Context,
        rc: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn handlebars::Output,
    ) -> handlebars::HelperResult {
        use handlebars::Renderable;
        let Some(template) = helper.template() else {
            return Ok(());
        };
        let mut buffer = handlebars::StringOutput::new();
        template.render(registry, context, rc, &mut buffer)?;
        let text = buffer.into_string()?;
        let separator = match helper.hash_get("separator").map(|v| v.value()) {
            Some(Value::String(text)) if !text.is_empty() => text.clone(),
            Some(other) => {
                return Err(misuse(format!(
                    "sort_lines: separator={other} is not a non-empty text"
                ))
                .into());
            }
            None => "\t".to_string(),
        };
        let mut lines: Vec<(&str, &str)> = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| match line.split_once(separator.as_str()) {
                Some((key, rest)) => (key.trim(), rest),
                None => ("", line),
            })
            .collect();
        lines.sort_by(|a, b| a.0.cmp(b.0));
        if helper
            .hash_get("unique")
            .is_some_and(|v| v.value().as_bool() == Some(true))
        {
            lines.dedup();
        }
        let unique_by = match helper.hash_get("unique_by").map(|v| v.value()) {
            Some(Value::String(text)) if !text.is_empty() => Some(text.clone()),
            None => None,
            Some(other) => {
                return Err(misuse(format!(
                    "sort_lines: unique_by={other} is not a non-empty text"
                ))
                .into());
            }
        };
        let mut seen = std::collections::HashSet::new();
        for (_, line) in lines {
            if let Some(separator) = &unique_by {
                let head = line.trim_start();
                let head = head.split_once(separator.as_str()).map_or(head, |(h, _)| h);
                if !seen.insert(head.to_string()) {
                    continue;
                }
            }
            out.write(line)?;
            out.write("\n")?;
        }
        Ok(())
    }
}

/// `join list [separator]`: items printed and joined (default separator `,`).
fn join(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let items = args.list(0)?;
    let separator = if args.count() > 1 {
        args.text(1)?.into_owned()
    } else {
        ",".to_string()
    };
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&separator);
        }
        match as_text(item) {
            Some(text) => out.push_str(&text),
            None => out.push_str(&item.to_string()),
        }
    }
    Ok(Value::String(out))
}

/// `keys object`: its keys, sorted. Null gives the empty list.
fn keys(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    match args.value(0)? {
        Value::Object(map) => Ok(Value::Array(
            map.keys().cloned().map(Value::String).collect(),
        )),
        Value::Null => Ok(Value::Array(Vec::new())),
        other => Err(misuse(format!(
            "keys needs an object, not {}",
            kind_of(other)
        ))),
    }
}

fn first(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    Ok(args.list(0)?.first().cloned().unwrap_or(Value::Null))
}

fn last(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    Ok(args.list(0)?.last().cloned().unwrap_or(Value::Null))
}

/// `default value fallback...` (alias `fallback`): the first argument that is defined and
/// not null. Undefined variables are allowed here even in strict mode.
/// `choose condition when_true when_false`: the second argument when the first is truthy
/// (as `#if` judges it: not false, null, 0, "" or an empty list or object), else the third.
fn choose(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    if args.count() != 3 {
        return Err(misuse(
            "choose needs a condition, the value when it holds and the value when it does not"
                .to_string(),
        ));
    }
    let truthy = match args.optional(0) {
        None | Some(Value::Bool(false)) => false,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    };
    Ok(args
        .optional(if truthy { 1 } else { 2 })
        .cloned()
        .unwrap_or(Value::Null))
}

fn default(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    if args.count() < 2 {
        return Err(misuse(format!(
            "{} needs a value and a fallback",
            args.name
        )));
    }
    Ok((0..args.count())
        .find_map(|i| args.optional(i))
        .cloned()
        .unwrap_or(Value::Null))
}

/// `dig object "a" "b" 0 "c"`: the nested value, or null when any step is missing.
fn dig(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let Some(mut value) = args.optional(0) else {
        return Ok(Value::Null);
    };
    for index in 1..args.count() {
        let step = args.text(index)?;
        match walk(value, &[step]) {
            Some(next) => value = next,
            None => return Ok(Value::Null),
        }
    }
    Ok(value.clone())
}

/// The largest compiled program `is_regex` accepts: a text that compiles into more is not
/// one a template should hand on to HAProxy.
const IS_REGEX_SIZE_LIMIT: usize = 1 << 20;

/// `is_regex text`: whether `text` is a regular expression (the `regex` crate's syntax, which
/// HAProxy's PCRE2 also reads: no look-around or back-references) of a bounded size. Lets a
/// template refuse a user's pattern with a reason instead of failing the render or
/// `haproxy -c`.
fn is_regex(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let text = args.text(0)?;
    Ok(Value::Bool(
        regex::RegexBuilder::new(&text)
            .size_limit(IS_REGEX_SIZE_LIMIT)
            .build()
            .is_ok(),
    ))
}

/// The longest list `seq` builds; guards against a typo rendering gigabytes.
const SEQ_LIMIT: i64 = 100_000;

/// `seq n` gives `0..n`; `seq start end` gives `start..end` (end excluded).
fn seq(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let (start, end) = if args.count() > 1 {
        (args.int(0)?, args.int(1)?)
    } else {
        (0, args.int(0)?)
    };
    if end.saturating_sub(start) > SEQ_LIMIT {
        return Err(misuse(format!(
            "seq would build more than {SEQ_LIMIT} numbers"
        )));
    }
    Ok(Value::Array((start..end).map(Value::from).collect()))
}

/// `contains haystack needle`: substring for text, membership for lists, key for objects.
fn contains(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let haystack = args.value(0)?;
    let found = match haystack {
        Value::Array(items) => {
            let needle = args.value(1)?;
            items.iter().any(|item| item == needle)
        }
        Value::Object(map) => map.contains_key(args.text(1)?.as_ref()),
        _ => args.text(0)?.contains(args.text(1)?.as_ref()),
    };
    Ok(Value::Bool(found))
}

fn split(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let text = args.text(0)?;
    let separator = args.text(1)?;
    if text.is_empty() {
        return Ok(Value::Array(Vec::new()));
    }
    if separator.is_empty() {
        return Err(misuse("split needs a non-empty separator"));
    }
    Ok(Value::Array(
        text.split(separator.as_ref())
            .map(|part| Value::String(part.to_string()))
            .collect(),
    ))
}

fn concat(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let mut out = String::new();
    for index in 0..args.count() {
        out.push_str(&args.text(index)?);
    }
    Ok(Value::String(out))
}

/// Replaces every character HAProxy does not accept in a section or server name
/// (anything but ASCII letters, digits, `-`, `_`, `.`, `:`) with `_`.
pub(crate) fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Shell-style matching: `*` any run of characters, `?` exactly one.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            backtrack = Some((p, t));
            p += 1;
        } else if let Some((star, matched)) = backtrack {
            p = star + 1;
            t = matched + 1;
            backtrack = Some((star, matched + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// The widest indent accepted; anything larger is a template bug.
const INDENT_LIMIT: i64 = 256;

/// `indent n text`: prefixes every non-empty line of `text` with `n` spaces.
fn indent(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let width = args.int(0)?;
    if !(0..=INDENT_LIMIT).contains(&width) {
        return Err(misuse(format!(
            "indent width must be between 0 and {INDENT_LIMIT}, not {width}"
        )));
    }
    let pad = " ".repeat(width as usize);
    let text = args.text(1)?;
    let mut out = String::with_capacity(text.len() + pad.len() * 8);
    for line in text.split_inclusive('\n') {
        if line != "\n" && line != "\r\n" {
            out.push_str(&pad);
        }
        out.push_str(line);
    }
    Ok(Value::String(out))
}

/// `b64decode text`: standard base64 (padding optional) decoded to UTF-8 text, as Secret
/// data holds it.
fn b64decode(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let text = args.text(0)?;
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.trim_end_matches('='))
        .or_else(|_| {
            base64::engine::general_purpose::STANDARD_NO_PAD.decode(compact.trim_end_matches('='))
        })
        .map_err(|err| misuse(format!("b64decode: the input is not valid base64: {err}")))?;
    String::from_utf8(bytes)
        .map(Value::String)
        .map_err(|_| misuse("b64decode: the decoded bytes are not UTF-8 text"))
}

/// `to_json value [pretty=true]`.
fn to_json(args: &Args<'_, '_>) -> Result<Value, HelperFailure> {
    let value = args.value(0)?;
    let text = if args.hash_bool("pretty") {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    text.map(Value::String)
        .map_err(|err| misuse(format!("to_json: {err}")))
}

/// Integer arithmetic when every operand is an integer (`div` truncates), floating point
/// otherwise; whole results are printed without a fraction.
fn arithmetic(
    args: &Args<'_, '_>,
    integer: fn(i64, i64) -> Option<i64>,
    float: fn(f64, f64) -> f64,
) -> Result<Value, HelperFailure> {
    let x = number(args, 0)?;
    let y = number(args, 1)?;
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        if b == 0 && matches!(args.name, "div" | "mod") {
            return Err(misuse(format!("{}: division by zero", args.name)));
        }
        return integer(a, b).map(Value::from).ok_or_else(|| {
            misuse(format!(
                "{}: {a} and {b} overflow a 64-bit integer",
                args.name
            ))
        });
    }
    let result = float(x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
    if !result.is_finite() {
        return Err(misuse(format!(
            "{}: the result is not a finite number",
            args.name
        )));
    }
    if result.fract() == 0.0 && result.abs() < 9.0e15 {
        return Ok(Value::from(result as i64));
    }
    Number::from_f64(result)
        .map(Value::Number)
        .ok_or_else(|| misuse(format!("{}: no result", args.name)))
}

fn number(args: &Args<'_, '_>, index: usize) -> Result<Number, HelperFailure> {
    match args.value(index)? {
        Value::Number(n) => Ok(n.clone()),
        Value::String(text) => {
            let text = text.trim();
            text.parse::<i64>()
                .map(Number::from)
                .ok()
                .or_else(|| text.parse::<f64>().ok().and_then(Number::from_f64))
                .ok_or_else(|| {
                    misuse(format!(
                        "argument {} of {} is not a number: '{text}'",
                        index + 1,
                        args.name
                    ))
                })
        }
        other => Err(misuse(format!(
            "argument {} of {} must be a number, not {}",
            index + 1,
            args.name,
            kind_of(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob_match("backends-*", "backends-010-x"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*-x-*", "a-x-b"));
        assert!(!glob_match("backends-*", "frontends-1"));
        assert!(!glob_match("a?c", "ac"));
    }

    #[test]
    fn path_segments_understand_escapes_and_brackets() {
        assert_eq!(path_segments("metadata.name"), ["metadata", "name"]);
        assert_eq!(
            path_segments(r"labels.kubernetes\.io/name"),
            ["labels", "kubernetes.io/name"]
        );
        assert_eq!(
            path_segments("$.spec.ports[0].port"),
            ["spec", "ports", "0", "port"]
        );
        assert_eq!(path_segments("a['b.c']"), ["a", "b.c"]);
    }

    #[test]
    fn compare_orders_numbers_numerically_not_as_text() {
        assert!(compare(&Value::from(9), &Value::from(10)).is_lt());
        assert!(compare(&Value::from(1.5), &Value::from(1)).is_gt());
        assert!(compare(&Value::Null, &Value::from("a")).is_lt());
    }

    #[test]
    fn sanitize_keeps_only_haproxy_name_characters() {
        let out = sanitize("shop/web svc:80#x");
        assert!(
            out.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c)),
            "{out}"
        );
        assert_eq!(out.len(), "shop/web svc:80#x".len());
        assert!(out.contains("svc:80"));
    }
}
