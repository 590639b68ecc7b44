//! Template compilation on arbitrary template text, then a render against empty stores with
//! tight render limits (the guards every render runs under). Compile and render errors are
//! fine; panics, hangs and runaway memory are not.
//!
//! Input: the `haproxy.cfg` template, optionally followed by more templates, each after a
//! line `@@ KIND NAME` where KIND is `snippet`, `map`, `file` or `cert` (`scripts/fuzz`
//! writes the templates of `deploy/library/ingress.yaml` in this form as seeds).
#![no_main]

use std::time::Duration;

use haptor::pure::rendered::PathResolver;
use haptor::pure::store::StoresSnapshot;
use haptor::pure::template::{RenderContext, RenderLimits, TemplateSet, TemplateSetInput};
use libfuzzer_sys::fuzz_target;

/// Splits the input into a template set (see the module comment).
fn template_set_input(text: &str) -> TemplateSetInput {
    let mut input = TemplateSetInput::default();
    let mut parts = text.split("\n@@ ");
    input.haproxy_config = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        let (header, body) = part.split_once('\n').unwrap_or((part, ""));
        let (kind, name) = header.split_once(' ').unwrap_or((header, ""));
        let templates = match kind {
            "snippet" => &mut input.snippets,
            "map" => &mut input.maps,
            "file" => &mut input.files,
            "cert" => &mut input.ssl_certificates,
            _ => continue,
        };
        templates.insert(name.to_owned(), body.to_owned());
    }
    input
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(set) = TemplateSet::compile(template_set_input(text)) else {
        return;
    };
    let set = set.with_limits(RenderLimits {
        max_render_time: Duration::from_secs(2),
        max_output_bytes: 1 << 20,
    });
    // The extraContext of deploy/library/ingress.yaml, so its templates render past their
    // first lines.
    let extra_context = serde_json::json!({
        "http_bind": "127.0.0.1:18080",
        "https_bind": "127.0.0.1:18443",
        "status_bind": "127.0.0.1:18404",
        "runtime_socket": "",
        "ingress_class": "haptor",
        "server_slots": 10,
    });
    let context = RenderContext::new(StoresSnapshot::new(), PathResolver::default())
        .with_extra_context(extra_context);
    if let Ok(rendered) = set.render(&context) {
        assert!(
            rendered.haproxy_cfg.len() <= 1 << 20,
            "the output limit was not enforced: {} bytes",
            rendered.haproxy_cfg.len()
        );
        // A second render reuses the memos of the first; it must give the same output.
        if let Ok(again) = set.render(&context) {
            assert_eq!(
                rendered.haproxy_cfg, again.haproxy_cfg,
                "a memoised render differs"
            );
        }
    }
});
