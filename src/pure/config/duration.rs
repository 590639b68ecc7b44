//! Go-style durations (`2s`, `1m30s`, `500ms`), the syntax HAPTIC users already write in
//! their configs.

use std::time::Duration;

/// A duration text that is not in Go's syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{text}' is not a duration: {reason} (write e.g. 2s, 500ms or 1m30s)")]
pub struct DurationError {
    pub text: String,
    pub reason: &'static str,
}

/// Parses a Go-style duration: one or more `<number><unit>` pairs with units `ns`, `us`,
/// `µs`, `ms`, `s`, `m`, `h`. A bare `0` is zero. Negative durations are refused.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        text: text.to_string(),
        reason,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(err("it is empty"));
    }
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    if trimmed.starts_with('-') {
        return Err(err("it is negative"));
    }
    let mut total_nanos: u128 = 0;
    let mut rest = trimmed.strip_prefix('+').unwrap_or(trimmed);
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return Err(err("a unit is not preceded by a number"));
        }
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| err("a number is malformed"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit: f64 = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(err("a number has no unit")),
            _ => return Err(err("the unit is not one of ns, us, ms, s, m, h")),
        };
        rest = &rest[unit_len..];
        total_nanos += (number * nanos_per_unit) as u128;
    }
    let nanos = u64::try_from(total_nanos).map_err(|_| err("it is too long"))?;
    Ok(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_with_several_units_add_up() {
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_number_without_a_unit_or_an_unknown_unit_is_refused() {
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("s").is_err());
    }
}
