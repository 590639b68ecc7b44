//! Preparing a render for `haproxy -c`: every auxiliary path checked (relative, inside the
//! scratch directory, unique), and the configuration's `default-path` pointed at the
//! scratch directory (rewritten in place or inserted after `global`) while remembering how
//! to map HAProxy's line numbers back to the rendered text. Pure text work; the runner in
//! `drivers::haproxy_check` writes the files and runs HAProxy.

use std::collections::BTreeSet;
use std::path::{Component, Path};

use super::CONFIG_FILE_NAME;
use crate::pure::haproxy::{SectionKind, quote_word};
use crate::pure::rendered::RenderedConfig;
use crate::pure::validate::{ConfigProblem, ValidationError, ValidationPhase};

/// Checks that every auxiliary file can be written inside the scratch directory: a
/// non-empty relative path without `..`, not `haproxy.cfg`, not shared with another file.
/// Returns the normalized paths with their contents, or every problem found.
pub fn checked_aux_paths(
    rendered: &RenderedConfig,
) -> Result<Vec<(String, &str)>, ValidationError> {
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
pub fn normalize_aux_path(raw: &str) -> Result<String, String> {
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

/// The configuration text as written to the scratch directory, and how to map HAProxy's
/// line numbers back to the rendered text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedConfig {
    pub text: String,
    /// How many rendered lines come before the inserted ones.
    pub inserted_after: usize,
    /// How many lines were inserted (0 when a `default-path` line was rewritten in place).
    pub inserted: usize,
}

impl PreparedConfig {
    /// Rewrites every `default-path` line of a `global` section in place to
    /// `default-path origin <base>`. Without one, inserts that line right after the first
    /// `global` line, or prepends a `global` section holding it when there is none.
    pub fn new(rendered: &str, base: &str) -> Self {
        let directive = format!("default-path origin {base}");
        let mut text = String::with_capacity(rendered.len() + directive.len() + 16);
        let mut section = "";
        let mut first_global: Option<usize> = None;
        let mut rewritten = false;
        let lines: Vec<&str> = rendered.split_inclusive('\n').collect();
        for (index, line) in lines.iter().enumerate() {
            let first_word = line.split_whitespace().next().unwrap_or_default();
            if let Some(kind) = SectionKind::from_keyword(first_word) {
                section = kind.keyword();
                if kind == SectionKind::Global && first_global.is_none() {
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
    pub fn original_line(&self, reported: usize) -> Option<usize> {
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

/// Writes a word so HAProxy's config tokenizer reads it back unchanged: haptor's one
/// quoting rule, [`quote_word`].
pub fn quote_config_word(word: &str) -> String {
    quote_word(word)
}
