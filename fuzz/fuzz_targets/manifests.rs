//! The manifest loader (`haptor render --fixtures`, `haptor local`) on arbitrary text: every
//! document becomes a manifest or a problem naming a line of the file; nothing panics.
#![no_main]

use std::path::Path;

use haptor::pure::manifests::parse_manifests;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let set = parse_manifests(Path::new("fuzz.yaml"), text);
    let lines = text.lines().count().max(1);
    for manifest in &set.manifests {
        let _ = (
            manifest.api_version(),
            manifest.kind(),
            manifest.display_name(),
        );
    }
    for problem in &set.problems {
        let _ = problem.to_string();
        if let Some(line) = problem.line {
            assert!(
                (1..=lines + 1).contains(&line),
                "problem line {line} outside the file's {lines} lines: {problem}"
            );
        }
    }
});
