//! Certificates and crt-lists without a reload: a certificate whose content changed is
//! replaced in HAProxy's certificate store (`set ssl cert` + `commit ssl cert`), a new one
//! is created there first (`new ssl cert`), lines that come and go in a loaded crt-list
//! are added (`add ssl crt-list`) and deleted (`del ssl crt-list`), and a certificate no
//! file has any more is deleted from the store (`del ssl cert`) once no crt-list line names
//! it. Every file is written too, so a later reload loads what the runtime API changed.
//! A certificate HAProxy has not loaded is only written (the executor asks HAProxy).

use std::collections::BTreeMap;

use super::Operation;
use crate::pure::rendered::{AuxFile, AuxKind};

/// The crt-list lines of a file's text that matter: trimmed, blank lines and comments
/// skipped.
fn crt_list_lines(content: &str) -> Vec<&str> {
    content
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The certificate a crt-list line names (its first word).
fn certificate_of(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or_default()
}

/// The runtime operations that turn the certificates and crt-lists of `from` into those of
/// `to`, or the reason they need a reload. Only files present in both renders are compared
/// here as crt-lists (a new or dropped crt-list changes `haproxy.cfg`, which decides).
pub(super) fn certificate_changes(
    from: &BTreeMap<String, AuxFile>,
    to: &BTreeMap<String, AuxFile>,
) -> Result<Vec<Operation>, String> {
    let mut stores = Vec::new();
    let mut additions = Vec::new();
    let mut deletions = Vec::new();
    let mut dropped = Vec::new();
    for (path, file) in to.iter().filter(|(_, f)| f.kind == AuxKind::Cert) {
        match from.get(path) {
            Some(previous) if previous.content == file.content => {}
            previous => stores.push(Operation::SetCertificate {
                path: path.clone(),
                new: previous.is_none(),
                pem: file.content.clone(),
            }),
        }
    }
    for (path, file) in to.iter().filter(|(_, f)| f.kind == AuxKind::CrtList) {
        let Some(previous) = from.get(path) else {
            continue;
        };
        if previous.content == file.content {
            continue;
        }
        let (old, new) = (
            crt_list_lines(&previous.content),
            crt_list_lines(&file.content),
        );
        // `del ssl crt-list` names the line by its certificate: one named twice needs the
        // line number of the file HAProxy loaded, which runtime additions shift.
        for lines in [&old, &new] {
            let mut seen = std::collections::BTreeSet::new();
            if let Some(twice) = lines
                .iter()
                .map(|l| certificate_of(l))
                .find(|c| !seen.insert(*c))
            {
                return Err(format!(
                    "crt-list {path} names certificate {twice} on two lines"
                ));
            }
        }
        for line in old.iter().filter(|l| !new.contains(l)) {
            deletions.push(Operation::DelCrtListEntry {
                list: path.clone(),
                certificate: certificate_of(line).to_string(),
            });
        }
        for line in new.iter().filter(|l| !old.contains(l)) {
            additions.push(Operation::AddCrtListEntry {
                list: path.clone(),
                line: line.to_string(),
            });
        }
    }
    for path in from
        .iter()
        .filter(|(p, f)| f.kind == AuxKind::Cert && !to.contains_key(*p))
        .map(|(p, _)| p)
    {
        dropped.push(Operation::DelCertificate { path: path.clone() });
    }
    // A line that changes is deleted before it is added again; certificates exist before a
    // line names them and are deleted after no line does.
    let mut operations = stores;
    operations.append(&mut deletions);
    operations.append(&mut additions);
    operations.append(&mut dropped);
    Ok(operations)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(kind: AuxKind, path: &str, content: &str) -> (String, AuxFile) {
        (
            path.to_string(),
            AuxFile {
                kind,
                name: path.rsplit('/').next().unwrap_or(path).to_string(),
                path: path.to_string(),
                content: content.to_string(),
            },
        )
    }

    #[test]
    fn a_new_tls_host_creates_its_certificate_before_the_crt_list_line_that_names_it() {
        let from: BTreeMap<_, _> = [
            file(AuxKind::Cert, "ssl/a.pem", "A"),
            file(
                AuxKind::CrtList,
                "general/all.crtlist",
                "ssl/a.pem a.example\n",
            ),
        ]
        .into();
        let to: BTreeMap<_, _> = [
            file(AuxKind::Cert, "ssl/a.pem", "A"),
            file(AuxKind::Cert, "ssl/b.pem", "B"),
            file(
                AuxKind::CrtList,
                "general/all.crtlist",
                "ssl/a.pem a.example\n\nssl/b.pem b.example\n",
            ),
        ]
        .into();
        let ops = certificate_changes(&from, &to).expect("live");
        let text: Vec<String> = ops.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "runtime: new ssl cert ssl/b.pem",
                "runtime: add ssl crt-list general/all.crtlist ssl/b.pem b.example"
            ]
        );
        let back = certificate_changes(&to, &from).expect("live");
        let text: Vec<String> = back.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "runtime: del ssl crt-list general/all.crtlist ssl/b.pem",
                "runtime: del ssl cert ssl/b.pem"
            ]
        );
    }

    #[test]
    fn a_rotated_certificate_is_set_and_a_changed_line_is_replaced() {
        let from: BTreeMap<_, _> = [
            file(AuxKind::Cert, "ssl/a.pem", "A"),
            file(
                AuxKind::CrtList,
                "general/all.crtlist",
                "ssl/a.pem a.example\n",
            ),
        ]
        .into();
        let to: BTreeMap<_, _> = [
            file(AuxKind::Cert, "ssl/a.pem", "A2"),
            file(
                AuxKind::CrtList,
                "general/all.crtlist",
                "ssl/a.pem a.example www.a.example\n",
            ),
        ]
        .into();
        let text: Vec<String> = certificate_changes(&from, &to)
            .expect("live")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                "runtime: set ssl cert ssl/a.pem",
                "runtime: del ssl crt-list general/all.crtlist ssl/a.pem",
                "runtime: add ssl crt-list general/all.crtlist ssl/a.pem a.example www.a.example"
            ]
        );
    }

    #[test]
    fn a_certificate_named_on_two_lines_needs_a_reload() {
        let from: BTreeMap<_, _> =
            [file(AuxKind::CrtList, "l.crtlist", "ssl/a.pem a.example\n")].into();
        let to: BTreeMap<_, _> = [file(
            AuxKind::CrtList,
            "l.crtlist",
            "ssl/a.pem a.example\nssl/a.pem b.example\n",
        )]
        .into();
        let reason = certificate_changes(&from, &to).expect_err("reload");
        assert!(reason.contains("two lines"), "{reason}");
    }
}
