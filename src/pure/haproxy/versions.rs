//! HAProxy versions and what came after 2.6: [`HaproxyVersion`] (major.minor, read from
//! `haproxy -v` or from the Data Plane API), and the tables of sections, address families,
//! actions and arguments that HAProxy 2.6 does not have, each with the version that
//! introduced it. The schema check takes the target's version ([`check_schema_for`]): an
//! item of these tables introduced after the target is a problem naming the line ("needs
//! HAProxy 3.0 or later; the target runs 2.6"), and one the target has is accepted. The
//! keyword tables of [`keywords`](super::keywords) follow the target too: what the manuals
//! of 3.0 and 3.2 ([`DOCUMENTED_LINES`]) add or drop counts from that line on.
//!
//! A version given here is one from which the item is certainly present, and the check
//! refuses it only for targets where it is certainly absent; items introduced in a non-LTS
//! release (2.9, 3.1) are given that release.
//!
//! [`check_schema_for`]: super::schema::check_schema_for

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;

use super::sections::SectionKind;

/// An HAProxy release line, `major.minor` (`2.6`, `3.0`); patch levels and distribution
/// suffixes do not change which keywords exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(into = "String")]
pub struct HaproxyVersion {
    pub major: u16,
    pub minor: u16,
}

impl HaproxyVersion {
    pub const V2_6: HaproxyVersion = HaproxyVersion::new(2, 6);
    pub const V2_9: HaproxyVersion = HaproxyVersion::new(2, 9);
    pub const V3_0: HaproxyVersion = HaproxyVersion::new(3, 0);
    pub const V3_1: HaproxyVersion = HaproxyVersion::new(3, 1);
    pub const V3_2: HaproxyVersion = HaproxyVersion::new(3, 2);

    /// The version assumed where none is known: the one haptor's keyword tables describe
    /// (and Debian 12's haproxy, which the controller image ships).
    pub const DEFAULT: HaproxyVersion = HaproxyVersion::V2_6;

    pub const fn new(major: u16, minor: u16) -> HaproxyVersion {
        HaproxyVersion { major, minor }
    }

    /// Reads `2.6`, `3.0.5`, `2.6.12-1+deb12u1`, `v3.1-dev4`: the first two dot-separated
    /// numbers (a leading `v` allowed). `None` without both.
    pub fn parse(text: &str) -> Option<HaproxyVersion> {
        let text = text.trim();
        let text = text.strip_prefix(['v', 'V']).unwrap_or(text);
        let mut parts = text.splitn(3, '.');
        let major = parts.next()?;
        let minor: String = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if major.is_empty() || !major.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(HaproxyVersion::new(
            major.parse().ok()?,
            minor.parse().ok()?,
        ))
    }

    /// The version in `haproxy -v` output: the word after `version` on the first line that
    /// has one (`HAProxy version 2.6.12-1+deb12u1 2023/12/16 - https://haproxy.org/`).
    pub fn from_haproxy_v(output: &str) -> Option<HaproxyVersion> {
        output.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|word| word.eq_ignore_ascii_case("version"))?;
            HaproxyVersion::parse(words.next()?)
        })
    }

    /// The HAProxy version a Data Plane API reports in JSON: `haproxy.version`, or the
    /// process information of `/v3/services/haproxy/runtime/info` (`info.version`, also as
    /// the first element of an array, as API v2 answered).
    pub fn from_dataplane_json(value: &Value) -> Option<HaproxyVersion> {
        let value = match value {
            Value::Array(items) => items.first()?,
            other => other,
        };
        ["/haproxy/version", "/info/version"]
            .iter()
            .find_map(|pointer| value.pointer(pointer)?.as_str())
            .and_then(HaproxyVersion::parse)
    }
}

impl Default for HaproxyVersion {
    fn default() -> HaproxyVersion {
        HaproxyVersion::DEFAULT
    }
}

impl fmt::Display for HaproxyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl From<HaproxyVersion> for String {
    fn from(version: HaproxyVersion) -> String {
        version.to_string()
    }
}

impl FromStr for HaproxyVersion {
    type Err = String;

    fn from_str(text: &str) -> Result<HaproxyVersion, String> {
        HaproxyVersion::parse(text)
            .ok_or_else(|| format!("'{text}' is not an HAProxy version such as 2.6 or 3.0"))
    }
}

/// Sections HAProxy 2.6 does not have, with the version that introduced them.
pub const LATER_SECTIONS: &[(SectionKind, HaproxyVersion)] = &[
    (SectionKind::CrtStore, HaproxyVersion::V3_0),
    (SectionKind::Traces, HaproxyVersion::V3_1),
    (SectionKind::LogProfile, HaproxyVersion::V3_1),
    (SectionKind::Acme, HaproxyVersion::V3_2),
];

/// Address family prefixes of `bind` and `log` addresses that 2.6 refuses: reverse HTTP
/// (`rhttp@`, experimental) and log targets that are backends in `mode log` (`backend@`)
/// came in 2.9; zero-terminated abstract sockets (`abnsz@`), MPTCP (`mptcp@`, `mptcp4@`,
/// `mptcp6@`) and QUIC over a named transport (`quic+`) in 3.1.
pub const LATER_ADDRESS_PREFIXES: &[(&str, HaproxyVersion)] = &[
    ("rhttp@", HaproxyVersion::V2_9),
    ("backend@", HaproxyVersion::V2_9),
    ("abnsz@", HaproxyVersion::V3_1),
    ("mptcp@", HaproxyVersion::V3_1),
    ("mptcp4@", HaproxyVersion::V3_1),
    ("mptcp6@", HaproxyVersion::V3_1),
    ("quic+", HaproxyVersion::V3_1),
];

/// The lines that refuse a QUIC server address (`server x quic4@...`) as unsupported on the
/// backend side: from 3.2 (3.0's check accepts it), until 3.3 speaks QUIC to servers.
pub const BACKEND_QUIC_REFUSED: (HaproxyVersion, HaproxyVersion) =
    (HaproxyVersion::V3_2, HaproxyVersion::new(3, 3));

/// `tcp-request session` actions 2.6 refuses: `attach-srv` came with reverse HTTP (2.9).
pub const LATER_TCP_SESSION_ACTIONS: &[(&str, HaproxyVersion)] =
    &[("attach-srv", HaproxyVersion::V2_9)];

/// Arguments of a `log` target line 2.6 does not take (it reads them as the facility):
/// `profile <name>` came with `log-profile` sections (3.1).
pub const LATER_LOG_ARGUMENTS: &[(&str, HaproxyVersion)] = &[("profile", HaproxyVersion::V3_1)];

/// The version that introduced `kind`: 2.6 (or earlier) for the sections 2.6 has.
pub fn section_since(kind: SectionKind) -> HaproxyVersion {
    LATER_SECTIONS
        .iter()
        .find(|(later, _)| *later == kind)
        .map_or(HaproxyVersion::V2_6, |(_, since)| *since)
}

/// The later address family prefix `address` starts with, with its version.
pub fn later_address_prefix(address: &str) -> Option<(&'static str, HaproxyVersion)> {
    LATER_ADDRESS_PREFIXES
        .iter()
        .copied()
        .find(|(prefix, _)| address.starts_with(prefix))
}

/// The version that introduced the item `word` of `table`, if the table lists it.
pub fn since(table: &[(&'static str, HaproxyVersion)], word: &str) -> Option<HaproxyVersion> {
    table
        .iter()
        .find(|(item, _)| *item == word)
        .map(|(_, since)| *since)
}

/// The release lines whose manuals and real checkers the keyword tables were compared with
/// ([`keywords`](super::keywords)): what the tables say of a line between two of them is
/// only what is certain of it.
pub const DOCUMENTED_LINES: &[HaproxyVersion] = &[
    HaproxyVersion::V2_6,
    HaproxyVersion::V3_0,
    HaproxyVersion::V3_2,
];

/// Whether a keyword first listed by the manual of the documented line `since` is certainly
/// missing from `target`: `target` is no newer than the documented line before `since`.
/// A line between the two (2.8 for a keyword 3.0 lists and 2.6 lacks) is given the benefit
/// of the doubt.
pub fn certainly_before(target: HaproxyVersion, since: HaproxyVersion) -> bool {
    DOCUMENTED_LINES
        .iter()
        .rev()
        .find(|line| **line < since)
        .is_some_and(|previous| target <= *previous)
}

/// Whether a keyword that the documented line `gone` no longer has is certainly missing
/// from `target`: `target` is `gone` or newer.
pub fn certainly_removed(target: HaproxyVersion, gone: HaproxyVersion) -> bool {
    target >= gone
}

/// The end of a schema problem about an item `target` lacks: "needs HAProxy 3.0 or later;
/// the target runs 2.6".
pub fn needs(since: HaproxyVersion, target: HaproxyVersion) -> String {
    format!("needs HAProxy {since} or later; the target runs {target}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_read_from_haproxy_v_output() {
        let debian = "HAProxy version 2.6.12-1+deb12u1 2023/12/16 - https://haproxy.org/\nStatus: long-term supported branch - will stop receiving fixes around Q2 2027.\n";
        assert_eq!(
            HaproxyVersion::from_haproxy_v(debian),
            Some(HaproxyVersion::V2_6)
        );
        assert_eq!(
            HaproxyVersion::from_haproxy_v(
                "HAProxy version 3.0.5 2024/09/19 - https://haproxy.org/"
            ),
            Some(HaproxyVersion::V3_0)
        );
        assert_eq!(
            HaproxyVersion::from_haproxy_v("HA-Proxy version 3.1-dev4-1c3e2b8 2024/07/24"),
            Some(HaproxyVersion::V3_1)
        );
        assert_eq!(HaproxyVersion::from_haproxy_v("haproxy: not found"), None);
        assert_eq!(HaproxyVersion::from_haproxy_v(""), None);
    }

    #[test]
    fn a_version_is_read_from_the_data_plane_apis_json() {
        let info: Value = serde_json::json!({
            "api": { "version": "v3.4.0 4a1b2c3" },
            "haproxy": { "version": "3.0.5-1" }
        });
        assert_eq!(
            HaproxyVersion::from_dataplane_json(&info),
            Some(HaproxyVersion::V3_0)
        );
        let runtime: Value = serde_json::json!({
            "runtimeAPI": "/var/run/haproxy.sock",
            "info": { "version": "2.6.12-1+deb12u1", "release_date": "2023-12-16" }
        });
        assert_eq!(
            HaproxyVersion::from_dataplane_json(&runtime),
            Some(HaproxyVersion::V2_6)
        );
        let v2_array = Value::Array(vec![runtime]);
        assert_eq!(
            HaproxyVersion::from_dataplane_json(&v2_array),
            Some(HaproxyVersion::V2_6)
        );
        // The API's own version is not HAProxy's.
        let api_only = serde_json::json!({ "api": { "version": "v3.4.0" }, "system": {} });
        assert_eq!(HaproxyVersion::from_dataplane_json(&api_only), None);
    }

    #[test]
    fn versions_parse_order_and_print_as_major_dot_minor() {
        assert_eq!("3.0".parse(), Ok(HaproxyVersion::V3_0));
        assert_eq!("v2.9.1".parse(), Ok(HaproxyVersion::V2_9));
        assert_eq!(
            HaproxyVersion::parse("2.10.1"),
            Some(HaproxyVersion::new(2, 10))
        );
        for bad in ["", "3", "three.0", "3.", ".6", "-1.0"] {
            assert!(bad.parse::<HaproxyVersion>().is_err(), "{bad:?}");
        }
        assert!(HaproxyVersion::V2_6 < HaproxyVersion::new(2, 10));
        assert!(HaproxyVersion::new(2, 10) < HaproxyVersion::V3_0);
        assert_eq!(HaproxyVersion::V3_2.to_string(), "3.2");
        assert_eq!(
            serde_json::to_value(HaproxyVersion::V3_1).expect("serializes"),
            "3.1"
        );
    }

    #[test]
    fn the_later_sections_are_exactly_those_haproxy_2_6_lacks() {
        for kind in SectionKind::ALL {
            assert_eq!(
                section_since(*kind) > HaproxyVersion::V2_6,
                !kind.in_haproxy_2_6(),
                "{kind}"
            );
        }
        assert_eq!(section_since(SectionKind::CrtStore), HaproxyVersion::V3_0);
        assert_eq!(section_since(SectionKind::Traces), HaproxyVersion::V3_1);
        assert_eq!(section_since(SectionKind::Acme), HaproxyVersion::V3_2);
        assert_eq!(section_since(SectionKind::Ring), HaproxyVersion::V2_6);
    }

    #[test]
    fn every_later_item_is_newer_than_2_6_and_found_by_its_word() {
        for table in [
            LATER_ADDRESS_PREFIXES,
            LATER_TCP_SESSION_ACTIONS,
            LATER_LOG_ARGUMENTS,
        ] {
            for (item, version) in table {
                assert!(*version > HaproxyVersion::V2_6, "{item}");
                assert_eq!(since(table, item), Some(*version));
            }
        }
        assert_eq!(
            later_address_prefix("mptcp4@127.0.0.1:80"),
            Some(("mptcp4@", HaproxyVersion::V3_1))
        );
        assert_eq!(later_address_prefix("ipv4@127.0.0.1:80"), None);
        assert_eq!(
            needs(HaproxyVersion::V3_0, HaproxyVersion::V2_6),
            "needs HAProxy 3.0 or later; the target runs 2.6"
        );
    }
}
