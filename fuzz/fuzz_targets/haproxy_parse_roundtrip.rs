//! The HAProxy tokenizer and parser on arbitrary text, and the serializer's round trip: a
//! config that parses is written back (`to_string()`), the text parses again to an equal
//! config (line numbers, comments and blank lines included, as `ast.rs` promises), and
//! writing that gives the same text.
#![no_main]

use haptor::pure::haproxy::parse_config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = parse_config(text) else {
        return;
    };
    let written = config.to_string();
    let reparsed = match parse_config(&written) {
        Ok(reparsed) => reparsed,
        Err(e) => {
            panic!("the serialization does not parse: {e}\ninput:\n{text}\nwritten:\n{written}")
        }
    };
    assert_eq!(
        config, reparsed,
        "the re-parse differs\ninput:\n{text:?}\nwritten:\n{written:?}"
    );
    assert!(config.eq_ignoring_layout(&reparsed));
    assert_eq!(
        written,
        reparsed.to_string(),
        "the second serialization differs"
    );
});
