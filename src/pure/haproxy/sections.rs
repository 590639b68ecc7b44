//! The section keywords of an HAProxy configuration file, defined once: [`SectionKind`] is the
//! list the parser splits sections by, the schema check judges headers by, the keyword tables
//! are keyed by and the `haproxy -c` preparation tracks the `global` section with.
//!
//! A line whose first word is one of these keywords opens a section; any other first word is
//! a directive of the current section, as in HAProxy. The list holds HAProxy 2.6's sections
//! ([`SectionKind::in_haproxy_2_6`]) and a few from later versions, so that a configuration
//! written for a newer HAProxy still parses into its sections and the schema check can name
//! the header HAProxy 2.6 would reject. Words HAProxy does not know as a section in any
//! version (HAProxy Enterprise's `dynamic-update`, say) are left out.

use std::fmt;

use serde::Serialize;

/// The section keywords haptor recognises: HAProxy 2.6's plus a few from later versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SectionKind {
    Global,
    Defaults,
    Frontend,
    Backend,
    Listen,
    Userlist,
    Peers,
    Resolvers,
    Mailers,
    Program,
    HttpErrors,
    Ring,
    Cache,
    LogForward,
    FcgiApp,
    CrtStore,
    Traces,
    Acme,
    LogProfile,
    #[serde(rename = "namespace_list")]
    NamespaceList,
}

impl SectionKind {
    /// Every section kind, in the order HAProxy's documentation lists them.
    pub const ALL: &'static [SectionKind] = &[
        SectionKind::Global,
        SectionKind::Defaults,
        SectionKind::Frontend,
        SectionKind::Backend,
        SectionKind::Listen,
        SectionKind::Userlist,
        SectionKind::Peers,
        SectionKind::Resolvers,
        SectionKind::Mailers,
        SectionKind::Program,
        SectionKind::HttpErrors,
        SectionKind::Ring,
        SectionKind::Cache,
        SectionKind::LogForward,
        SectionKind::FcgiApp,
        SectionKind::CrtStore,
        SectionKind::Traces,
        SectionKind::Acme,
        SectionKind::LogProfile,
        SectionKind::NamespaceList,
    ];

    /// The section kind whose header keyword is `word`, if `word` starts a section.
    pub fn from_keyword(word: &str) -> Option<SectionKind> {
        SectionKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.keyword() == word)
    }

    /// The header keyword, e.g. `"http-errors"`.
    pub fn keyword(self) -> &'static str {
        match self {
            SectionKind::Global => "global",
            SectionKind::Defaults => "defaults",
            SectionKind::Frontend => "frontend",
            SectionKind::Backend => "backend",
            SectionKind::Listen => "listen",
            SectionKind::Userlist => "userlist",
            SectionKind::Peers => "peers",
            SectionKind::Resolvers => "resolvers",
            SectionKind::Mailers => "mailers",
            SectionKind::Program => "program",
            SectionKind::HttpErrors => "http-errors",
            SectionKind::Ring => "ring",
            SectionKind::Cache => "cache",
            SectionKind::LogForward => "log-forward",
            SectionKind::FcgiApp => "fcgi-app",
            SectionKind::CrtStore => "crt-store",
            SectionKind::Traces => "traces",
            SectionKind::Acme => "acme",
            SectionKind::LogProfile => "log-profile",
            SectionKind::NamespaceList => "namespace_list",
        }
    }

    /// Whether HAProxy 2.6 knows this section. The others came later (`crt-store` in 3.0,
    /// `traces` and `log-profile` in 3.1, `acme` in 3.2); 2.6 reads their header as an
    /// unknown keyword of the section before.
    pub fn in_haproxy_2_6(self) -> bool {
        !matches!(
            self,
            SectionKind::CrtStore
                | SectionKind::Traces
                | SectionKind::Acme
                | SectionKind::LogProfile
        )
    }

    /// Whether this is a proxy section (`defaults`, `frontend`, `backend`, `listen`).
    pub fn is_proxy(self) -> bool {
        matches!(
            self,
            SectionKind::Defaults
                | SectionKind::Frontend
                | SectionKind::Backend
                | SectionKind::Listen
        )
    }

    /// Whether HAProxy requires a name after the keyword (all but `global`, `defaults`,
    /// `crt-store` and the singleton sections).
    pub fn needs_name(self) -> bool {
        !matches!(
            self,
            SectionKind::Global
                | SectionKind::Defaults
                | SectionKind::CrtStore
                | SectionKind::Traces
                | SectionKind::NamespaceList
        )
    }
}

impl fmt::Display for SectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.keyword())
    }
}

/// Whether a line whose first word is `word` opens a section.
pub fn is_section_keyword(word: &str) -> bool {
    SectionKind::from_keyword(word).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keywords of the kinds that pass `filter`, in [`SectionKind::ALL`] order.
    fn keywords_where(filter: impl Fn(SectionKind) -> bool) -> Vec<&'static str> {
        SectionKind::ALL
            .iter()
            .copied()
            .filter(|kind| filter(*kind))
            .map(SectionKind::keyword)
            .collect()
    }

    #[test]
    fn the_sections_of_haproxy_2_6_are_exactly_the_ones_it_registers() {
        // The sections HAProxy 2.6 registers (`REGISTER_CONFIG_SECTION` and the built-in
        // ones of `cfgparse.c`): `haproxy -c` of Debian's 2.6.12 reads each of these headers
        // as a section, and `crt-store`, `traces`, `acme`, `log-profile` and
        // `dynamic-update` as unknown keywords.
        assert_eq!(
            keywords_where(SectionKind::in_haproxy_2_6),
            [
                "global",
                "defaults",
                "frontend",
                "backend",
                "listen",
                "userlist",
                "peers",
                "resolvers",
                "mailers",
                "program",
                "http-errors",
                "ring",
                "cache",
                "log-forward",
                "fcgi-app",
                "namespace_list",
            ]
        );
    }

    #[test]
    fn the_sections_of_later_versions_are_recognised_but_not_in_haproxy_2_6() {
        assert_eq!(
            keywords_where(|kind| !kind.in_haproxy_2_6()),
            ["crt-store", "traces", "acme", "log-profile"]
        );
    }

    #[test]
    fn every_section_kind_is_found_by_its_keyword() {
        for (index, kind) in SectionKind::ALL.iter().enumerate() {
            assert_eq!(SectionKind::from_keyword(kind.keyword()), Some(*kind));
            assert!(
                !SectionKind::ALL[..index].contains(kind),
                "{kind} is listed twice"
            );
            // Exhaustive: adding a variant fails to compile here, a reminder to list it in ALL.
            let position = match kind {
                SectionKind::Global => 0,
                SectionKind::Defaults => 1,
                SectionKind::Frontend => 2,
                SectionKind::Backend => 3,
                SectionKind::Listen => 4,
                SectionKind::Userlist => 5,
                SectionKind::Peers => 6,
                SectionKind::Resolvers => 7,
                SectionKind::Mailers => 8,
                SectionKind::Program => 9,
                SectionKind::HttpErrors => 10,
                SectionKind::Ring => 11,
                SectionKind::Cache => 12,
                SectionKind::LogForward => 13,
                SectionKind::FcgiApp => 14,
                SectionKind::CrtStore => 15,
                SectionKind::Traces => 16,
                SectionKind::Acme => 17,
                SectionKind::LogProfile => 18,
                SectionKind::NamespaceList => 19,
            };
            assert_eq!(position, index, "{kind}");
        }
        assert_eq!(SectionKind::ALL.len(), 20);
        assert_eq!(SectionKind::from_keyword("server"), None);
    }

    #[test]
    fn words_that_are_not_section_headers_open_no_section() {
        for word in [
            "server",
            "bind",
            "",
            "Global",
            "dynamic-update",
            "namespace-list",
            "http_errors",
        ] {
            assert!(!is_section_keyword(word), "{word}");
            assert_eq!(SectionKind::from_keyword(word), None, "{word}");
        }
        assert!(is_section_keyword("http-errors"));
    }

    #[test]
    fn section_kinds_serialize_as_their_keyword() {
        for kind in SectionKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).expect("a section kind serializes"),
                kind.keyword(),
            );
            assert_eq!(kind.to_string(), kind.keyword());
        }
    }
}
