//! How a rendered configuration is stored in the `HAProxyCfg` resource. An object in
//! etcd is limited to about 1.5 MiB, and a rendered `haproxy.cfg` of a large cluster can
//! exceed it, so [`encode_spec`] stores the content by size:
//!
//! - up to [`TEXT_LIMIT`] (256 KiB): as text, `contentEncoding` absent;
//! - above that: gzip-compressed, then base64-encoded, `contentEncoding: gzip+base64`;
//! - when that form is still above [`ENCODED_LIMIT`] (1 MiB): not at all — `content` empty,
//!   `contentEncoding: omitted` — and the status condition [`CONTENT_PUBLISHED`] says so
//!   (`False`, reason [`CONTENT_TOO_LARGE`], with the size and the limit).
//!
//! `checksum` and `size` (bytes of the uncompressed content) are always present.
//! [`decode_content`] turns a stored spec back into the configuration text, and
//! [`with_content_condition`] puts the `ContentPublished` condition into a status. The
//! compression is deterministic (no timestamp or file name in the gzip header), so one
//! configuration always encodes to the same spec and an unchanged spec is recognised.
//! Pure: compression is computation, the writing is `drivers::kube::publish`'s.

use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::{HAProxyCfgSpec, HAProxyCfgStatus};

/// Content up to this many bytes is stored as text.
pub const TEXT_LIMIT: usize = 256 * 1024;
/// Compressed and base64-encoded content above this many bytes is omitted.
pub const ENCODED_LIMIT: usize = 1024 * 1024;
/// `contentEncoding` of content stored gzip-compressed, then base64-encoded.
pub const GZIP_BASE64: &str = "gzip+base64";
/// `contentEncoding` of content left out because it is too large.
pub const OMITTED: &str = "omitted";
/// The status condition that says whether the content is in the spec.
pub const CONTENT_PUBLISHED: &str = "ContentPublished";
/// The reason of a `ContentPublished=True` condition.
pub const PUBLISHED: &str = "Published";
/// The reason of a `ContentPublished=False` condition.
pub const CONTENT_TOO_LARGE: &str = "ContentTooLarge";

/// How [`encode_spec`] stored the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentStorage {
    /// As text, `size` bytes.
    Text { size: usize },
    /// `size` bytes, stored gzip+base64 in `encoded` bytes.
    Compressed { size: usize, encoded: usize },
    /// `size` bytes, left out: their gzip+base64 form is `encoded` bytes, above
    /// [`ENCODED_LIMIT`].
    Omitted { size: usize, encoded: usize },
}

impl ContentStorage {
    /// Whether the content is in the spec.
    pub fn published(&self) -> bool {
        !matches!(self, ContentStorage::Omitted { .. })
    }

    /// The `ContentPublished` condition's message: the size, how it is stored and, when it
    /// is left out, the limit it exceeds.
    pub fn message(&self) -> String {
        match *self {
            ContentStorage::Text { size } => {
                format!("the configuration ({size} bytes) is stored as text")
            }
            ContentStorage::Compressed { size, encoded } => format!(
                "the configuration ({size} bytes, above the {TEXT_LIMIT}-byte text limit) is \
                 stored {GZIP_BASE64} in {encoded} bytes"
            ),
            ContentStorage::Omitted { size, encoded } => format!(
                "the configuration ({size} bytes) is not published: its {GZIP_BASE64} form is \
                 {encoded} bytes, above the {ENCODED_LIMIT}-byte limit; checksum and size \
                 still describe it"
            ),
        }
    }
}

/// A spec as it is stored, and how its content was stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedSpec {
    pub spec: HAProxyCfgSpec,
    pub storage: ContentStorage,
}

/// The spec as the `HAProxyCfg` stores it: `content` as text, gzip+base64 or omitted by its
/// size, `contentEncoding` saying which, `size` the uncompressed content's bytes. The
/// `content` of `spec` is taken as plain text whatever its `contentEncoding` says.
pub fn encode_spec(spec: &HAProxyCfgSpec) -> EncodedSpec {
    let size = spec.content.len();
    let mut stored = spec.clone();
    stored.size = Some(size as u64);
    let storage = if size <= TEXT_LIMIT {
        stored.content_encoding = None;
        ContentStorage::Text { size }
    } else {
        let encoded = STANDARD.encode(gzip(spec.content.as_bytes()));
        if encoded.len() <= ENCODED_LIMIT {
            let length = encoded.len();
            stored.content = encoded;
            stored.content_encoding = Some(GZIP_BASE64.into());
            ContentStorage::Compressed {
                size,
                encoded: length,
            }
        } else {
            stored.content = String::new();
            stored.content_encoding = Some(OMITTED.into());
            ContentStorage::Omitted {
                size,
                encoded: encoded.len(),
            }
        }
    };
    EncodedSpec {
        spec: stored,
        storage,
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(bytes.len() / 2), Compression::default());
    // Writing to a Vec cannot fail: the only errors are those of the underlying writer.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// Why a stored spec's content could not be read back.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("the content ({size} bytes) was not published: it is too large")]
    Omitted { size: u64 },
    #[error("unknown contentEncoding '{0}' (known: none, {GZIP_BASE64}, {OMITTED})")]
    UnknownEncoding(String),
    #[error("the {GZIP_BASE64} content is not valid base64: {0}")]
    Base64(String),
    #[error("the {GZIP_BASE64} content is not valid gzip: {0}")]
    Gzip(String),
    #[error("the decoded content is not UTF-8: {0}")]
    Utf8(String),
    #[error("the decoded content is {found} bytes, the spec's size says {expected}")]
    SizeMismatch { expected: u64, found: u64 },
}

/// The configuration text a stored spec holds: `content` itself when `contentEncoding` is
/// absent, its base64 decoding gunzipped for `gzip+base64`; an error when it was omitted,
/// is malformed, or does not have the spec's `size`.
pub fn decode_content(spec: &HAProxyCfgSpec) -> Result<String, DecodeError> {
    let text = match spec.content_encoding.as_deref() {
        None => spec.content.clone(),
        Some(GZIP_BASE64) => {
            let compressed = STANDARD
                .decode(spec.content.as_bytes())
                .map_err(|e| DecodeError::Base64(e.to_string()))?;
            let mut bytes = Vec::new();
            GzDecoder::new(compressed.as_slice())
                .read_to_end(&mut bytes)
                .map_err(|e| DecodeError::Gzip(e.to_string()))?;
            String::from_utf8(bytes).map_err(|e| DecodeError::Utf8(e.to_string()))?
        }
        Some(OMITTED) => {
            return Err(DecodeError::Omitted {
                size: spec.size.unwrap_or_default(),
            });
        }
        Some(other) => return Err(DecodeError::UnknownEncoding(other.into())),
    };
    if let Some(expected) = spec.size
        && expected != text.len() as u64
    {
        return Err(DecodeError::SizeMismatch {
            expected,
            found: text.len() as u64,
        });
    }
    Ok(text)
}

/// `status` with the `ContentPublished` condition for `storage` in place of any earlier
/// one (other conditions are kept, in their order; a new one goes last). Its transition
/// time is `previous`'s when the condition's status stays, else `now` (to the second, as
/// Kubernetes stores it).
pub fn with_content_condition(
    status: &HAProxyCfgStatus,
    storage: &ContentStorage,
    previous: Option<&HAProxyCfgStatus>,
    now: Timestamp,
) -> HAProxyCfgStatus {
    let condition_status = if storage.published() { "True" } else { "False" };
    let transition = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == CONTENT_PUBLISHED))
        .filter(|c| c.status == condition_status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(Timestamp::from_second(now.as_second()).unwrap_or(now)));
    let condition = Condition {
        type_: CONTENT_PUBLISHED.into(),
        status: condition_status.into(),
        reason: if storage.published() {
            PUBLISHED
        } else {
            CONTENT_TOO_LARGE
        }
        .into(),
        message: storage.message(),
        observed_generation: None,
        last_transition_time: transition,
    };
    let mut out = status.clone();
    match out
        .conditions
        .iter_mut()
        .find(|c| c.type_ == CONTENT_PUBLISHED)
    {
        Some(existing) => *existing = condition,
        None => out.conditions.push(condition),
    }
    out
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    fn spec_with(content: String) -> HAProxyCfgSpec {
        HAProxyCfgSpec {
            path: "/etc/haproxy/haproxy.cfg".into(),
            content,
            checksum: "sha256:abcd".into(),
            ..HAProxyCfgSpec::default()
        }
    }

    /// Compressible text of exactly `len` bytes: a haproxy.cfg-like repetition.
    fn compressible(len: usize) -> String {
        let line = "    server web-1 10.0.0.1:8080 check weight 100\n";
        line.repeat(len / line.len() + 1)[..len].to_string()
    }

    /// Text of `len` bytes that gzip compresses poorly: the hex of a SHA-256 chain.
    fn incompressible(len: usize) -> String {
        let mut out = String::with_capacity(len + 64);
        let mut digest = Sha256::digest(b"seed");
        while out.len() < len {
            for byte in digest.iter() {
                out.push_str(&format!("{byte:02x}"));
            }
            digest = Sha256::digest(digest);
        }
        out.truncate(len);
        out
    }

    #[test]
    fn content_up_to_the_text_limit_is_stored_as_text_with_its_size() {
        for len in [0, 17, TEXT_LIMIT] {
            let spec = spec_with(compressible(len));
            let encoded = encode_spec(&spec);
            assert_eq!(encoded.storage, ContentStorage::Text { size: len });
            assert_eq!(encoded.spec.content, spec.content);
            assert_eq!(encoded.spec.content_encoding, None);
            assert_eq!(encoded.spec.size, Some(len as u64));
            assert_eq!(encoded.spec.checksum, "sha256:abcd");
            assert_eq!(decode_content(&encoded.spec).as_ref(), Ok(&spec.content));
        }
    }

    #[test]
    fn content_one_byte_above_the_text_limit_is_stored_gzip_base64_and_decodes_back() {
        let spec = spec_with(compressible(TEXT_LIMIT + 1));
        let encoded = encode_spec(&spec);
        assert!(
            matches!(encoded.storage, ContentStorage::Compressed { size, encoded }
                if size == TEXT_LIMIT + 1 && encoded < TEXT_LIMIT),
            "{:?}",
            encoded.storage
        );
        assert_eq!(encoded.spec.content_encoding.as_deref(), Some(GZIP_BASE64));
        assert_eq!(encoded.spec.size, Some(TEXT_LIMIT as u64 + 1));
        assert_eq!(encoded.spec.checksum, "sha256:abcd");
        assert_eq!(decode_content(&encoded.spec), Ok(spec.content));
    }

    #[test]
    fn encoding_the_same_content_twice_gives_the_same_spec() {
        let spec = spec_with(compressible(300 * 1024));
        assert_eq!(encode_spec(&spec), encode_spec(&spec));
    }

    #[test]
    fn incompressible_content_whose_encoded_form_is_at_most_the_limit_is_still_published() {
        // Hex compresses to about half and base64 adds a third: 1.2 MiB encodes to ~0.9 MiB.
        let spec = spec_with(incompressible(1200 * 1024));
        let encoded = encode_spec(&spec);
        let ContentStorage::Compressed {
            encoded: length, ..
        } = encoded.storage
        else {
            panic!("{:?}", encoded.storage);
        };
        assert!(length <= ENCODED_LIMIT && length == encoded.spec.content.len());
        assert_eq!(decode_content(&encoded.spec), Ok(spec.content));
    }

    #[test]
    fn content_whose_encoded_form_exceeds_the_limit_is_omitted_with_checksum_and_size() {
        let spec = spec_with(incompressible(2 * 1024 * 1024));
        let encoded = encode_spec(&spec);
        let ContentStorage::Omitted {
            size,
            encoded: length,
        } = encoded.storage
        else {
            panic!("{:?}", encoded.storage);
        };
        assert_eq!(size, 2 * 1024 * 1024);
        assert!(length > ENCODED_LIMIT, "{length}");
        assert_eq!(encoded.spec.content, "");
        assert_eq!(encoded.spec.content_encoding.as_deref(), Some(OMITTED));
        assert_eq!(encoded.spec.size, Some(2 * 1024 * 1024));
        assert_eq!(encoded.spec.checksum, "sha256:abcd");
        assert_eq!(
            decode_content(&encoded.spec),
            Err(DecodeError::Omitted {
                size: 2 * 1024 * 1024
            })
        );
        let message = encoded.storage.message();
        assert!(
            message.contains(&format!("{size} bytes"))
                && message.contains(&format!("{ENCODED_LIMIT}-byte limit")),
            "{message}"
        );
    }

    #[test]
    fn malformed_or_unknown_encodings_and_wrong_sizes_do_not_decode() {
        let mut spec = spec_with("not base64!".into());
        spec.content_encoding = Some(GZIP_BASE64.into());
        assert!(matches!(decode_content(&spec), Err(DecodeError::Base64(_))));
        spec.content = STANDARD.encode(b"plain, not gzip");
        assert!(matches!(decode_content(&spec), Err(DecodeError::Gzip(_))));
        spec.content_encoding = Some("zstd".into());
        assert_eq!(
            decode_content(&spec),
            Err(DecodeError::UnknownEncoding("zstd".into()))
        );
        let mut sized = spec_with("global\n".into());
        sized.size = Some(3);
        assert_eq!(
            decode_content(&sized),
            Err(DecodeError::SizeMismatch {
                expected: 3,
                found: 7
            })
        );
    }

    #[test]
    fn the_content_condition_replaces_the_earlier_one_and_keeps_its_time_while_it_holds() {
        let t0: Timestamp = "2026-12-01T10:00:00.250Z".parse().expect("a time");
        let t1: Timestamp = "2026-12-01T11:00:00Z".parse().expect("a time");
        let other = Condition {
            type_: "Other".into(),
            status: "True".into(),
            reason: "Because".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(t0),
        };
        let status = HAProxyCfgStatus {
            conditions: vec![other.clone()],
            ..HAProxyCfgStatus::default()
        };
        let text = ContentStorage::Text { size: 7 };
        let first = with_content_condition(&status, &text, None, t0);
        assert_eq!(first.conditions.len(), 2);
        assert_eq!(first.conditions[0], other);
        let published = &first.conditions[1];
        assert_eq!(
            (
                published.type_.as_str(),
                published.status.as_str(),
                published.reason.as_str()
            ),
            (CONTENT_PUBLISHED, "True", PUBLISHED)
        );
        // Kubernetes keeps seconds.
        assert_eq!(
            published.last_transition_time,
            Time("2026-12-01T10:00:00Z".parse().expect("a time"))
        );
        let again = with_content_condition(&first, &text, Some(&first), t1);
        assert_eq!(again, first);
        let omitted = ContentStorage::Omitted {
            size: 5,
            encoded: ENCODED_LIMIT + 1,
        };
        let too_large = with_content_condition(&first, &omitted, Some(&first), t1);
        assert_eq!(too_large.conditions.len(), 2);
        let condition = &too_large.conditions[1];
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", CONTENT_TOO_LARGE)
        );
        assert_eq!(condition.last_transition_time, Time(t1));
        assert_eq!(condition.message, omitted.message());
    }
}
