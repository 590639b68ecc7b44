//! What one render produces: the `haproxy.cfg` text plus its auxiliary files (maps, general
//! files, certificates, crt-lists), and the path convention that lets the same text be
//! validated in a temporary directory and deployed to `/etc/haproxy` unchanged.
//!
//! Templates never write absolute paths. They ask the [`PathResolver`] for a path such as
//! `maps/hosts.map`, which HAProxy resolves against `default-path origin <base>` in `global`.
//! The validator rewrites that one line to point at its temporary directory; a deployer
//! points it at the instance's configuration directory.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::pure::checksum::Checksum;
use crate::pure::haproxy::TrustedLines;

/// The kinds of auxiliary file a render can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuxKind {
    Map,
    File,
    Cert,
    CrtList,
}

impl AuxKind {
    /// Parses the kind names templates use: `map`, `file`, `cert`, `crt-list`.
    pub fn parse(kind: &str) -> Option<AuxKind> {
        match kind {
            "map" => Some(AuxKind::Map),
            "file" => Some(AuxKind::File),
            "cert" => Some(AuxKind::Cert),
            "crt-list" => Some(AuxKind::CrtList),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AuxKind::Map => "map",
            AuxKind::File => "file",
            AuxKind::Cert => "cert",
            AuxKind::CrtList => "crt-list",
        }
    }
}

impl fmt::Display for AuxKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One auxiliary file: its kind, its name as the template author chose it, and its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuxFile {
    pub kind: AuxKind,
    pub name: String,
    /// The path relative to the `default-path origin` base, e.g. `maps/hosts.map`.
    pub path: String,
    pub content: String,
}

/// The Kubernetes object a template recorded an [`Outcome`] for (`served`, `ignored`):
/// its apiVersion, kind, namespace (empty for a cluster-scoped object) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// What a template did with one object: served it (`{{served obj}}`), skipped it
/// (`{{ignored obj "reason"}}`), or served it with parts skipped (both recorded: a host, a
/// path, a TLS entry or an annotation left out, each with its reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Served,
    /// Skipped, with the template author's reasons (at least one), in the order first
    /// recorded; the first is the one a Kubernetes Event reports.
    Ignored(Vec<String>),
    /// Served, with the reasons of the parts left out, in the order first recorded.
    PartlyServed(Vec<String>),
}

impl Outcome {
    /// The outcome of an object that already had `self` and is now recorded with `next`:
    /// served wins over ignored (a template may skip one rule of an Ingress and serve
    /// another) and keeps the skipped parts' reasons; all reasons are kept, each once, in
    /// the order first recorded.
    pub fn merged(self, next: Outcome) -> Outcome {
        let served = self.is_served() || next.is_served();
        if let (Outcome::Served, Outcome::Served) = (&self, &next) {
            return Outcome::Served;
        }
        let mut reasons = self.into_reasons();
        for reason in next.into_reasons() {
            if !reasons.contains(&reason) {
                reasons.push(reason);
            }
        }
        if served {
            Outcome::PartlyServed(reasons)
        } else {
            Outcome::Ignored(reasons)
        }
    }

    /// An object skipped for one reason.
    pub fn ignored(reason: impl Into<String>) -> Outcome {
        Outcome::Ignored(vec![reason.into()])
    }

    /// Whether the object is served (wholly or in part).
    pub fn is_served(&self) -> bool {
        !matches!(self, Outcome::Ignored(_))
    }

    /// The reasons recorded for what was left out: the object's, or its parts'.
    pub fn reasons(&self) -> &[String] {
        match self {
            Outcome::Served => &[],
            Outcome::Ignored(reasons) | Outcome::PartlyServed(reasons) => reasons,
        }
    }

    fn into_reasons(self) -> Vec<String> {
        match self {
            Outcome::Served => Vec::new(),
            Outcome::Ignored(reasons) | Outcome::PartlyServed(reasons) => reasons,
        }
    }
}

/// What changed in what the templates left out between two renders' outcomes: each object
/// with a reason `current` gives that `previous` did not, with that reason, in object
/// order. An object skipped for the same reasons as before is not repeated.
pub fn newly_left_out(previous: &Outcomes, current: &Outcomes) -> Vec<(ObjectKey, Outcome)> {
    current
        .iter()
        .filter(|(key, outcome)| {
            let before = previous.get(*key).map(Outcome::reasons).unwrap_or_default();
            outcome
                .reasons()
                .iter()
                .any(|reason| !before.contains(reason))
        })
        .map(|(key, outcome)| (key.clone(), outcome.clone()))
        .collect()
}

/// The outcomes of one render, by object.
pub type Outcomes = BTreeMap<ObjectKey, Outcome>;

/// Records `outcome` for `key` in `outcomes`, merged with what is there ([`Outcome::merged`]).
pub fn record_outcome(outcomes: &mut Outcomes, key: ObjectKey, outcome: Outcome) {
    match outcomes.remove(&key) {
        Some(existing) => outcomes.insert(key, existing.merged(outcome)),
        None => outcomes.insert(key, outcome),
    };
}

/// The output of one render: the main configuration and every auxiliary file, keyed by
/// relative path so iteration order is deterministic, plus what the templates recorded
/// about the objects they served or ignored and which lines the config's templates wrote
/// literally (neither is part of the deployed bytes: neither the checksum nor serialisation
/// covers them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedConfig {
    pub haproxy_cfg: String,
    pub aux_files: BTreeMap<String, AuxFile>,
    /// Shared: an unchanged template's memo and this render hold the same map.
    #[serde(skip)]
    pub outcomes: std::sync::Arc<Outcomes>,
    /// What the templates recorded about Gateway API status (`condition`, ...), in the
    /// order recorded; [`crate::pure::gateway_status::statuses`] shapes it.
    #[serde(skip)]
    pub status_records: Vec<crate::pure::gateway_status::StatusRecord>,
    /// The lines the `HAProxyTemplateConfig`'s templates wrote literally, set by
    /// `CompiledConfig::render`: the schema phase accepts a directive that runs code only on
    /// one of them (see [`crate::pure::haproxy::guard`]). A render built any other way trusts
    /// no line. Part of the validation cache key, not of the checksum.
    #[serde(skip)]
    pub trusted_lines: TrustedLines,
}

impl RenderedConfig {
    /// Finds an auxiliary file by kind and template-chosen name.
    pub fn aux(&self, kind: AuxKind, name: &str) -> Option<&AuxFile> {
        self.aux_files
            .values()
            .find(|f| f.kind == kind && f.name == name)
    }

    /// The checksum of the configuration and every auxiliary file (path and content), made
    /// of each file's SHA-256 ([`crate::pure::checksum::FileDigests`]). Two renders with
    /// equal checksums deploy the same bytes. The pipeline computes it once, when it
    /// validates a render (reusing the digests of the files the last render had the same),
    /// and everything downstream carries that value.
    pub fn checksum(&self) -> Checksum {
        crate::pure::checksum::FileDigests::of(self).checksum()
    }
}

/// Hex-encodes bytes (sha2 0.11 digests do not implement `LowerHex`).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0x0f) as usize] as char);
    }
    out
}

/// Maps an auxiliary file's kind and name to its path relative to the base directory.
///
/// The directory for each kind is the corresponding `dataplane` directory made relative to
/// the directory holding `haproxy.cfg` (`/etc/haproxy/maps` → `maps`); a directory outside
/// that base keeps a default name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathResolver {
    /// The absolute base directory deployments use (`default-path origin` target).
    pub base_dir: String,
    pub maps_dir: String,
    pub files_dir: String,
    pub certs_dir: String,
}

impl Default for PathResolver {
    fn default() -> Self {
        PathResolver {
            base_dir: "/etc/haproxy".to_string(),
            maps_dir: "maps".to_string(),
            files_dir: "general".to_string(),
            certs_dir: "ssl".to_string(),
        }
    }
}

impl PathResolver {
    /// Builds a resolver from the dataplane directories of a config.
    pub fn from_dirs(
        config_file: &str,
        maps_dir: &str,
        general_dir: &str,
        certs_dir: &str,
    ) -> Self {
        let base = match config_file.rsplit_once('/') {
            Some(("", _)) => "/".to_string(),
            Some((dir, _)) => dir.to_string(),
            None => ".".to_string(),
        };
        let relative = |dir: &str, fallback: &str| -> String {
            let trimmed = dir.trim_end_matches('/');
            match trimmed
                .strip_prefix(&base)
                .and_then(|rest| rest.strip_prefix('/'))
            {
                Some(rest) if !rest.is_empty() => rest.to_string(),
                _ => fallback.to_string(),
            }
        };
        PathResolver {
            maps_dir: relative(maps_dir, "maps"),
            files_dir: relative(general_dir, "general"),
            certs_dir: relative(certs_dir, "ssl"),
            base_dir: base,
        }
    }

    /// The relative path for an auxiliary file: the kind's directory and the name as
    /// [`storage_file_name`] gives it, so the path the configuration names is the one the
    /// Data Plane API stores the upload under, and a name cannot leave its directory.
    /// crt-lists live with general files, as HAProxy storage keeps them.
    pub fn path(&self, kind: AuxKind, name: &str) -> String {
        let dir = match kind {
            AuxKind::Map => &self.maps_dir,
            AuxKind::File | AuxKind::CrtList => &self.files_dir,
            AuxKind::Cert => &self.certs_dir,
        };
        format!("{dir}/{}", storage_file_name(name))
    }
}

/// The name the Data Plane API v3 stores a file under when it is uploaded as `name`.
///
/// The API's storage (maps, general files, certificates alike) cleans every name it is
/// given: it keeps the last extension, and in the stem and in the extension it replaces each
/// run of characters other than ASCII letters, digits, `_`, `-` and `\` by one `_` (a stem
/// that ends up empty becomes `_` + extension). So `www.example.com-tls.pem` is stored as
/// `www_example_com-tls.pem`, and a configuration naming the first finds no file. haptor
/// names every auxiliary file this way in the first place ([`PathResolver::path`]), so the
/// render, `haptor local`'s files and the API's storage agree. The backslash, which the API
/// keeps but HAProxy reads as an escape in a configuration word, is replaced too; every
/// result is a name the API stores unchanged.
pub fn storage_file_name(name: &str) -> String {
    fn clean(part: &str) -> String {
        let mut out = String::with_capacity(part.len());
        let mut in_run = false;
        for c in part.chars() {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
                out.push(c);
                in_run = false;
            } else if !in_run {
                out.push('_');
                in_run = true;
            }
        }
        out
    }
    // The extension is what follows the last dot of the last path element.
    let last_element = name.rfind('/').map_or(0, |slash| slash + 1);
    match name[last_element..].rfind('.') {
        Some(dot) => {
            let dot = last_element + dot;
            let stem = clean(&name[..dot]);
            let extension = clean(&name[dot + 1..]);
            if stem.is_empty() {
                format!("_{extension}")
            } else {
                format!("{stem}.{extension}")
            }
        }
        None => clean(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_to_the_directory_holding_haproxy_cfg() {
        let r = PathResolver::from_dirs(
            "/etc/haproxy/haproxy.cfg",
            "/etc/haproxy/maps",
            "/etc/haproxy/general/",
            "/etc/haproxy/ssl",
        );
        assert_eq!(r.base_dir, "/etc/haproxy");
        assert_eq!(r.path(AuxKind::Map, "hosts.map"), "maps/hosts.map");
        assert_eq!(
            r.path(AuxKind::Cert, "default/tls-secret.pem"),
            "ssl/default_tls-secret.pem"
        );
        assert_eq!(r.path(AuxKind::CrtList, "certs.list"), "general/certs.list");
    }

    #[test]
    fn a_name_cannot_climb_out_of_its_directory() {
        let r = PathResolver::default();
        let path = r.path(AuxKind::File, "../../etc/passwd");
        assert_eq!(path, "general/_etc_passwd");
        assert_eq!(path.matches('/').count(), 1);
    }

    #[test]
    fn checksum_changes_when_an_auxiliary_file_changes() {
        let mut a = RenderedConfig {
            haproxy_cfg: "global\n".into(),
            ..Default::default()
        };
        let before = a.checksum();
        a.aux_files.insert(
            "maps/a.map".into(),
            AuxFile {
                kind: AuxKind::Map,
                name: "a.map".into(),
                path: "maps/a.map".into(),
                content: "x y\n".into(),
            },
        );
        assert_ne!(before, a.checksum());
        assert_eq!(a.checksum().to_string().len(), 64);
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "networking.k8s.io/v1".into(),
            kind: "Ingress".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn outcomes_do_not_change_the_checksum() {
        let mut a = RenderedConfig {
            haproxy_cfg: "global\n".into(),
            ..Default::default()
        };
        let before = a.checksum();
        std::sync::Arc::make_mut(&mut a.outcomes).insert(key("web"), Outcome::Served);
        assert_eq!(before, a.checksum());
    }

    #[test]
    fn served_wins_over_ignored_in_either_order_and_the_first_reason_is_kept() {
        let mut outcomes = Outcomes::new();
        record_outcome(&mut outcomes, key("a"), Outcome::ignored("first"));
        record_outcome(&mut outcomes, key("a"), Outcome::ignored("second"));
        assert_eq!(
            outcomes[&key("a")],
            Outcome::Ignored(vec!["first".into(), "second".into()])
        );
        record_outcome(&mut outcomes, key("a"), Outcome::Served);
        record_outcome(&mut outcomes, key("a"), Outcome::ignored("third"));
        assert_eq!(
            outcomes[&key("a")],
            Outcome::PartlyServed(vec!["first".into(), "second".into(), "third".into()])
        );
        assert!(outcomes[&key("a")].is_served());
    }

    #[test]
    fn only_objects_left_out_for_a_new_reason_are_reported_again() {
        let before = Outcomes::from([
            (key("a"), Outcome::ignored("class nginx")),
            (key("b"), Outcome::PartlyServed(vec!["host 'x y'".into()])),
            (key("c"), Outcome::Served),
        ]);
        let after = Outcomes::from([
            (key("a"), Outcome::ignored("class nginx")),
            (
                key("b"),
                Outcome::PartlyServed(vec!["host 'x y'".into(), "path 'p q'".into()]),
            ),
            (key("c"), Outcome::Served),
            (key("d"), Outcome::ignored("no class")),
        ]);
        let reported: Vec<String> = newly_left_out(&before, &after)
            .into_iter()
            .map(|(key, _)| key.name)
            .collect();
        assert_eq!(reported, ["b", "d"]);
        assert!(newly_left_out(&after, &after).is_empty());
    }

    #[test]
    fn a_name_is_stored_as_the_data_plane_api_stores_it() {
        // The API's own cleaning of these names (client-native's SanitizeFilename).
        for (given, stored) in [
            (
                "default_www.example.com-tls.pem",
                "default_www_example_com-tls.pem",
            ),
            ("hosts.map", "hosts.map"),
            ("a..b  c.map", "a_b_c.map"),
            (".hidden", "_hidden"),
            ("no-extension", "no-extension"),
            ("trailing.", "trailing."),
            ("x/y.z/w", "x_y_z_w"),
            ("caf\u{e9}.pem", "caf_.pem"),
            ("back\\slash.pem", "back_slash.pem"),
        ] {
            assert_eq!(storage_file_name(given), stored, "{given}");
        }
    }

    #[test]
    fn a_stored_name_is_stored_again_unchanged() {
        for given in [
            "a.b.c.pem",
            "..",
            "x/../y.map",
            "ns_www.example.com-tls.pem",
            "",
            "@@",
        ] {
            let once = storage_file_name(given);
            assert_eq!(storage_file_name(&once), once, "{given}");
        }
    }
}
