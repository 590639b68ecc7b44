//! `haptor plan` on pairs of configurations: the input is split at its first NUL byte into
//! the deployed and the desired `haproxy.cfg` (a further NUL starts a map file for each,
//! `maps/fuzz.map`), and `plan(deployed, desired)` must not panic. Two properties are
//! checked too: a configuration planned against itself needs nothing, and when
//! `runtime_only_by_lines` says no reload is needed the full plan agrees.
#![no_main]

use haptor::pure::deploy::plan::{plan, runtime_only_by_lines};
use haptor::pure::rendered::{AuxFile, AuxKind, RenderedConfig};
use libfuzzer_sys::fuzz_target;

fn rendered(haproxy_cfg: &str, map: Option<&str>) -> RenderedConfig {
    let mut config = RenderedConfig {
        haproxy_cfg: haproxy_cfg.to_owned(),
        ..Default::default()
    };
    if let Some(content) = map {
        config.aux_files.insert(
            "maps/fuzz.map".to_owned(),
            AuxFile {
                kind: AuxKind::Map,
                name: "fuzz.map".to_owned(),
                path: "maps/fuzz.map".to_owned(),
                content: content.to_owned(),
            },
        );
    }
    config
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(4, '\0');
    let from_cfg = parts.next().unwrap_or_default();
    let to_cfg = parts.next().unwrap_or_default();
    let from_map = parts.next();
    let to_map = parts.next();
    let from = rendered(from_cfg, from_map);
    let to = rendered(to_cfg, to_map.or(from_map));

    let _ = plan(None, &to);
    let planned = plan(Some(&from), &to);
    if let Ok(planned) = &planned {
        let _ = planned.to_text();
        if runtime_only_by_lines(&from, &to) {
            assert!(
                !planned.reload,
                "runtime_only_by_lines says no reload, the plan reloads: {:?}",
                planned.reload_reasons
            );
        }
    }
    if let Ok(same) = plan(Some(&to), &to) {
        assert!(
            !same.reload && same.operations.is_empty(),
            "a configuration planned against itself needs {same:?}"
        );
    }
});
