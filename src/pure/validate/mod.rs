//! Three-phase validation of a rendered configuration: the syntax phase (haptor's own
//! HAProxy parser), the schema phase (which directives and keywords each section allows)
//! and the semantic phase (the real `haproxy -c` in a scratch directory). Each phase reports
//! [`ConfigProblem`]s; any problem makes the configuration invalid, and the caller keeps
//! serving the last good one.

pub mod cache;
pub mod semantic;

use std::fmt;

use serde::{Deserialize, Serialize};

/// The phase that found a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValidationPhase {
    /// haptor's parser could not read the text.
    Syntax,
    /// The text parsed but uses a directive or parameter HAProxy does not allow there.
    Schema,
    /// `haproxy -c` rejected the configuration.
    Semantic,
}

impl fmt::Display for ValidationPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValidationPhase::Syntax => "syntax",
            ValidationPhase::Schema => "schema",
            ValidationPhase::Semantic => "semantic",
        })
    }
}

impl ValidationPhase {
    /// The phase as a metric label value (`haptor_validation_errors_total{phase}`); the same
    /// text as its `Display` and its serialized form.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ValidationPhase::Syntax => "syntax",
            ValidationPhase::Schema => "schema",
            ValidationPhase::Semantic => "semantic",
        }
    }
}

/// One problem in a rendered configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigProblem {
    pub phase: ValidationPhase,
    /// The file the problem is in, relative to the base directory (`haproxy.cfg`,
    /// `maps/hosts.map`, ...).
    pub file: String,
    /// 1-based line number, when the problem has one.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "{}:{}: {} ({} check)",
                self.file, line, self.message, self.phase
            ),
            None => write!(f, "{}: {} ({} check)", self.file, self.message, self.phase),
        }
    }
}

/// A configuration failed validation. Carries every problem the failing phase found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub struct ValidationError {
    pub phase: ValidationPhase,
    pub problems: Vec<ConfigProblem>,
}

impl ValidationError {
    pub fn single(
        phase: ValidationPhase,
        file: &str,
        line: Option<usize>,
        message: impl Into<String>,
    ) -> Self {
        ValidationError {
            phase,
            problems: vec![ConfigProblem {
                phase,
                file: file.to_string(),
                line,
                message: message.into(),
            }],
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} validation failed", self.phase)?;
        for (i, p) in self.problems.iter().enumerate() {
            let sep = if i == 0 { ": " } else { "; " };
            write!(f, "{sep}{p}")?;
        }
        Ok(())
    }
}
