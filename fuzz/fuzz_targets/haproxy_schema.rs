//! Everything haptor runs on a parsed HAProxy configuration, on arbitrary text: the schema
//! check, the code-running guard (trusting no line, then every line) and the structured
//! view deployment reads. Nothing may panic.
#![no_main]

use haptor::pure::haproxy::{TrustedLines, check_code_running, check_schema, parse_config, view};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = parse_config(text) else {
        return;
    };
    for problem in check_schema(&config) {
        let _ = problem.to_string();
    }
    let _ = check_code_running(&config, text, &TrustedLines::default());
    let _ = check_code_running(&config, text, &TrustedLines::new(text.lines()));
    let _ = view(&config);
});
