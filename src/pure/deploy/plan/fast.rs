//! The plan's fast path: comparing only the lines between the first and the last
//! differing byte of two configurations (found by block comparison, cut at line starts),
//! deciding whether they differ only in `server` lines' runtime values, and widening the
//! differing region to whole sections when they do not, so a change of a few lines in a
//! megabyte is planned without splitting the megabyte into lines.

use super::Operation;
use super::structural::{ServerFacts, server_changes, server_facts, server_shape};
use crate::pure::haproxy::{SectionKind, parse_config, quote_word};

/// The runtime operations between two texts that differ only in `server` lines of
/// `backend`/`listen` sections, where each changed line keeps its server name and every
/// parameter except address, port, weight and `disabled`; `None` when the texts differ in any
/// other way (the full comparison then decides).
pub(super) fn server_line_changes(old: &str, new: &str) -> Option<Vec<Operation>> {
    let region = DifferingLines::between(old, new);
    let old_lines: Vec<&str> = region.old.lines().collect();
    let new_lines: Vec<&str> = region.new.lines().collect();
    if old_lines.len() != new_lines.len() {
        return None;
    }
    let mut ops = Vec::new();
    for (index, (before, after)) in old_lines.iter().zip(&new_lines).enumerate() {
        if before == after {
            continue;
        }
        let lines_above = old_lines[..index]
            .iter()
            .rev()
            .copied()
            .chain(region.above.lines().rev());
        let backend = enclosing_proxy(lines_above)?;
        let (old_server, new_server) = (single_server(before)?, single_server(after)?);
        if old_server.0 != new_server.0
            || server_shape(&old_server.1) != server_shape(&new_server.1)
        {
            return None;
        }
        let facts = |words: &[String]| -> Option<ServerFacts> {
            let config = parse_config(&format!(
                "backend b\n  {}\n",
                words
                    .iter()
                    .map(|w| quote_word(w))
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
            .ok()?;
            server_facts(&config).into_values().next()
        };
        let (previous, next) = (facts(&old_server.1)?, facts(&new_server.1)?);
        // HAProxy takes weights up to 256; anything else is for the full check to judge.
        if next.weight > 256 {
            return None;
        }
        server_changes(&mut ops, backend, new_server.0, &previous, &next);
    }
    Some(ops)
}

/// Two texts cut into three parts: the whole lines they share at the start (`above`), the
/// whole lines where they differ (`old`, `new`), and the whole lines they share at the end.
/// Finding the cut points is a byte comparison, so a change of a few lines in a megabyte is
/// planned without splitting the megabyte into lines.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct DifferingLines<'a> {
    pub(super) above: &'a str,
    pub(super) old: &'a str,
    pub(super) new: &'a str,
}

impl<'a> DifferingLines<'a> {
    pub(super) fn between(old: &'a str, new: &'a str) -> DifferingLines<'a> {
        let (old_bytes, new_bytes) = (old.as_bytes(), new.as_bytes());
        let prefix = common_prefix(old_bytes, new_bytes);
        // Back to the start of the line the first difference is on.
        let start = old_bytes[..prefix]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        let room = old.len().min(new.len()) - start;
        let mut suffix = common_suffix(old_bytes, new_bytes).min(room);
        // Forward to the start of a line in both texts: the shared end must begin after a
        // line break, or at the very end.
        let begins_line = |bytes: &[u8], suffix: usize| {
            suffix == 0 || bytes.len() == suffix || bytes[bytes.len() - suffix - 1] == b'\n'
        };
        if !(begins_line(old_bytes, suffix) && begins_line(new_bytes, suffix)) {
            let shared = &old_bytes[old.len() - suffix..];
            suffix = shared
                .iter()
                .position(|&b| b == b'\n')
                .map_or(0, |at| suffix - at - 1);
        }
        // Every cut is at a line break (an ASCII byte) or an end, so each is a char boundary.
        DifferingLines {
            above: &old[..start],
            old: &old[start..old.len() - suffix],
            new: &new[start..new.len() - suffix],
        }
    }
}

/// The differing lines widened back to the header of the section the first difference is
/// in (or to the start) and on to the end of the section the last one is in, so the parts
/// parse on their own, every line in them means what it means in the whole text, and each
/// section in them is whole; `above` is what both texts share before the parts. What
/// follows the parts is the same text in both, so it cannot make them differ. `None` when
/// either text has conditional blocks (`.if`), which a section can start inside of.
pub(super) fn differing_sections<'a>(old: &'a str, new: &'a str) -> Option<DifferingLines<'a>> {
    let conditional = |text: &str| text.lines().any(|l| l.trim_start().starts_with(".if"));
    if conditional(old) || conditional(new) {
        return None;
    }
    let region = DifferingLines::between(old, new);
    // The start of the last section header above the difference (headers start at column
    // 0; an indented one is passed over, which only widens the parts).
    let (mut start, mut offset) = (0, 0);
    for line in region.above.split_inclusive('\n') {
        if is_section_header(line) {
            start = offset;
        }
        offset += line.len();
    }
    // Forward to the end of the section the last difference is in (the shared end is the
    // same text in both): a section is compared whole, so a name its unchanged lines
    // repeat is seen.
    let shared_end = &old[region.above.len() + region.old.len()..];
    let mut tail = 0;
    for line in shared_end.split_inclusive('\n') {
        if is_section_header(line) {
            break;
        }
        tail += line.len();
    }
    let (old_end, new_end) = (
        region.above.len() + region.old.len() + tail,
        region.above.len() + region.new.len() + tail,
    );
    // Cuts are at line starts (after ASCII line breaks) or ends, so each is a char boundary.
    Some(DifferingLines {
        above: &old[..start],
        old: &old[start..old_end],
        new: &new[start..new_end],
    })
}

/// Whether a line opens a section: a section keyword at column 0.
pub(super) fn is_section_header(line: &str) -> bool {
    !line.starts_with(char::is_whitespace)
        && line
            .split_whitespace()
            .next()
            .is_some_and(|word| SectionKind::from_keyword(word).is_some())
}

/// How many bytes two slices share at the start; compared a block at a time, which the
/// compiler turns into `memcmp`.
pub(super) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 256;
    let mut done = 0;
    for (x, y) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
        if x == y {
            done += x.len();
            continue;
        }
        return done + x.iter().zip(y).take_while(|(p, q)| p == q).count();
    }
    done
}

/// How many bytes two slices share at the end.
pub(super) fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 256;
    let mut done = 0;
    for (x, y) in a.rchunks(BLOCK).zip(b.rchunks(BLOCK)) {
        if x == y {
            done += x.len();
            continue;
        }
        return done
            + x.iter()
                .rev()
                .zip(y.iter().rev())
                .take_while(|(p, q)| p == q)
                .count();
    }
    done
}

/// The name of the `backend` or `listen` section a line belongs to: the nearest section
/// header among the lines above it, given nearest first. `None` for any other section, or a
/// conditional block in between.
pub(super) fn enclosing_proxy<'l>(lines_above: impl Iterator<Item = &'l str>) -> Option<String> {
    for line in lines_above {
        let trimmed = line.trim_start();
        if trimmed.starts_with(".if")
            || trimmed.starts_with(".elif")
            || trimmed.starts_with(".else")
            || trimmed.starts_with(".endif")
        {
            return None;
        }
        if line.starts_with(char::is_whitespace) || trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut words = trimmed.split_whitespace();
        return match (words.next(), words.next(), words.next()) {
            (Some("backend" | "listen"), Some(name), None) => Some(name.to_string()),
            _ => None,
        };
    }
    None
}

/// The server name and words of a line that holds exactly one `server` directive.
pub(super) fn single_server(line: &str) -> Option<(String, Vec<String>)> {
    let config = parse_config(&format!("backend b\n{line}\n")).ok()?;
    let section = config.sections.first()?;
    let [directive] = section.directives.as_slice() else {
        return None;
    };
    if directive.keyword() != "server" || directive.words.len() < 3 || directive.has_env_refs() {
        return None;
    }
    Some((directive.words[1].clone(), directive.words.clone()))
}
