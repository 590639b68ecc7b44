//! Kubernetes label selectors: the text form `kubectl get -l` and a watch's `labelSelector`
//! take, parsed once and matched against label maps.
//!
//! A selector is a comma-separated list of requirements, all of which must hold:
//! `key=value` and `key==value` (the label is present with that value), `key!=value` (absent,
//! or present with another value), `key in (a,b)`, `key notin (a,b)` (absent, or none of
//! them), `key` (present), `!key` (absent), `key>N` and `key<N` (present with an integer
//! value above or below N). Keys are qualified names with an optional DNS-subdomain prefix
//! (`app.kubernetes.io/name`), values follow Kubernetes' label-value rules, and the grammar
//! follows `k8s.io/apimachinery/pkg/labels`, so a selector that works with `kubectl` works
//! here and one it rejects is rejected here. The empty selector matches everything. A parse
//! error names the character position and what was expected there.
//!
//! Watched resources use selectors twice: `labelSelector` over each object's own
//! `metadata.labels`, and `namespaceSelector` over the labels of the object's namespace,
//! which [`namespaces::NamespaceLabels`] knows.

pub mod namespaces;

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

pub use namespaces::{METADATA_NAME_LABEL, Membership, NamespaceChange, NamespaceLabels};

/// The longest label name or value Kubernetes accepts.
const MAX_NAME: usize = 63;
/// The longest DNS-subdomain prefix of a label key.
const MAX_PREFIX: usize = 253;

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    /// Set only by [`LabelSelector::nothing`]: no label map matches.
    nothing: bool,
}

/// One requirement of a selector: a key, an operator and the values it compares with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// One value for `=`, `!=`, `>` and `<`; one or more for `in` and `notin`; none for
    /// `exists` and `!`.
    pub values: Vec<String>,
}

/// How a requirement compares a label with its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `key=value` or `key==value`.
    Equals,
    /// `key!=value`: also true when the label is absent.
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`: also true when the label is absent.
    NotIn,
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `key>N`.
    GreaterThan,
    /// `key<N`.
    LessThan,
}

/// Why a selector's text does not parse: where, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {problem}")]
pub struct SelectorError {
    /// 1-based position of the offending character (one past the end for "ended early").
    pub position: usize,
    pub problem: SelectorProblem,
}

/// What is wrong at a [`SelectorError`]'s position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorProblem {
    #[error("expected a label key, found {found}")]
    ExpectedKey { found: String },
    #[error(
        "after the key '{key}' expected an operator (=, ==, !=, in, notin, >, <), a ',' or the end, found {found}"
    )]
    ExpectedOperator { key: String, found: String },
    #[error(
        "'!{key}' selects objects without the label and takes no operator or value; write '{key}!={found_value}' to exclude one value"
    )]
    OperatorAfterDoesNotExist { key: String, found_value: String },
    #[error("expected a value after '{operator}', found {found}")]
    ExpectedValue { operator: String, found: String },
    #[error("expected '(' after '{operator}', as in `{key} {operator} (a,b)`, found {found}")]
    ExpectedOpenParen {
        key: String,
        operator: String,
        found: String,
    },
    #[error("expected ',' or ')' in the value list, found {found}")]
    ExpectedListSeparator { found: String },
    #[error("expected ',' before the next requirement, found {found}")]
    ExpectedComma { found: String },
    #[error("'{key}' is not a valid label key: {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("'{value}' is not a valid label value: {reason}")]
    InvalidValue { value: String, reason: String },
    #[error("'{operator}' compares whole numbers, but '{value}' is not one")]
    NotAnInteger { operator: String, value: String },
}

/// A lexical token with the 1-based character position it starts at.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Identifier(String),
    Equals,
    DoubleEquals,
    NotEquals,
    Bang,
    GreaterThan,
    LessThan,
    OpenParen,
    CloseParen,
    Comma,
    End,
}

impl Token {
    /// The token as an error message shows it.
    fn describe(&self) -> String {
        match self {
            Token::Identifier(text) => format!("'{text}'"),
            Token::Equals => "'='".into(),
            Token::DoubleEquals => "'=='".into(),
            Token::NotEquals => "'!='".into(),
            Token::Bang => "'!'".into(),
            Token::GreaterThan => "'>'".into(),
            Token::LessThan => "'<'".into(),
            Token::OpenParen => "'('".into(),
            Token::CloseParen => "')'".into(),
            Token::Comma => "','".into(),
            Token::End => "the end of the selector".into(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '<' | '>')
}

/// Splits selector text into tokens, each with its 1-based character position. The last
/// token is always [`Token::End`].
fn tokenize(text: &str) -> Vec<(usize, Token)> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let position = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let (token, width) = match (c, next) {
            ('=', Some('=')) => (Token::DoubleEquals, 2),
            ('=', _) => (Token::Equals, 1),
            ('!', Some('=')) => (Token::NotEquals, 2),
            ('!', _) => (Token::Bang, 1),
            ('>', _) => (Token::GreaterThan, 1),
            ('<', _) => (Token::LessThan, 1),
            ('(', _) => (Token::OpenParen, 1),
            (')', _) => (Token::CloseParen, 1),
            (',', _) => (Token::Comma, 1),
            _ => {
                let end = chars[i..]
                    .iter()
                    .position(|&c| c.is_whitespace() || is_special(c))
                    .map_or(chars.len(), |n| i + n);
                let word: String = chars[i..end].iter().collect();
                (Token::Identifier(word), end - i)
            }
        };
        tokens.push((position, token));
        i += width;
    }
    tokens.push((chars.len() + 1, Token::End));
    tokens
}

struct Parser {
    tokens: Vec<(usize, Token)>,
    next: usize,
}

impl Parser {
    fn peek(&self) -> &(usize, Token) {
        // `tokenize` always ends with `End`, and `advance` never moves past it.
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn advance(&mut self) -> (usize, Token) {
        let token = self.peek().clone();
        if self.next < self.tokens.len() - 1 {
            self.next += 1;
        }
        token
    }

    fn error(position: usize, problem: SelectorProblem) -> SelectorError {
        SelectorError { position, problem }
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        let (position, token) = self.advance();
        match token {
            Token::Identifier(key) if key != "in" && key != "notin" => {
                validate_key(&key).map_err(|reason| {
                    Self::error(
                        position,
                        SelectorProblem::InvalidKey {
                            key: key.clone(),
                            reason,
                        },
                    )
                })?;
                Ok(key)
            }
            other => Err(Self::error(
                position,
                SelectorProblem::ExpectedKey {
                    found: other.describe(),
                },
            )),
        }
    }

    /// A value: an identifier (keywords included), validated as a label value.
    fn value(&mut self, operator: &str) -> Result<String, SelectorError> {
        let (position, token) = self.advance();
        match token {
            Token::Identifier(value) => {
                validate_value(&value).map_err(|reason| {
                    Self::error(
                        position,
                        SelectorProblem::InvalidValue {
                            value: value.clone(),
                            reason,
                        },
                    )
                })?;
                Ok(value)
            }
            other => Err(Self::error(
                position,
                SelectorProblem::ExpectedValue {
                    operator: operator.to_string(),
                    found: other.describe(),
                },
            )),
        }
    }

    /// The value of `=`, `==` or `!=`: empty when a ',' or the end follows at once.
    fn exact_value(&mut self, operator: &str) -> Result<String, SelectorError> {
        match self.peek().1 {
            Token::Comma | Token::End => Ok(String::new()),
            _ => self.value(operator),
        }
    }

    /// An integer value of `>` or `<`.
    fn integer_value(&mut self, operator: &str) -> Result<String, SelectorError> {
        let position = self.peek().0;
        let value = self.value(operator)?;
        if value.parse::<i64>().is_err() {
            return Err(Self::error(
                position,
                SelectorProblem::NotAnInteger {
                    operator: operator.to_string(),
                    value,
                },
            ));
        }
        Ok(value)
    }

    /// `( value, ... )`, as Kubernetes reads it: an empty item is the empty value, so `()`
    /// is the one empty value.
    fn value_list(&mut self, key: &str, operator: &str) -> Result<Vec<String>, SelectorError> {
        let (position, token) = self.advance();
        if token != Token::OpenParen {
            return Err(Self::error(
                position,
                SelectorProblem::ExpectedOpenParen {
                    key: key.to_string(),
                    operator: operator.to_string(),
                    found: token.describe(),
                },
            ));
        }
        let mut values = Vec::new();
        loop {
            match self.peek().1 {
                Token::Comma | Token::CloseParen => values.push(String::new()),
                _ => values.push(self.value(operator)?),
            }
            let (position, token) = self.advance();
            match token {
                Token::Comma => {}
                Token::CloseParen => break,
                other => {
                    return Err(Self::error(
                        position,
                        SelectorProblem::ExpectedListSeparator {
                            found: other.describe(),
                        },
                    ));
                }
            }
        }
        Ok(values)
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek().1 == Token::Bang {
            self.advance();
            let key = self.key()?;
            let (position, token) = self.peek().clone();
            if !matches!(token, Token::Comma | Token::End) {
                let found_value = match self.tokens.get(self.next + 1) {
                    Some((_, Token::Identifier(v))) => v.clone(),
                    _ => "value".to_string(),
                };
                return Err(Self::error(
                    position,
                    SelectorProblem::OperatorAfterDoesNotExist { key, found_value },
                ));
            }
            return Ok(Requirement {
                key,
                operator: Operator::DoesNotExist,
                values: vec![],
            });
        }
        let key = self.key()?;
        let (position, token) = self.peek().clone();
        let (operator, values) = match token {
            Token::Comma | Token::End => (Operator::Exists, vec![]),
            Token::Equals | Token::DoubleEquals => {
                self.advance();
                let text = if token == Token::Equals { "=" } else { "==" };
                (Operator::Equals, vec![self.exact_value(text)?])
            }
            Token::NotEquals => {
                self.advance();
                (Operator::NotEquals, vec![self.exact_value("!=")?])
            }
            Token::GreaterThan => {
                self.advance();
                (Operator::GreaterThan, vec![self.integer_value(">")?])
            }
            Token::LessThan => {
                self.advance();
                (Operator::LessThan, vec![self.integer_value("<")?])
            }
            Token::Identifier(word) if word == "in" || word == "notin" => {
                self.advance();
                let operator = if word == "in" {
                    Operator::In
                } else {
                    Operator::NotIn
                };
                (operator, self.value_list(&key, &word)?)
            }
            other => {
                return Err(Self::error(
                    position,
                    SelectorProblem::ExpectedOperator {
                        key,
                        found: other.describe(),
                    },
                ));
            }
        };
        Ok(Requirement {
            key,
            operator,
            values,
        })
    }
}

/// Kubernetes' rule for a label name and a non-empty label value: at most 63 characters,
/// alphanumeric at both ends, `-`, `_` and `.` allowed between.
fn name_problem(text: &str, what: &str) -> Option<String> {
    if text.chars().count() > MAX_NAME {
        return Some(format!("{what} must be at most {MAX_NAME} characters"));
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if let Some(bad) = text
        .chars()
        .find(|&c| !(alnum(c) || matches!(c, '-' | '_' | '.')))
    {
        return Some(format!(
            "{what} may hold only letters, digits, '-', '_' and '.', not '{bad}'"
        ));
    }
    let ends_ok = text.chars().next().is_some_and(alnum) && text.chars().last().is_some_and(alnum);
    if !ends_ok {
        return Some(format!("{what} must begin and end with a letter or digit"));
    }
    None
}

/// A label key: `name` or `prefix/name`, the prefix a lower-case DNS subdomain.
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        None => (None, key),
        Some((prefix, name)) => (Some(prefix), name),
    };
    if name.contains('/') {
        return Err("a key has at most one '/', between a DNS prefix and the name".into());
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err("the prefix before '/' is empty".into());
        }
        if prefix.len() > MAX_PREFIX {
            return Err(format!(
                "the prefix must be at most {MAX_PREFIX} characters"
            ));
        }
        for part in prefix.split('.') {
            let ok = !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-');
            if !ok {
                return Err(format!(
                    "the prefix '{prefix}' must be a DNS subdomain: lower-case letters, digits, '-' and '.', each part beginning and ending with a letter or digit"
                ));
            }
        }
    }
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    match name_problem(name, "the name") {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// A label value: empty, or a name by [`name_problem`]'s rule.
fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    match name_problem(value, "a value") {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

impl LabelSelector {
    /// Parses selector text. Empty (or blank) text is the selector that matches everything.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let mut parser = Parser {
            tokens: tokenize(text),
            next: 0,
        };
        let mut requirements = Vec::new();
        if parser.peek().1 == Token::End {
            return Ok(LabelSelector::everything());
        }
        loop {
            requirements.push(parser.requirement()?);
            let (position, token) = parser.advance();
            match token {
                Token::End => break,
                Token::Comma => {}
                other => {
                    return Err(Parser::error(
                        position,
                        SelectorProblem::ExpectedComma {
                            found: other.describe(),
                        },
                    ));
                }
            }
        }
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// Parses an optional selector field: absent or blank text is no selector at all.
    pub fn parse_optional(text: Option<&str>) -> Result<Option<LabelSelector>, SelectorError> {
        match text.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(None),
            Some(text) => LabelSelector::parse(text).map(Some),
        }
    }

    /// The selector that matches every label map.
    pub fn everything() -> LabelSelector {
        LabelSelector {
            requirements: vec![],
            nothing: false,
        }
    }

    /// The selector that matches no label map (what an unusable selector falls back to).
    pub fn nothing() -> LabelSelector {
        LabelSelector {
            requirements: vec![],
            nothing: true,
        }
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether the labels `label` looks up satisfy every requirement.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(&label))
    }

    /// Whether a label map satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement (an object without
    /// labels has none; a non-string label value counts as absent).
    pub fn matches_object(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        self.matches_with(|key| labels.and_then(|l| l.get(key)).and_then(Value::as_str))
    }
}

impl Requirement {
    fn matches<'a>(&self, label: &impl Fn(&str) -> Option<&'a str>) -> bool {
        let value = label(&self.key);
        let listed = |v: &str| self.values.iter().any(|x| x == v);
        let compare = |v: &str, wanted: fn(i64, i64) -> bool| {
            let bound = self.values.first().and_then(|b| b.parse::<i64>().ok());
            match (v.parse::<i64>().ok(), bound) {
                (Some(v), Some(bound)) => wanted(v, bound),
                _ => false,
            }
        };
        match self.operator {
            Operator::Equals | Operator::In => value.is_some_and(listed),
            Operator::NotEquals | Operator::NotIn => !value.is_some_and(listed),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan => value.is_some_and(|v| compare(v, |a, b| a > b)),
            Operator::LessThan => value.is_some_and(|v| compare(v, |a, b| a < b)),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        let first = self.values.first().map(String::as_str).unwrap_or_default();
        match self.operator {
            Operator::Equals => write!(f, "{key}={first}"),
            Operator::NotEquals => write!(f, "{key}!={first}"),
            Operator::In => write!(f, "{key} in ({})", self.values.join(",")),
            Operator::NotIn => write!(f, "{key} notin ({})", self.values.join(",")),
            Operator::Exists => write!(f, "{key}"),
            Operator::DoesNotExist => write!(f, "!{key}"),
            Operator::GreaterThan => write!(f, "{key}>{first}"),
            Operator::LessThan => write!(f, "{key}<{first}"),
        }
    }
}

impl fmt::Display for LabelSelector {
    /// The selector in Kubernetes' text form (parsing it again gives the same selector).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nothing {
            return write!(f, "<nothing>");
        }
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
