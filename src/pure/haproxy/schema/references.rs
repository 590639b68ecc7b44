//! The schema check's rules across sections: names that must be unique (two frontends, two
//! backends, two servers of one backend), and names that must refer to a section or server
//! the configuration defines (`default_backend`, `use_backend`, `use-server`, `track`, a
//! rule's `table`, a stick table's `peers`, a server's `resolvers`, `http_auth(...)`,
//! caches, `errorfiles`, `email-alert mailers`). HAProxy reports most of these after the
//! parse, naming no line; the check names the line that refers.

use std::collections::HashMap;

use super::super::ast::{Config, DirectiveKind, Section};
use super::super::sections::SectionKind;
use super::Checker;

/// What the configuration defines, by kind of name.
#[derive(Default)]
struct Defined<'c> {
    backends: Vec<&'c str>,
    /// Proxies with a `stick-table`, and `peers` sections' `table` names.
    tables: Vec<String>,
    peers: Vec<&'c str>,
    resolvers: Vec<&'c str>,
    userlists: Vec<&'c str>,
    caches: Vec<&'c str>,
    http_errors: Vec<&'c str>,
    mailers: Vec<&'c str>,
    /// Servers by the backend or listen section that holds them.
    servers: HashMap<&'c str, Vec<&'c str>>,
}

/// Whether a name is resolved at run time (a log-format expression, an environment
/// variable) and so cannot be judged.
fn dynamic(name: &str) -> bool {
    name.contains('%') || name.contains('$')
}

/// The statements of a section outside `.if` blocks (their lines are not judged).
fn statements(section: &Section) -> impl Iterator<Item = (usize, &[String])> {
    let mut depth = 0usize;
    section.directives.iter().filter_map(move |directive| {
        match directive.keyword() {
            ".if" => depth += 1,
            ".endif" => depth = depth.saturating_sub(1),
            _ => {}
        }
        (depth == 0 && directive.kind() == DirectiveKind::Statement && !directive.words.is_empty())
            .then_some((directive.line, directive.words.as_slice()))
    })
}

fn defined(config: &Config) -> Defined<'_> {
    let mut defined = Defined::default();
    for section in &config.sections {
        let Some(name) = section.name.as_deref() else {
            continue;
        };
        match section.kind {
            SectionKind::Backend | SectionKind::Listen => defined.backends.push(name),
            SectionKind::Peers => defined.peers.push(name),
            SectionKind::Resolvers => defined.resolvers.push(name),
            SectionKind::Userlist => defined.userlists.push(name),
            SectionKind::Cache => defined.caches.push(name),
            SectionKind::HttpErrors => defined.http_errors.push(name),
            SectionKind::Mailers => defined.mailers.push(name),
            _ => {}
        }
        for (_, words) in statements(section) {
            match words[0].as_str() {
                "stick-table" if section.kind.is_proxy() => defined.tables.push(name.to_owned()),
                "table" if section.kind == SectionKind::Peers => {
                    if let Some(table) = words.get(1) {
                        defined.tables.push(table.clone());
                        defined.tables.push(format!("{name}/{table}"));
                    }
                }
                "server" if matches!(section.kind, SectionKind::Backend | SectionKind::Listen) => {
                    if let Some(server) = words.get(1) {
                        defined.servers.entry(name).or_default().push(server);
                    }
                }
                _ => {}
            }
        }
    }
    defined
}

impl Checker {
    /// Checks names across the configuration (see the module's paragraph).
    pub(super) fn check_references(&mut self, config: &Config) {
        if config
            .sections
            .iter()
            .flat_map(|section| section.directives.iter())
            .chain(config.preamble.iter())
            .any(|directive| directive.keyword() == ".if")
        {
            // A section or server defined inside an `.if` block may exist or not.
            return;
        }
        let defined = defined(config);
        self.check_unique_names(config);
        for section in &config.sections {
            if !section.kind.is_proxy() {
                continue;
            }
            let own = section.name.as_deref().unwrap_or("");
            for (line, words) in statements(section) {
                self.check_directive_references(section, own, &defined, line, words);
            }
        }
    }

    fn check_unique_names(&mut self, config: &Config) {
        let mut frontends: HashMap<&str, usize> = HashMap::new();
        let mut backends: HashMap<&str, usize> = HashMap::new();
        for section in &config.sections {
            let Some(name) = section.name.as_deref() else {
                continue;
            };
            let sides: &mut [(&mut HashMap<&str, usize>, bool)] = &mut [
                (
                    &mut frontends,
                    matches!(section.kind, SectionKind::Frontend | SectionKind::Listen),
                ),
                (
                    &mut backends,
                    matches!(section.kind, SectionKind::Backend | SectionKind::Listen),
                ),
            ];
            for (seen, applies) in sides.iter_mut() {
                if !*applies {
                    continue;
                }
                if let Some(first) = seen.get(name) {
                    self.report(
                        section.line,
                        format!(
                            "'{} {name}' has the same name as the proxy declared at line {first}",
                            section.keyword()
                        ),
                    );
                    break;
                }
                seen.insert(name, section.line);
            }
            if matches!(section.kind, SectionKind::Backend | SectionKind::Listen) {
                let mut servers: HashMap<&str, usize> = HashMap::new();
                for (line, words) in statements(section) {
                    if words[0] == "server"
                        && let Some(server) = words.get(1)
                    {
                        if let Some(first) = servers.get(server.as_str()) {
                            self.report(
                                line,
                                format!(
                                    "'{name}' already has a server named '{server}' (line {first}); server names must differ within a backend"
                                ),
                            );
                        } else {
                            servers.insert(server, line);
                        }
                    }
                }
            }
        }
    }

    fn check_directive_references(
        &mut self,
        section: &Section,
        own: &str,
        defined: &Defined<'_>,
        line: usize,
        words: &[String],
    ) {
        let missing = |list: &[&str], name: &str| !dynamic(name) && !list.contains(&name);
        let word = |index: usize| words.get(index).map(String::as_str);
        match words[0].as_str() {
            "default_backend" | "use_backend" => {
                if let Some(name) = word(1)
                    && missing(&defined.backends, name)
                {
                    self.report(
                        line,
                        format!(
                            "'{}' names backend '{name}', which no backend or listen section defines",
                            words[0]
                        ),
                    );
                }
            }
            "use-server" => {
                let servers = defined.servers.get(own).map(Vec::as_slice).unwrap_or(&[]);
                if let Some(name) = word(1)
                    && section.kind != SectionKind::Defaults
                    && missing(servers, name)
                {
                    self.report(
                        line,
                        format!("'use-server' names server '{name}', which '{own}' does not have"),
                    );
                }
            }
            "stick-table" => {
                if let Some(index) = words.iter().position(|w| w == "peers")
                    && let Some(name) = word(index + 1)
                    && missing(&defined.peers, name)
                {
                    self.report(
                        line,
                        format!("the stick table's 'peers {name}' names no peers section"),
                    );
                }
            }
            "errorfiles" => {
                if let Some(name) = word(1)
                    && missing(&defined.http_errors, name)
                {
                    self.report(
                        line,
                        format!("'errorfiles {name}' names no http-errors section"),
                    );
                }
            }
            "email-alert" if word(1) == Some("mailers") => {
                if let Some(name) = word(2)
                    && missing(&defined.mailers, name)
                {
                    self.report(
                        line,
                        format!("'email-alert mailers {name}' names no mailers section"),
                    );
                }
            }
            "filter" if word(1) == Some("cache") => {
                if let Some(name) = word(2)
                    && missing(&defined.caches, name)
                {
                    self.report(
                        line,
                        format!("'filter cache {name}' names no cache section"),
                    );
                }
            }
            "server" | "default-server" | "server-template" => {
                self.check_server_references(own, defined, line, words);
            }
            _ => {}
        }
        let rule = matches!(
            words[0].as_str(),
            "http-request" | "http-response" | "tcp-request" | "tcp-response"
        );
        for (index, word) in words.iter().enumerate() {
            if rule
                && word == "table"
                && let Some(name) = words.get(index + 1)
                && !dynamic(name)
                && !defined.tables.iter().any(|table| table == name)
            {
                self.report(
                    line,
                    format!("'table {name}' names no proxy with a stick-table nor a peers table"),
                );
            }
            if rule
                && matches!(word.as_str(), "cache-use" | "cache-store")
                && let Some(name) = words.get(index + 1)
                && missing(&defined.caches, name)
            {
                self.report(line, format!("'{word} {name}' names no cache section"));
            }
            for function in ["http_auth(", "http_auth_group("] {
                if let Some(start) = word.find(function) {
                    let rest = &word[start + function.len()..];
                    let name = rest.split([')', ',']).next().unwrap_or("");
                    if !name.is_empty() && missing(&defined.userlists, name) {
                        self.report(
                            line,
                            format!("'{function}{name})' names no userlist section"),
                        );
                    }
                }
            }
        }
    }

    fn check_server_references(
        &mut self,
        own: &str,
        defined: &Defined<'_>,
        line: usize,
        words: &[String],
    ) {
        let missing = |list: &[&str], name: &str| !dynamic(name) && !list.contains(&name);
        // The parameters follow the name and address (a server-template's prefix, count and
        // address).
        let first = if words[0] == "server-template" { 4 } else { 2 };
        for (index, word) in words.iter().enumerate().skip(first) {
            let Some(value) = words.get(index + 1) else {
                break;
            };
            match word.as_str() {
                "resolvers" if missing(&defined.resolvers, value) => self.report(
                    line,
                    format!("'resolvers {value}' names no resolvers section"),
                ),
                "track" if !dynamic(value) => {
                    let (backend, server) = value.split_once('/').unwrap_or((own, value));
                    let known = defined
                        .servers
                        .get(backend)
                        .is_some_and(|servers| servers.contains(&server));
                    if !known {
                        self.report(
                            line,
                            format!("'track {value}' names no server '{server}' in '{backend}'"),
                        );
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_one_problem, problems};

    #[test]
    fn proxies_and_servers_of_one_backend_have_distinct_names() {
        assert_one_problem(
            "backend be\n    server s1 127.0.0.1:80\nbackend be\n    server s1 127.0.0.1:81\n",
            3,
            "same name as the proxy declared at line 1",
        );
        assert_one_problem(
            "backend be\n    server s1 127.0.0.1:80\n    server s1 127.0.0.1:81\n",
            3,
            "already has a server named 's1'",
        );
        // A frontend and a backend may share a name.
        assert!(problems("frontend app\n    default_backend app\nbackend app\n").is_empty());
    }

    #[test]
    fn names_refer_to_sections_and_servers_the_configuration_defines() {
        assert_one_problem(
            "frontend fe\n    default_backend nosuch\n",
            2,
            "backend 'nosuch'",
        );
        assert_one_problem(
            "backend be\n    server s1 127.0.0.1:80 track nosrv\n",
            2,
            "'track nosrv'",
        );
        assert_one_problem(
            "frontend fe\n    http-request track-sc0 src table nosuch\n",
            2,
            "'table nosuch'",
        );
        assert_one_problem(
            "backend be\n    stick-table type ip size 1k peers nosuch\n",
            2,
            "'peers nosuch'",
        );
        assert_one_problem(
            "backend be\n    server s1 127.0.0.1:80 resolvers dns\n",
            2,
            "'resolvers dns'",
        );
        assert_one_problem(
            "frontend fe\n    http-request auth if !{ http_auth(admins) }\n",
            2,
            "'http_auth(admins)'",
        );
        assert!(
            problems("resolvers dns\n    nameserver ns 127.0.0.1:53\nuserlist admins\n    user a insecure-password b\nfrontend fe\n    http-request auth if !{ http_auth(admins) }\n    http-request track-sc0 src table be\n    use_backend %[req.hdr(host)]\n    default_backend be\nbackend be\n    stick-table type ip size 1k\n    server s1 127.0.0.1:80 resolvers dns\n    server s2 127.0.0.1:81 track s1\n")
                .is_empty()
        );
    }
}
