//! Dynamic servers: which `server` lines that appear in or leave a backend HAProxy can add
//! (`add server`) or delete (`del server`) through the runtime API instead of a reload, and
//! the parameters an added server needs. HAProxy adds servers only to backends whose
//! load-balancing algorithm is dynamic, gives them none of the `default-server` settings
//! (so the plan writes those out), and accepts only some parameters on them; anything else
//! is a reason to reload, named as such.

use crate::pure::haproxy::{Section, SectionKind};

/// The server parameters `add server` accepts on every supported HAProxy line (2.6 on),
/// with whether each takes a value. Parameters that name files (`ca-file`, `crt`,
/// `crl-file`: a runtime server finds them only among certificates already loaded, by the
/// name the configuration gave them), resolve names (`resolvers`, `init-addr`), `cookie`
/// (refused by 2.6) and `track` are left to a reload.
const RUNTIME_PARAMETERS: &[(&str, bool)] = &[
    ("agent-addr", true),
    ("agent-check", false),
    ("agent-inter", true),
    ("agent-port", true),
    ("agent-send", true),
    ("allow-0rtt", false),
    ("alpn", true),
    ("backup", false),
    ("check", false),
    ("check-alpn", true),
    ("check-proto", true),
    ("check-send-proxy", false),
    ("check-sni", true),
    ("check-ssl", false),
    ("check-via-socks4", false),
    ("ciphers", true),
    ("ciphersuites", true),
    ("disabled", false),
    ("downinter", true),
    ("enabled", false),
    ("error-limit", true),
    ("fall", true),
    ("fastinter", true),
    ("force-tlsv12", false),
    ("force-tlsv13", false),
    ("inter", true),
    ("max-reuse", true),
    ("maxconn", true),
    ("maxqueue", true),
    ("minconn", true),
    ("no-backup", false),
    ("no-check", false),
    ("no-check-ssl", false),
    ("no-send-proxy", false),
    ("no-send-proxy-v2", false),
    ("no-ssl", false),
    ("no-ssl-reuse", false),
    ("no-sslv3", false),
    ("no-tls-tickets", false),
    ("no-tlsv10", false),
    ("no-tlsv11", false),
    ("no-tlsv12", false),
    ("no-tlsv13", false),
    ("observe", true),
    ("on-error", true),
    ("on-marked-down", true),
    ("on-marked-up", true),
    ("pool-low-conn", true),
    ("pool-max-conn", true),
    ("pool-purge-delay", true),
    ("proto", true),
    ("proxy-v2-options", true),
    ("rise", true),
    ("send-proxy", false),
    ("send-proxy-v2", false),
    ("send-proxy-v2-ssl", false),
    ("send-proxy-v2-ssl-cn", false),
    ("slowstart", true),
    ("sni", true),
    ("ssl", false),
    ("ssl-max-ver", true),
    ("ssl-min-ver", true),
    ("ssl-reuse", false),
    ("tfo", false),
    ("tls-tickets", false),
    ("verify", true),
    ("verifyhost", true),
    ("weight", true),
    ("ws", true),
];

/// Whether `keyword` is a parameter `add server` accepts, and whether it takes a value;
/// `None` for any other.
pub fn runtime_parameter(keyword: &str) -> Option<bool> {
    RUNTIME_PARAMETERS
        .binary_search_by(|(name, _)| name.cmp(&keyword))
        .ok()
        .map(|at| RUNTIME_PARAMETERS[at].1)
}

/// Why servers cannot come and go at runtime in `backend` (with `defaults`, the defaults
/// section it takes its settings from), or `None` when they can: its algorithm must be
/// dynamic (HAProxy refuses `add server` otherwise).
pub fn static_backend_reason(defaults: Option<&Section>, backend: &Section) -> Option<String> {
    let name = backend.name.as_deref().unwrap_or_default();
    if !backend.args.is_empty() {
        return Some(format!(
            "backend {name} names its defaults section ({}), which the plan does not follow",
            backend.args.join(" ")
        ));
    }
    let last = |section: Option<&Section>, keyword: &str| -> Option<Vec<String>> {
        section?
            .directives
            .iter()
            .rev()
            .find(|d| d.keyword() == keyword)
            .map(|d| d.words[1..].to_vec())
    };
    let balance = last(Some(backend), "balance")
        .or_else(|| last(defaults, "balance"))
        .unwrap_or_else(|| vec!["roundrobin".into()]);
    let hash_type = last(Some(backend), "hash-type").or_else(|| last(defaults, "hash-type"));
    let consistent = hash_type
        .as_deref()
        .and_then(<[String]>::first)
        .is_some_and(|t| t == "consistent");
    let algorithm = balance.first().map(String::as_str).unwrap_or("roundrobin");
    let base = algorithm.split('(').next().unwrap_or(algorithm);
    let dynamic = match base {
        "roundrobin" | "leastconn" | "first" | "random" => true,
        "source" | "uri" | "url_param" | "hdr" | "rdp-cookie" | "hash" => consistent,
        _ => false,
    };
    (!dynamic).then(|| {
        format!(
            "backend {name} balances with '{}'{}, a static algorithm: HAProxy adds and deletes servers at runtime only with a dynamic one",
            balance.join(" "),
            if consistent || base == "static-rr" {
                ""
            } else {
                " without hash-type consistent"
            }
        )
    })
}

/// The parameters an added server gets: the `default-server` words of `defaults` and of
/// `backend`, then the server line's own (`words` from the keyword `server` on), since
/// HAProxy gives a runtime server no `default-server` setting. Every word must be a
/// parameter `add server` accepts; the first that is not is the error.
pub fn added_server_parameters(
    defaults: Option<&Section>,
    backend: &Section,
    words: &[String],
) -> Result<Vec<String>, String> {
    let name = words.get(1).map(String::as_str).unwrap_or_default();
    let backend_name = backend.name.as_deref().unwrap_or_default();
    let inherited = defaults
        .into_iter()
        .chain([backend])
        .flat_map(|section| &section.directives)
        .filter(|d| d.keyword() == "default-server")
        .flat_map(|d| d.words[1..].iter());
    let parameters: Vec<String> = inherited.chain(words.iter().skip(3)).cloned().collect();
    let mut index = 0;
    while index < parameters.len() {
        let keyword = parameters[index].as_str();
        match runtime_parameter(keyword) {
            Some(takes_value) => index += 1 + usize::from(takes_value),
            None => {
                return Err(format!(
                    "server {backend_name}/{name} has '{keyword}', which HAProxy does not accept on a server added at runtime"
                ));
            }
        }
    }
    if index > parameters.len() {
        return Err(format!(
            "server {backend_name}/{name}: '{}' has no value",
            parameters.last().map(String::as_str).unwrap_or_default()
        ));
    }
    Ok(parameters)
}

/// The defaults section that applies to each proxy of `sections`: the last `defaults`
/// section above it, or `outer` (the last one above all of them) when there is none.
pub fn applicable_defaults<'a>(
    sections: &'a [Section],
    outer: Option<&'a Section>,
) -> Vec<Option<&'a Section>> {
    let mut current = outer;
    sections
        .iter()
        .map(|section| {
            if section.kind == SectionKind::Defaults {
                current = Some(section);
            }
            current
        })
        .collect()
}

/// Whether a parameter list leaves the server disabled: a `disabled` after the last
/// `enabled`.
pub fn starts_disabled(parameters: &[String]) -> bool {
    last_of(parameters, &["disabled", "enabled"]) == Some("disabled")
}

/// Whether a parameter list turns health checks on (`check` after the last `no-check`).
pub fn checks_health(parameters: &[String]) -> bool {
    last_of(parameters, &["check", "no-check"]) == Some("check")
}

/// Whether a parameter list turns the agent check on.
pub fn checks_agent(parameters: &[String]) -> bool {
    last_of(parameters, &["agent-check", "no-agent-check"]) == Some("agent-check")
}

/// The last of `keywords` among the parameter keywords (values skipped).
fn last_of<'p>(parameters: &'p [String], keywords: &[&str]) -> Option<&'p str> {
    let mut found = None;
    let mut index = 0;
    while index < parameters.len() {
        let word = parameters[index].as_str();
        if keywords.contains(&word) {
            found = Some(word);
        }
        index += 1 + usize::from(runtime_parameter(word).unwrap_or(false));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::haproxy::parse_config;

    fn sections(text: &str) -> Vec<Section> {
        parse_config(text).expect("parses").sections
    }

    #[test]
    fn the_parameter_table_is_sorted_so_lookups_find_every_entry() {
        assert!(RUNTIME_PARAMETERS.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(
            RUNTIME_PARAMETERS
                .iter()
                .all(|(k, _)| runtime_parameter(k).is_some())
        );
    }

    #[test]
    fn roundrobin_leastconn_and_consistent_hashing_take_servers_at_runtime() {
        for body in [
            "",
            "  balance leastconn\n",
            "  balance source\n  hash-type consistent\n",
            "  balance hdr(host)\n  hash-type consistent\n",
        ] {
            let parsed = sections(&format!("backend be\n{body}"));
            assert_eq!(static_backend_reason(None, &parsed[0]), None, "{body}");
        }
    }

    #[test]
    fn static_round_robin_and_map_based_hashing_do_not() {
        for body in ["  balance static-rr\n", "  balance uri\n"] {
            let parsed = sections(&format!("backend be\n{body}"));
            let reason = static_backend_reason(None, &parsed[0]).expect("static");
            assert!(reason.contains("static algorithm"), "{reason}");
        }
    }

    #[test]
    fn a_backend_inherits_its_algorithm_from_the_defaults_above_it() {
        let parsed = sections("defaults\n  balance static-rr\nbackend be\n  server a 1.1.1.1:80\n");
        let defaults = applicable_defaults(&parsed, None);
        assert!(static_backend_reason(defaults[1], &parsed[1]).is_some());
    }

    #[test]
    fn an_added_server_carries_the_default_server_settings_it_would_inherit() {
        let parsed = sections(
            "defaults\n  default-server inter 2s\nbackend be\n  default-server check maxconn 5\n  server a 1.1.1.1:80 weight 3\n",
        );
        let words = &parsed[1].directives[1].words;
        let parameters =
            added_server_parameters(Some(&parsed[0]), &parsed[1], words).expect("accepted");
        assert_eq!(
            parameters,
            ["inter", "2s", "check", "maxconn", "5", "weight", "3"]
        );
        assert!(checks_health(&parameters));
        assert!(!starts_disabled(&parameters));
    }

    #[test]
    fn a_parameter_runtime_servers_refuse_is_named() {
        let parsed = sections("backend be\n  server a 1.1.1.1:80 cookie a\n");
        let error = added_server_parameters(None, &parsed[0], &parsed[0].directives[0].words)
            .expect_err("refused");
        assert!(
            error.contains("'cookie'") && error.contains("be/a"),
            "{error}"
        );
    }
}
