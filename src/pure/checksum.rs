//! The checksum of a render: SHA-256 over `haproxy.cfg` and every auxiliary file
//! ([`crate::pure::rendered::RenderedConfig::checksum`]), computed once where the render is
//! validated and carried from there as this one value — to the Deployers, the targets, the
//! publisher, `/debug/vars` and the events — so two renders are the same deployment exactly
//! when their checksums are equal. It is 32 bytes, `Copy`, and written in one of two text
//! forms: plain lower-case hex ([`fmt::Display`], serde, the Data Plane API's deployed-render
//! record, `/debug/vars/state`) and `sha256:<hex>` ([`Checksum::prefixed`], the
//! `HAProxyCfg` resource). Reading accepts both.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

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
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&hasher.finalize());
        Checksum(digest)
    }

    /// The `HAProxyCfg` form: `sha256:<hex>`.
    pub fn prefixed(&self) -> String {
        format!("{PREFIX}{self}")
    }
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

    #[test]
    fn serde_writes_and_reads_the_plain_hex_form() {
        let checksum = Checksum::of(b"x");
        let json = serde_json::to_string(&checksum).expect("serialises");
        assert_eq!(json, format!("\"{checksum}\""));
        let back: Checksum = serde_json::from_str(&json).expect("deserialises");
        assert_eq!(back, checksum);
    }
}
