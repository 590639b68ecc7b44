//! When the certificates a render deploys stop being valid. HAProxy loads an expired
//! certificate without complaint and serves it, and every client then refuses the
//! handshake, so haptor reads each PEM certificate's `notAfter` and tells the user which
//! file expired. Only the few DER fields on the way to the validity period are read (the
//! outer certificate, its to-be-signed part, the optional version, the serial number, the
//! signature algorithm, the issuer, then the validity); anything else is not judged here
//! (`haproxy -c` is). [`validity`] reads the whole period, by which haptor rotates the
//! webhook certificates it issues itself (`pure::webhook_certificate`).

use base64::Engine;

use crate::pure::rendered::{AuxKind, RenderedConfig};

/// A certificate file of a render whose certificate is past its `notAfter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredCertificate {
    /// The file's path, as the render names it (`ssl/default_secure-tls.pem`).
    pub path: String,
    /// The `notAfter` of its first expired certificate, as `YYYY-MM-DDTHH:MM:SSZ`.
    pub not_after: String,
}

/// Every certificate file of `rendered` (kind `cert`) holding a certificate whose
/// `notAfter` lies before `now` (seconds since the Unix epoch).
pub fn expired_certificates(rendered: &RenderedConfig, now: i64) -> Vec<ExpiredCertificate> {
    rendered
        .aux_files
        .values()
        .filter(|file| file.kind == AuxKind::Cert)
        .filter_map(|file| {
            let expired = pem_certificates(&file.content)
                .filter_map(|der| not_after(&der))
                .find(|(seconds, _)| *seconds < now)?;
            Some(ExpiredCertificate {
                path: file.path.clone(),
                not_after: expired.1,
            })
        })
        .collect()
}

/// The DER bytes of each `CERTIFICATE` block of a PEM text (blocks that do not decode are
/// skipped).
pub fn pem_certificates(text: &str) -> impl Iterator<Item = Vec<u8>> + '_ {
    text.split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .filter_map(|block| {
            let body = block.split("-----END CERTIFICATE-----").next()?;
            let joined: String = body.chars().filter(|c| !c.is_whitespace()).collect();
            base64::engine::general_purpose::STANDARD
                .decode(joined)
                .ok()
        })
}

/// One DER element: its tag and contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[count..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The certificate's `notAfter`: seconds since the Unix epoch and the time as text.
fn not_after(der: &[u8]) -> Option<(i64, String)> {
    validity_times(der).map(|(_, after)| after)
}

/// The certificate's validity period, `notBefore` and `notAfter` in seconds since the Unix
/// epoch (`None` when the DER is not a certificate this walk can read).
pub fn validity(der: &[u8]) -> Option<(i64, i64)> {
    validity_times(der).map(|(before, after)| (before.0, after.0))
}

/// `notBefore` and `notAfter`, each in seconds and as text.
fn validity_times(der: &[u8]) -> Option<((i64, String), (i64, String))> {
    const SEQUENCE: u8 = 0x30;
    let (tag, certificate, _) = element(der)?;
    let (tbs_tag, tbs, _) = element(certificate)?;
    if tag != SEQUENCE || tbs_tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // [0] EXPLICIT version, absent for v1 certificates.
    if rest.first() == Some(&0xa0) {
        rest = element(rest)?.2;
    }
    for expected in [0x02, SEQUENCE, SEQUENCE] {
        // serialNumber, signature, issuer
        let (tag, _, next) = element(rest)?;
        if tag != expected {
            return None;
        }
        rest = next;
    }
    let (tag, validity, _) = element(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (before_tag, before, after_not_before) = element(validity)?;
    let (after_tag, after, _) = element(after_not_before)?;
    Some((
        parse_time(before_tag, std::str::from_utf8(before).ok()?)?,
        parse_time(after_tag, std::str::from_utf8(after).ok()?)?,
    ))
}

/// A UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime (`YYYYMMDDHHMMSSZ`, 0x18).
fn parse_time(tag: u8, text: &str) -> Option<(i64, String)> {
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy: i64 = digits[..2].parse().ok()?;
            // RFC 5280: 50–99 are 1950–1999, 00–49 are 2000–2049.
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (0x18, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let field = |at: usize| -> Option<i64> { rest.get(at..at + 2)?.parse().ok() };
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some((
        seconds,
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"),
    ))
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::rendered::AuxFile;

    /// The library's self-signed test certificate (tests/data/valid.pem, from
    /// deploy/library/testdata) and one that expired on 2020-01-02 (tests/data/expired.pem).
    const VALID: &str = include_str!("../../tests/data/valid.pem");
    const EXPIRED: &str = include_str!("../../tests/data/expired.pem");

    fn render_with(content: &str) -> RenderedConfig {
        let mut rendered = RenderedConfig::default();
        rendered.aux_files.insert(
            "ssl/a.pem".into(),
            AuxFile {
                kind: AuxKind::Cert,
                name: "a.pem".into(),
                path: "ssl/a.pem".into(),
                content: content.into(),
            },
        );
        rendered
    }

    #[test]
    fn an_expired_certificate_file_is_named_with_its_not_after() {
        let now = days_from_civil(2026, 12, 1) * 86_400;
        assert_eq!(
            expired_certificates(&render_with(EXPIRED), now),
            [ExpiredCertificate {
                path: "ssl/a.pem".into(),
                not_after: "2020-01-02T00:00:00Z".into(),
            }]
        );
        assert!(expired_certificates(&render_with(VALID), now).is_empty());
    }

    #[test]
    fn text_that_is_not_a_certificate_is_not_judged() {
        let now = days_from_civil(2026, 12, 1) * 86_400;
        for text in [
            "",
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        ] {
            assert!(
                expired_certificates(&render_with(text), now).is_empty(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_validity_period_is_read_from_not_before_to_not_after() {
        let der = pem_certificates(EXPIRED).next().expect("a certificate");
        let (before, after) = validity(&der).expect("its validity");
        assert_eq!(before, days_from_civil(2020, 1, 1) * 86_400);
        assert_eq!(after, days_from_civil(2020, 1, 2) * 86_400);
        assert!(validity(b"not a certificate").is_none());
    }

    #[test]
    fn both_time_forms_are_read_as_rfc_5280_says() {
        assert_eq!(
            parse_time(0x17, "200102000000Z").map(|t| t.1).as_deref(),
            Some("2020-01-02T00:00:00Z")
        );
        assert_eq!(
            parse_time(0x17, "991231235959Z").map(|t| t.1).as_deref(),
            Some("1999-12-31T23:59:59Z")
        );
        assert_eq!(
            parse_time(0x18, "20500101000000Z").map(|t| t.0),
            Some(days_from_civil(2050, 1, 1) * 86_400)
        );
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert!(parse_time(0x17, "2001020000Z").is_none());
        assert!(parse_time(0x18, "20201302000000Z").is_none());
    }
}
