//! The checksum of a render ([`crate::pure::rendered::RenderedConfig::checksum`]), computed
//! once where the render is validated and carried from there as this one value — to the
//! Deployers, the targets, the publisher, `/debug/vars` and the events — so two renders are
//! the same deployment exactly when their checksums are equal. It is 32 bytes, `Copy`, and
//! written in one of two text forms: plain lower-case hex ([`fmt::Display`], serde, the Data
//! Plane API's deployed-render record, `/debug/vars/state`) and `sha256:<hex>`
//! ([`Checksum::prefixed`], the `HAProxyCfg` resource). Reading accepts both.
//!
//! It is a SHA-256 over the SHA-256 of each file ([`FileDigests`]): `haproxy.cfg` first,
//! then every auxiliary file in path order, each as its path (length first) and its digest.
//! So a file that did not change since a render whose digests are known is not hashed again
//! ([`FileDigests::after`]): an endpoint change hashes the changed `haproxy.cfg` (from the
//! last checkpoint before its first changed byte) and compares the megabyte of unchanged
//! maps instead of hashing them.
//!
//! Until this definition, the checksum was one SHA-256 over `haproxy.cfg` and every
//! auxiliary file in a row ([`legacy_checksum`]); a checksum recorded on an instance by an
//! earlier haptor (the Data Plane API target's deployed-render record) is still recognised
//! through it, so an upgrade does not take the render the instance runs for an unknown one.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::pure::rendered::RenderedConfig;

/// The prefix of the `HAProxyCfg` form.
const PREFIX: &str = "sha256:";

/// A SHA-256 digest, shown as hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Checksum([u8; 32]);

/// Text that is not a checksum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a SHA-256 checksum (64 hex digits, optionally after 'sha256:')")]
pub struct ChecksumError(String);

impl Checksum {
    /// The checksum of these bytes.
    pub fn of(bytes: &[u8]) -> Checksum {
        Checksum::of_hasher(Sha256::new_with_prefix(bytes))
    }

    /// The checksum a hasher fed by the caller arrived at.
    pub fn of_hasher(hasher: Sha256) -> Checksum {
        Checksum(digest_of(hasher))
    }

    /// The `HAProxyCfg` form: `sha256:<hex>`.
    pub fn prefixed(&self) -> String {
        format!("{PREFIX}{self}")
    }
}

/// What the checksum of a render hashes before its files' digests: the definition's name, so
/// no checksum of this definition equals one of another.
const DEFINITION: &[u8] = b"haptor render checksum: SHA-256 of each file\0";

/// How much of `haproxy.cfg` is hashed between two saved hasher states: a change hashes the
/// text again from the last state saved before its first changed byte.
const CHECKPOINT_BYTES: usize = 64 * 1024;

/// The SHA-256 digest of each file of one render: `haproxy.cfg`'s, with the hasher's state
/// saved every [`CHECKPOINT_BYTES`], and each auxiliary file's by path. The render's checksum
/// is made of them ([`Self::checksum`]).
#[derive(Clone)]
pub struct FileDigests {
    config: [u8; 32],
    /// The hasher after `(n + 1) * CHECKPOINT_BYTES` bytes of `haproxy.cfg`, for each n.
    checkpoints: Vec<Sha256>,
    aux: AuxDigests,
}

/// The SHA-256 digest of the content of each auxiliary file of one render, by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuxDigests(BTreeMap<String, [u8; 32]>);

impl fmt::Debug for FileDigests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileDigests")
            .field("config", &crate::pure::rendered::hex(&self.config))
            .field("checkpoints", &self.checkpoints.len())
            .field("aux", &self.aux)
            .finish()
    }
}

impl FileDigests {
    /// The digests of every file of `rendered`.
    pub fn of(rendered: &RenderedConfig) -> FileDigests {
        FileDigests::after(rendered, None)
    }

    /// The digests of every file of `rendered`, taken from `known` (an earlier render and its
    /// digests) for each file whose content is the same there, and for `haproxy.cfg` resumed
    /// from the last state saved before the first byte where the two differ. Comparing is
    /// many times cheaper than hashing, and the result is the same as [`Self::of`]'s.
    pub fn after(
        rendered: &RenderedConfig,
        known: Option<(&RenderedConfig, &FileDigests)>,
    ) -> FileDigests {
        let text = rendered.haproxy_cfg.as_bytes();
        let (mut hasher, mut checkpoints, mut done) = (Sha256::new(), Vec::new(), 0);
        if let Some((earlier, digests)) = known {
            let shared = common_prefix(text, earlier.haproxy_cfg.as_bytes());
            let reusable = (shared / CHECKPOINT_BYTES).min(digests.checkpoints.len());
            if shared == text.len() && text.len() == earlier.haproxy_cfg.len() {
                return FileDigests {
                    config: digests.config,
                    checkpoints: digests.checkpoints.clone(),
                    aux: AuxDigests::after(rendered, Some((earlier, &digests.aux))),
                };
            }
            if reusable > 0 {
                checkpoints.extend_from_slice(&digests.checkpoints[..reusable]);
                hasher = digests.checkpoints[reusable - 1].clone();
                done = reusable * CHECKPOINT_BYTES;
            }
        }
        while text.len() - done >= CHECKPOINT_BYTES {
            hasher.update(&text[done..done + CHECKPOINT_BYTES]);
            done += CHECKPOINT_BYTES;
            checkpoints.push(hasher.clone());
        }
        hasher.update(&text[done..]);
        FileDigests {
            config: digest_of(hasher),
            checkpoints,
            aux: AuxDigests::after(rendered, known.map(|(earlier, d)| (earlier, &d.aux))),
        }
    }

    /// The render's checksum: a SHA-256 over the definition's name, then `haproxy.cfg`'s
    /// digest and each auxiliary file's in path order, each after its path (its length
    /// first, so the bytes hashed tell the files apart whatever their paths hold).
    pub fn checksum(&self) -> Checksum {
        let mut hasher = Sha256::new_with_prefix(DEFINITION);
        let mut file = |path: &str, digest: &[u8; 32]| {
            hasher.update((path.len() as u64).to_le_bytes());
            hasher.update(path.as_bytes());
            hasher.update(digest);
        };
        file("haproxy.cfg", &self.config);
        for (path, digest) in &self.aux.0 {
            file(path, digest);
        }
        Checksum::of_hasher(hasher)
    }

    /// The auxiliary files' digests.
    pub fn aux(&self) -> &AuxDigests {
        &self.aux
    }
}

impl AuxDigests {
    /// The digests of the auxiliary files of `rendered`, taken from `known` (an earlier
    /// render and its digests) for each file whose content is the same there.
    pub fn after(
        rendered: &RenderedConfig,
        known: Option<(&RenderedConfig, &AuxDigests)>,
    ) -> AuxDigests {
        AuxDigests(
            rendered
                .aux_files
                .iter()
                .map(|(path, file)| {
                    let same = known.and_then(|(earlier, digests)| {
                        let before = earlier.aux_files.get(path)?;
                        (before.content == file.content)
                            .then(|| digests.0.get(path).copied())
                            .flatten()
                    });
                    let digest = same.unwrap_or_else(|| {
                        digest_of(Sha256::new_with_prefix(file.content.as_bytes()))
                    });
                    (path.clone(), digest)
                })
                .collect(),
        )
    }

    /// The checksum of the content of the file at `path` (a plain SHA-256 of it).
    pub fn get(&self, path: &str) -> Option<Checksum> {
        self.0.get(path).map(|digest| Checksum(*digest))
    }
}

/// The checksum as haptor defined it before [`FileDigests`]: one SHA-256 over `haproxy.cfg`
/// and then each auxiliary file's path and content, in path order. Only to recognise a
/// checksum an earlier haptor recorded.
pub fn legacy_checksum(rendered: &RenderedConfig) -> Checksum {
    let mut hasher = Sha256::new();
    hasher.update(b"haproxy.cfg\0");
    hasher.update(rendered.haproxy_cfg.as_bytes());
    for (path, file) in &rendered.aux_files {
        hasher.update(b"\0");
        hasher.update(path.as_bytes());
        hasher.update(b"\0");
        hasher.update(file.content.as_bytes());
    }
    Checksum::of_hasher(hasher)
}

/// The digest a hasher arrived at.
fn digest_of(hasher: Sha256) -> [u8; 32] {
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&hasher.finalize());
    digest
}

/// How many bytes two slices share at the start, compared a block at a time (`memcmp`).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let mut done = 0;
    for (x, y) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
        if x != y {
            return done + x.iter().zip(y).take_while(|(p, q)| p == q).count();
        }
        done += x.len();
    }
    done
}

/// Lower-case hex; a precision shortens it (`{:.12}`), as logs do.
impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&crate::pure::rendered::hex(&self.0))
    }
}

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Checksum({self})")
    }
}

impl FromStr for Checksum {
    type Err = ChecksumError;

    /// Reads either form.
    fn from_str(text: &str) -> Result<Checksum, ChecksumError> {
        let hex = text.strip_prefix(PREFIX).unwrap_or(text);
        let error = || ChecksumError(text.to_string());
        // Digits only: `from_str_radix` alone would take a sign.
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(error());
        }
        let mut digest = [0u8; 32];
        for (byte, pair) in digest.iter_mut().zip(hex.as_bytes().chunks(2)) {
            let pair = std::str::from_utf8(pair).map_err(|_| error())?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| error())?;
        }
        Ok(Checksum(digest))
    }
}

impl Serialize for Checksum {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Checksum {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Checksum, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checksum_reads_back_from_both_of_its_text_forms() {
        let checksum = Checksum::of(b"global\n");
        let hex = checksum.to_string();
        assert_eq!(hex.len(), 64);
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(checksum.prefixed(), format!("sha256:{hex}"));
        assert_eq!(hex.parse::<Checksum>(), Ok(checksum));
        assert_eq!(checksum.prefixed().parse::<Checksum>(), Ok(checksum));
        assert_eq!(format!("{checksum:.12}"), hex[..12]);
    }

    #[test]
    fn text_that_is_not_64_hex_digits_is_no_checksum() {
        for bad in [
            "",
            "abc",
            "sha256:",
            &"g".repeat(64),
            &"é".repeat(32),
            &"+f".repeat(32),
        ] {
            assert!(bad.parse::<Checksum>().is_err(), "{bad}");
        }
    }

    use crate::pure::rendered::{AuxFile, AuxKind};

    fn map(path: &str, content: &str) -> (String, AuxFile) {
        let file = AuxFile {
            kind: AuxKind::Map,
            name: path.rsplit('/').next().unwrap_or(path).into(),
            path: path.into(),
            content: content.into(),
        };
        (path.into(), file)
    }

    /// A render with a `haproxy.cfg` of several checkpoints' worth of server lines.
    fn large(servers: usize, address: &str, maps: &[(&str, &str)]) -> RenderedConfig {
        let mut cfg = String::from("global\n");
        for n in 0..servers {
            let at = if n == servers / 2 {
                address
            } else {
                "10.0.0.1"
            };
            cfg.push_str(&format!("backend be{n}\n  server SRV_1 {at}:80\n"));
        }
        RenderedConfig {
            haproxy_cfg: cfg,
            aux_files: maps
                .iter()
                .map(|(path, content)| map(path, content))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn digests_taken_over_from_an_earlier_render_make_the_checksum_a_fresh_hash_makes() {
        let first = large(
            20_000,
            "10.0.0.1",
            &[("maps/a.map", "a b\n"), ("maps/b.map", "c d\n")],
        );
        let first_digests = FileDigests::of(&first);
        assert!(first_digests.checkpoints.len() > 4, "{first_digests:?}");
        let mut truncated = first.clone();
        truncated.haproxy_cfg.truncate(CHECKPOINT_BYTES * 2);
        let mut extended = first.clone();
        extended.haproxy_cfg.push_str("backend last\n");
        let mut first_byte = first.clone();
        first_byte.haproxy_cfg.replace_range(0..1, "G");
        for next in [
            first.clone(),
            large(
                20_000,
                "10.9.9.9",
                &[("maps/a.map", "a b\n"), ("maps/b.map", "c d\n")],
            ),
            large(
                20_000,
                "10.9.9.9",
                &[("maps/a.map", "a x\n"), ("maps/b.map", "c d\n")],
            ),
            large(20_000, "10.0.0.1", &[("maps/a.map", "a b\n")]),
            large(
                20_000,
                "10.0.0.1",
                &[("maps/b.map", "a b\n"), ("maps/c.map", "c d\n")],
            ),
            large(10, "10.0.0.1", &[]),
            truncated,
            extended,
            first_byte,
        ] {
            let after = FileDigests::after(&next, Some((&first, &first_digests)));
            let fresh = FileDigests::of(&next);
            assert_eq!(after.checksum(), fresh.checksum());
            assert_eq!(after.checksum(), next.checksum());
            assert_eq!(after.aux(), fresh.aux());
            assert_eq!(after.checkpoints.len(), fresh.checkpoints.len());
        }
    }

    #[test]
    fn the_checksum_tells_files_apart_by_path_and_content() {
        let base = large(3, "10.0.0.1", &[("maps/a.map", "a b\n")]);
        let variants = [
            large(3, "10.0.0.2", &[("maps/a.map", "a b\n")]),
            large(3, "10.0.0.1", &[("maps/a.map", "a c\n")]),
            large(3, "10.0.0.1", &[("maps/b.map", "a b\n")]),
            large(
                3,
                "10.0.0.1",
                &[("maps/a.map", "a b\n"), ("maps/b.map", "")],
            ),
            large(3, "10.0.0.1", &[]),
        ];
        let mut seen = vec![base.checksum()];
        for variant in &variants {
            let checksum = variant.checksum();
            assert!(!seen.contains(&checksum), "{variant:?}");
            seen.push(checksum);
        }
        assert_eq!(base.checksum(), base.clone().checksum());
    }

    #[test]
    fn the_earlier_definition_gives_other_checksums_and_is_kept_as_it_was() {
        let rendered = large(3, "10.0.0.1", &[("maps/a.map", "a b\n")]);
        assert_ne!(legacy_checksum(&rendered), rendered.checksum());
        let mut hasher = Sha256::new();
        hasher.update(b"haproxy.cfg\0");
        hasher.update(rendered.haproxy_cfg.as_bytes());
        hasher.update(b"\0maps/a.map\0a b\n");
        assert_eq!(legacy_checksum(&rendered), Checksum::of_hasher(hasher));
    }

    #[test]
    fn an_auxiliary_files_digest_is_the_plain_sha256_of_its_content() {
        let rendered = large(3, "10.0.0.1", &[("maps/a.map", "a b\n")]);
        assert_eq!(
            FileDigests::of(&rendered).aux().get("maps/a.map"),
            Some(Checksum::of(b"a b\n"))
        );
        assert_eq!(FileDigests::of(&rendered).aux().get("maps/b.map"), None);
    }

    #[test]
    fn serde_writes_and_reads_the_plain_hex_form() {
        let checksum = Checksum::of(b"x");
        let json = serde_json::to_string(&checksum).expect("serialises");
        assert_eq!(json, format!("\"{checksum}\""));
        let back: Checksum = serde_json::from_str(&json).expect("deserialises");
        assert_eq!(back, checksum);
    }
}
