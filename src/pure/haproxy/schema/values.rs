//! The schema check's rules for argument values of common directives: ports of `log`
//! targets, the multiplexer named by `proto` on `bind` and `server` lines, the certificate
//! error lists of `ca-ignore-err` and `crt-ignore-err`, the words of the global
//! `ssl-default-bind-options` and `ssl-default-server-options`, the address family of a
//! `bind` address whose rest comes from the environment, and the words after a proxy name.

use super::super::ast::{Directive, Section};
use super::super::sections::SectionKind;
use super::super::versions::{HaproxyVersion, certainly_before};
use super::{Checker, invalid_name_character};

/// Multiplexer protocols HAProxy 2.6 lets `proto` name (`haproxy -vv`, "Available
/// multiplexer protocols"); `fcgi` serves only servers.
const MUX_PROTOCOLS: &[&str] = &["fcgi", "h1", "h2", "none"];

/// SSL/TLS versions of `ssl-min-ver` and `ssl-max-ver`.
const TLS_VERSIONS: &[&str] = &["SSLv3", "TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3"];

/// Protocol versions that `no-<version>` and `force-<version>` name.
const TLS_METHOD_NAMES: &[&str] = &["sslv3", "tlsv10", "tlsv11", "tlsv12", "tlsv13"];

impl Checker {
    /// Checks the values of a directive (without `no`/`default` prefix; `offset` is the
    /// index of `words[0]` in the directive).
    pub(super) fn check_values(
        &mut self,
        section: &Section,
        directive: &Directive,
        offset: usize,
        words: &[String],
    ) {
        let literal = |index: usize| -> Option<&str> {
            let word = words.get(index)?;
            (!directive.word_has_env_ref(offset + index)).then_some(word.as_str())
        };
        let line = directive.line;
        match (section.kind, words[0].as_str()) {
            (_, "log") => {
                if let Some(target) = literal(1) {
                    self.check_log_port(line, target);
                }
            }
            (SectionKind::Frontend | SectionKind::Listen, "bind") => {
                if directive.word_has_env_ref(offset + 1)
                    && let Some(prefix) = words.get(1).and_then(|address| {
                        address
                            .split_once('$')
                            .map(|(prefix, _)| prefix)
                            .filter(|prefix| prefix.contains('@'))
                    })
                {
                    self.check_address_family(line, "bind", prefix);
                }
                self.check_line_values(line, "bind", words, 2, &literal);
            }
            (_, "server" | "default-server") if section.kind.is_proxy() => {
                let first = if words[0] == "server" { 3 } else { 1 };
                if words[0] == "server"
                    && let Some(name) = literal(1)
                    && let Some(bad) = invalid_name_character(name)
                {
                    self.report(
                        line,
                        format!(
                            "character '{bad}' is not permitted in server name '{name}' (HAProxy allows letters, digits, '-', '_', '.' and ':')"
                        ),
                    );
                }
                self.check_line_values(line, &words[0], words, first, &literal);
            }
            (SectionKind::Global, "ssl-default-bind-options" | "ssl-default-server-options") => {
                self.check_ssl_default_options(line, &words[0], words, &literal);
            }
            _ => {}
        }
    }

    /// `log <address>`: HAProxy 2.6 refuses a port range (`10001-10010`) or a port offset
    /// (`+10011`) there.
    fn check_log_port(&mut self, line: usize, target: &str) {
        if target.starts_with('/') {
            return;
        }
        let address = target.split_once('@').map_or(target, |(_, rest)| rest);
        let port = match address.rsplit_once("]:") {
            Some((_, port)) => port,
            None => match address.rsplit_once(':') {
                Some((_, port)) => port,
                None => return,
            },
        };
        let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        let what = if port
            .split_once('-')
            .is_some_and(|(low, high)| digits(low) && digits(high))
        {
            "range"
        } else if port.strip_prefix(['+', '-']).is_some_and(digits) {
            "offset"
        } else {
            return;
        };
        self.report(
            line,
            format!(
                "log : port {what} not permitted here in '{target}' (a log target takes one port, such as 127.0.0.1:514)"
            ),
        );
    }

    /// Parameter values of `bind` and `server` lines: `proto` names a known multiplexer;
    /// `ca-ignore-err` and `crt-ignore-err` take `all` or numeric error IDs in 2.6 (names
    /// came later).
    fn check_line_values<'w>(
        &mut self,
        line: usize,
        keyword: &str,
        words: &'w [String],
        first: usize,
        literal: &dyn Fn(usize) -> Option<&'w str>,
    ) {
        for (index, param) in words.iter().enumerate().skip(first) {
            let Some(value) = literal(index + 1) else {
                continue;
            };
            match param.as_str() {
                "proto" if !MUX_PROTOCOLS.contains(&value) => self.report(
                    line,
                    format!(
                        "'{keyword}' : 'proto' : unknown MUX protocol '{value}' (HAProxy 2.6 knows {})",
                        MUX_PROTOCOLS.join(", ")
                    ),
                ),
                param @ ("ca-ignore-err" | "crt-ignore-err")
                    if keyword == "bind"
                        && self.target <= HaproxyVersion::V2_6
                        && value != "all"
                        && value.split(',').any(|id| {
                            !id.parse::<u32>().is_ok_and(|number| number >= 1)
                        }) =>
                {
                    self.report(
                        line,
                        format!(
                            "'{param}' takes 'all' or a comma-separated list of numeric error IDs in HAProxy 2.6, not '{value}'"
                        ),
                    );
                }
                _ => {}
            }
        }
    }

    /// `ssl-default-bind-options` and `ssl-default-server-options` take only
    /// `no-tls-tickets`, `ssl-min-ver <v>`, `ssl-max-ver <v>`, `no-<version>` and
    /// `force-<version>`, and the bind one also `prefer-client-ciphers`.
    fn check_ssl_default_options<'w>(
        &mut self,
        line: usize,
        keyword: &str,
        words: &'w [String],
        literal: &dyn Fn(usize) -> Option<&'w str>,
    ) {
        let mut index = 1;
        while index < words.len() {
            let Some(option) = literal(index) else {
                index += 1;
                continue;
            };
            let method = option
                .strip_prefix("no-")
                .or_else(|| option.strip_prefix("force-"));
            let known = option == "no-tls-tickets"
                || (option == "prefer-client-ciphers" && keyword == "ssl-default-bind-options")
                || (option == "strict-sni"
                    && keyword == "ssl-default-bind-options"
                    && !certainly_before(self.target, HaproxyVersion::V3_2))
                || method.is_some_and(|method| TLS_METHOD_NAMES.contains(&method));
            if option == "ssl-min-ver" || option == "ssl-max-ver" {
                match words.get(index + 1) {
                    None => {
                        self.report(
                            line,
                            format!("'{option}' : missing the ssl/tls version on global statement '{keyword}'"),
                        );
                        return;
                    }
                    Some(_) => {
                        if let Some(version) = literal(index + 1)
                            && !TLS_VERSIONS.contains(&version)
                        {
                            self.report(
                                line,
                                format!(
                                    "'{version}' : unknown ssl/tls version on global statement '{keyword}' (known: {})",
                                    TLS_VERSIONS.join(", ")
                                ),
                            );
                            return;
                        }
                        index += 2;
                        continue;
                    }
                }
            }
            if !known {
                self.report(
                    line,
                    format!(
                        "unknown option '{option}' on global statement '{keyword}' (it takes no-tls-tickets, ssl-min-ver, ssl-max-ver, no-<version>, force-<version>{})",
                        if keyword == "ssl-default-bind-options" {
                            " and prefer-client-ciphers"
                        } else {
                            ""
                        }
                    ),
                );
                return;
            }
            index += 1;
        }
    }

    /// The words after a `frontend` or `listen` name: only `from <defaults>` (HAProxy 2.6
    /// asks for `bind` lines for addresses, which older versions took there).
    pub(super) fn check_header_words(&mut self, section: &Section) {
        if !matches!(section.kind, SectionKind::Frontend | SectionKind::Listen)
            || section.name.is_none()
            || section.header_spans.iter().any(|span| span.word >= 2)
        {
            return;
        }
        let keyword = section.keyword();
        match section.args.as_slice() {
            [] => {}
            [from, _] if from == "from" => {}
            [from, _, extra, ..] if from == "from" => self.report(
                section.line,
                format!("'{keyword}' cannot handle unexpected argument '{extra}' after 'from <defaults>'"),
            ),
            [first, ..] => self.report(
                section.line,
                format!(
                    "'{keyword}' header: '{first}' is not allowed after the name; please use the 'bind' keyword for listening addresses (only 'from <defaults>' may follow the name)"
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {

    use super::super::tests::{assert_one_problem, problems};

    #[test]
    fn a_log_target_takes_one_port_not_a_range_or_an_offset() {
        assert_one_problem(
            "global\n    log 127.0.0.1:10001-10010 local0\n",
            2,
            "port range not permitted",
        );
        assert_one_problem(
            "global\n    log 127.0.0.1:+10011 local0\n",
            2,
            "port offset not permitted",
        );
        assert!(
            problems("global\n    log 127.0.0.1:514 local0\n    log [::1]:514 local0\n    log /dev/log local0\n    log udp@10.0.0.1:514 local0\n")
                .is_empty()
        );
    }

    #[test]
    fn proto_names_a_multiplexer_of_2_6() {
        assert_one_problem(
            "frontend fe\n    bind :80 proto qmux\n",
            2,
            "unknown MUX protocol 'qmux'",
        );
        assert!(
            problems("frontend fe\n    bind :80 proto h2\nbackend be\n    server s 10.0.0.1:9000 proto fcgi\n")
                .is_empty()
        );
    }

    #[test]
    fn ignored_certificate_errors_are_numeric_ids_in_2_6() {
        assert_one_problem(
            "frontend fe\n    bind :443 ssl crt a.pem crt-ignore-err X509_V_ERR_CERT_REVOKED\n",
            2,
            "numeric error IDs",
        );
        assert!(
            problems(
                "frontend fe\n    bind :443 ssl crt a.pem ca-ignore-err 10,23 crt-ignore-err all\n"
            )
            .is_empty()
        );
    }

    #[test]
    fn global_ssl_default_options_take_only_protocol_options() {
        assert_one_problem(
            "global\n    ssl-default-bind-options strict-sni\n",
            2,
            "unknown option 'strict-sni' on global statement 'ssl-default-bind-options'",
        );
        assert_one_problem(
            "global\n    ssl-default-server-options prefer-client-ciphers\n",
            2,
            "unknown option 'prefer-client-ciphers'",
        );
        assert_one_problem(
            "global\n    ssl-default-bind-options ssl-max-ver TLSv1.4\n",
            2,
            "unknown ssl/tls version",
        );
        assert!(
            problems("global\n    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets prefer-client-ciphers\n    ssl-default-server-options no-sslv3 force-tlsv12\n")
                .is_empty()
        );
    }

    #[test]
    fn a_frontend_header_takes_only_from_after_its_name() {
        assert_one_problem(
            "frontend b11 :11000,:11001\n    mode http\n",
            1,
            "please use the 'bind' keyword",
        );
        assert!(problems("defaults base\nfrontend fe from base\n    mode http\n").is_empty());
    }

    #[test]
    fn a_bind_address_family_is_judged_even_when_the_rest_comes_from_the_environment() {
        assert_one_problem(
            "frontend fe\n    bind \"quic+fd@${fe_quic}\" ssl crt a.pem\n",
            2,
            "'quic+' address family",
        );
        assert!(problems("frontend fe\n    bind \"fd@${fe}\"\n").is_empty());
    }
}
