//! Keeping secrets out of what haptor shows: a rendered configuration on its way to a debug
//! endpoint or a published `HAProxyCfg` has its private keys (PEM `PRIVATE KEY` blocks of any
//! algorithm) and its userlist password hashes (`user NAME password HASH`,
//! `insecure-password`) replaced by a placeholder that carries the secret's SHA-256, so two
//! renders can still be compared without the secret being readable. Certificates, which
//! are public, are left as they are.

use sha2::{Digest, Sha256};

use crate::pure::rendered::{RenderedConfig, hex};

/// The placeholder for a secret: `<redacted WHAT sha256:HEX>`.
fn placeholder(what: &str, secret: &str) -> String {
    format!(
        "<redacted {what} sha256:{}>",
        hex(&Sha256::digest(secret.as_bytes()))
    )
}

/// The text with every PEM private-key block and every userlist password replaced by a
/// placeholder.
pub fn redact_secrets(text: &str) -> String {
    // A render without keys (most `haproxy.cfg`s) is copied once, by `redact_passwords`.
    match find_private_key_begin(text) {
        Some(_) => redact_passwords(&redact_private_keys(text)),
        None => redact_passwords(text),
    }
}

/// `-----BEGIN ... PRIVATE KEY-----` through its `-----END ... PRIVATE KEY-----` line (an
/// unterminated block to the end of the text).
fn redact_private_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = find_private_key_begin(rest) {
        out.push_str(&rest[..start]);
        let block = &rest[start..];
        let end = block
            .find("-----END ")
            .and_then(|end| {
                let after = &block[end..];
                let line_end = after.find('\n').map_or(after.len(), |n| n + 1);
                after[..line_end]
                    .contains("PRIVATE KEY-----")
                    .then_some(end + line_end)
            })
            .unwrap_or(block.len());
        let secret = &block[..end];
        out.push_str(&placeholder("private key", secret));
        if secret.ends_with('\n') {
            out.push('\n');
        }
        rest = &block[end..];
    }
    out.push_str(rest);
    out
}

/// Where the next `-----BEGIN <anything> PRIVATE KEY-----` line starts.
fn find_private_key_begin(text: &str) -> Option<usize> {
    let mut offset = 0;
    while let Some(found) = text[offset..].find("-----BEGIN ") {
        let at = offset + found;
        let line_end = text[at..].find('\n').map_or(text.len(), |n| at + n);
        if text[at..line_end].contains("PRIVATE KEY-----") {
            return Some(at);
        }
        offset = at + "-----BEGIN ".len();
    }
    None
}

/// The word after `password` / `insecure-password` on a userlist `user` line.
fn redact_passwords(text: &str) -> String {
    // Most configurations have no userlist: one substring search instead of a word split
    // of every line (renders of a megabyte happen at every endpoint change).
    if !text.contains("password") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let words: Vec<&str> = line.split_whitespace().collect();
        let position = words
            .iter()
            .position(|w| *w == "password" || *w == "insecure-password");
        match (words.first(), position) {
            (Some(&"user"), Some(at)) if at + 1 < words.len() => {
                let secret = words[at + 1];
                let indent = &line[..line.len() - line.trim_start().len()];
                let ending = &line[line.trim_end_matches(['\r', '\n']).len()..];
                let mut redacted: Vec<String> = words.iter().map(|w| w.to_string()).collect();
                redacted[at + 1] = placeholder("password", secret);
                out.push_str(indent);
                out.push_str(&redacted.join(" "));
                out.push_str(ending);
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// A copy of a render fit to show: `haproxy.cfg` and every auxiliary file redacted.
pub fn redacted_render(rendered: &RenderedConfig) -> RenderedConfig {
    let mut shown = rendered.clone();
    shown.haproxy_cfg = redact_secrets(&shown.haproxy_cfg);
    for file in shown.aux_files.values_mut() {
        file.content = redact_secrets(&file.content);
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n";
    const KEY: &str =
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIsecret\n-----END EC PRIVATE KEY-----\n";

    #[test]
    fn a_private_key_is_replaced_by_its_checksum_and_the_certificate_stays() {
        let pem = format!("{CERT}{KEY}");
        let shown = redact_secrets(&pem);
        assert!(shown.starts_with(CERT), "{shown}");
        assert!(!shown.contains("MHcCAQEEIsecret"), "{shown}");
        assert!(shown.contains("<redacted private key sha256:"), "{shown}");
        assert!(shown.ends_with(">\n"), "{shown:?}");
    }

    #[test]
    fn the_same_key_gives_the_same_placeholder_and_another_key_another() {
        let other = KEY.replace("secret", "other");
        assert_eq!(redact_secrets(KEY), redact_secrets(KEY));
        assert_ne!(redact_secrets(KEY), redact_secrets(&other));
    }

    #[test]
    fn keys_of_every_algorithm_and_an_unterminated_block_are_redacted() {
        for begin in ["PRIVATE KEY", "RSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY"] {
            let text = format!("-----BEGIN {begin}-----\nabc\n-----END {begin}-----\n");
            assert!(!redact_secrets(&text).contains("abc"), "{begin}");
        }
        let cut = "-----BEGIN PRIVATE KEY-----\nabc";
        assert!(!redact_secrets(cut).contains("abc"));
    }

    #[test]
    fn userlist_password_hashes_are_redacted_and_other_lines_kept() {
        let cfg = "userlist ul\n  user alice password $6$salt$hash groups admins\n  user bob insecure-password plain\n  group admins\nbackend b\n  server s 1.2.3.4:80\n";
        let shown = redact_secrets(cfg);
        assert!(
            !shown.contains("$6$salt$hash") && !shown.contains("plain"),
            "{shown}"
        );
        assert!(
            shown.contains("  user alice password <redacted password sha256:"),
            "{shown}"
        );
        assert!(shown.contains(" groups admins\n"), "{shown}");
        assert!(shown.contains("  group admins\nbackend b\n  server s 1.2.3.4:80\n"));
    }

    #[test]
    fn text_without_secrets_is_unchanged() {
        let cfg = "global\n  maxconn 10\n# password in a comment\n";
        assert_eq!(redact_secrets(cfg), cfg);
        assert_eq!(redact_secrets(CERT), CERT);
    }
}
