use serde_json::{Value, json};

use super::*;
use crate::pure::config::{AnnotationDefinition, AnnotationScope, AnnotationSettings};

fn definition(accepts: &str) -> AnnotationDefinition {
    AnnotationDefinition {
        accepts: accepts.to_string(),
        order: 50,
        ..AnnotationDefinition::default()
    }
}

fn table(definitions: &[(&str, AnnotationDefinition)]) -> AnnotationTable {
    let settings = AnnotationSettings {
        prefixes: vec!["haproxy.org/".into(), "nginx.ingress.kubernetes.io/".into()],
        definitions: definitions
            .iter()
            .map(|(name, d)| (name.to_string(), d.clone()))
            .collect(),
    };
    AnnotationTable::new(&settings).expect("a valid table")
}

fn check(accepts: &str, raw: &str) -> Result<Value, String> {
    ValueKind::parse(accepts)
        .expect("a kind")
        .check(raw)
        .map_err(|err| err.0)
}

#[test]
fn each_kind_hands_out_a_checked_form_and_refuses_what_it_cannot_place_safely() {
    assert_eq!(check("bool", "true"), Ok(json!(true)));
    assert_eq!(check("bool", "false"), Ok(json!(false)));
    assert!(check("bool", "yes").is_err());
    assert_eq!(check("duration", "45s"), Ok(json!("45s")));
    assert!(check("duration", "-5s").is_err());
    assert!(check("duration", "5s\ntimeout client 1").is_err());
    assert_eq!(check("seconds", "30"), Ok(json!("30s")));
    assert!(check("seconds", "30s").is_err());
    assert_eq!(check("integer 1..10", "10"), Ok(json!(10)));
    assert!(check("integer 1..10", "11").is_err());
    assert_eq!(check("size", "8m"), Ok(json!(8 * 1024 * 1024)));
    assert_eq!(check("size", "0"), Ok(json!(0)));
    assert!(check("size", "8 m").is_err());
    assert_eq!(check("redirect-code", "308"), Ok(json!(308)));
    assert!(check("redirect-code", "200").is_err());
    assert_eq!(
        check("statuses 404|503|504", "503, 404,503"),
        Ok(json!([503, 404]))
    );
    assert!(check("statuses 404|503", "500").is_err());
    assert!(check("statuses 404|503", "404;503").is_err());
    assert!(check("statuses 404|503", "").is_err());
    assert!(ValueKind::parse("statuses 404|six").is_err());
    assert_eq!(check("one-of a|b", "b"), Ok(json!("b")));
    assert!(check("one-of a|b", "c").is_err());
    assert_eq!(
        check("addresses", " 10.0.0.0/8, 192.168.1.1,fd00::/8 "),
        Ok(json!("10.0.0.0/8 192.168.1.1 fd00::/8"))
    );
    assert!(check("addresses", "10.0.0.0/33").is_err());
    assert!(check("addresses", "10.0.0.0/8 } or { always_true").is_err());
    assert_eq!(
        check("headers", "X-One 1\nX-Two a \"b\" $HOME 100%"),
        Ok(json!([{"name": "X-One", "value": "1"},
                  {"name": "X-Two", "value": "a \\\"b\\\" \\$HOME 100%%"}]))
    );
    assert!(check("headers", "X-Bad\u{7}value x").is_err());
    assert_eq!(
        check("host", "Example.COM:8080"),
        Ok(json!("example.com:8080"))
    );
    assert!(check("host", "exa mple.com").is_err());
    assert_eq!(
        check("url", "https://example.com/a%20b"),
        Ok(json!("https://example.com/a%%20b"))
    );
    assert!(check("url", "javascript:alert(1)").is_err());
    assert_eq!(
        check("origins", "https://a.example, http://b.example:8080"),
        Ok(json!(["https://a.example", "http://b.example:8080"]))
    );
    assert!(check("origins", "a.example").is_err());
    assert_eq!(
        check("tokens", "GET,POST , PUT"),
        Ok(json!("GET, POST, PUT"))
    );
    assert_eq!(check("balance", "leastconn"), Ok(json!("leastconn")));
    assert!(check("balance", "leastconn\nhash-type consistent").is_err());
    assert_eq!(
        check("path-rewrite", "^/api/(.*) /\\1"),
        Ok(json!({"regex": "^/api/(.*)", "replacement": "/\\1"}))
    );
    assert_eq!(
        check("path-rewrite", "/new"),
        Ok(json!({"regex": "^.*$", "replacement": "/new"}))
    );
    assert!(check("path-rewrite", "^/('x) /y").is_err());
    assert!(check("path-rewrite", "^/(x /y").is_err());
    assert_eq!(
        check("upstream-hash", "$request_uri"),
        Ok(json!("uri whole"))
    );
    assert_eq!(
        check("upstream-hash", "$http_x_user"),
        Ok(json!("hdr(x-user)"))
    );
    assert!(check("upstream-hash", "$cookie_session").is_err());
    assert!(check("config-lines", "timeout server 5s\nfrontend evil").is_err());
    assert_eq!(
        check("config-lines", "timeout server 5s\n\nretries 2"),
        Ok(json!("timeout server 5s\n  retries 2"))
    );
    assert_eq!(
        check("rewrite-target", "/$2/x%20$1"),
        Ok(json!({"target": "/\\2/x%%20\\1", "captures": true}))
    );
    assert_eq!(
        check("rewrite-target", "/app"),
        Ok(json!({"target": "/app", "captures": false}))
    );
    assert!(check("rewrite-target", "/$x").is_err());
    assert!(check("rewrite-target", "/$0").is_err());
    assert!(check("rewrite-target", "/${HOME}").is_err());
    assert!(check("rewrite-target", "relative/$1").is_err());
    assert_eq!(check("pattern [a-z]+", "abc"), Ok(json!("abc")));
    assert!(check("pattern [a-z]+", "abc1").is_err());
    assert!(ValueKind::parse("colour").is_err());
}

#[test]
fn request_samples_are_one_per_line_from_the_fetches_and_converters_haproxy_always_accepts() {
    assert_eq!(
        check(
            "samples",
            "  req.hdr(User-Agent),lower\n\n url_param(id)\ncook(session),base64\n"
        ),
        Ok(json!([
            "req.hdr(User-Agent),lower",
            "url_param(id)",
            "cook(session),base64"
        ]))
    );
    assert_eq!(check("samples", "path"), Ok(json!(["path"])));
    for (raw, why) in [
        ("hdr(host) if { always_true }", "a condition"),
        ("hdr(x)\nfrontend evil", "a section keyword"),
        ("req.body", "a fetch outside the list"),
        ("hdr(x),lua.run", "a converter outside the list"),
        ("hdr(a b)", "a space in the argument"),
        ("hdr(%[src])", "a sample inside the argument"),
        ("", "nothing"),
    ] {
        assert!(check("samples", raw).is_err(), "{why} is refused: {raw:?}");
    }
    let many = vec!["path"; 17].join("\n");
    assert_eq!(
        check("samples", &many),
        Err("17 request samples, more than the 16 one annotation may capture".into())
    );
}

#[test]
fn an_invalid_value_is_judged_with_a_reason_naming_the_annotation_and_the_value() {
    let table = table(&[("haproxy.org/timeout-server", definition("duration"))]);
    let definition = table
        .definition("haproxy.org/timeout-server")
        .expect("defined");
    let annotations = json!({"haproxy.org/timeout-server": "-5s"});
    assert_eq!(
        table.judge(definition, &annotations),
        Judged::Invalid(
            "annotation haproxy.org/timeout-server: \"-5s\" is not a duration such as 30s or 500ms; it is left out"
                .into()
        )
    );
    assert_eq!(table.judge(definition, &json!({})), Judged::Absent);
}

#[test]
fn unknown_and_refused_annotations_under_an_owned_prefix_are_left_out_and_others_are_not_judged() {
    let mut refused = definition("text");
    refused.refused = Some("nginx syntax cannot be translated".into());
    let mut allow = definition("addresses");
    allow.aliases = vec!["haproxy.org/whitelist".into()];
    allow.section = Some("backend".into());
    allow.template = Some("x".into());
    let table = table(&[
        ("nginx.ingress.kubernetes.io/configuration-snippet", refused),
        ("haproxy.org/allow-list", allow),
    ]);
    let annotations = json!({
        "nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers x",
        "nginx.ingress.kubernetes.io/no-such-thing": "1",
        "haproxy.org/whitelist": "10.0.0.1",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    });
    let reasons = table.left_out(&annotations);
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].contains("configuration-snippet is not supported: nginx syntax"));
    assert!(reasons[1].contains("no-such-thing is not one haptor knows"));
    assert!(
        table.any_in_section("backend", &annotations),
        "the alias counts"
    );
    assert!(!table.any_in_section("backend", &json!({"haproxy.org/whitelist": "x"})));
    let mut fail_closed = definition("addresses");
    fail_closed.section = Some("backend".into());
    fail_closed.template = Some("x".into());
    fail_closed.when_invalid = Some("http-request deny".into());
    let table = super::tests::table(&[("haproxy.org/allow-list", fail_closed)]);
    assert!(
        table.any_in_section("backend", &json!({"haproxy.org/allow-list": "x"})),
        "an invalid value of a definition that fails closed still renders its lines"
    );
}

#[test]
fn a_definition_that_cannot_work_is_refused_with_its_field() {
    let mut no_section = definition("bool");
    no_section.template = Some("x".into());
    no_section.section = None;
    let settings = AnnotationSettings {
        prefixes: vec!["haproxy.org".into()],
        definitions: [
            ("haproxy.org/a".to_string(), definition("colour")),
            ("haproxy.org/b".to_string(), no_section),
        ]
        .into(),
    };
    let problems = AnnotationTable::new(&settings).expect_err("refused");
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.annotations.prefixes[0]",
            "spec.annotations.definitions.haproxy.org/a",
            "spec.annotations.definitions.haproxy.org/b"
        ]
    );
}

#[test]
fn an_acting_annotation_becomes_a_snippet_that_gives_its_template_the_checked_value() {
    let mut timeout = definition("duration");
    timeout.section = Some("backend".into());
    timeout.order = 7;
    timeout.template = Some("timeout server {{value}}".into());
    let settings = AnnotationSettings {
        prefixes: vec![],
        definitions: [("haproxy.org/timeout-server".to_string(), timeout)].into(),
    };
    let snippets = generated_snippets(&settings);
    assert_eq!(
        snippets.keys().collect::<Vec<_>>(),
        ["annotations/backend/0007/haproxy.org/timeout-server"]
    );
    assert!(
        snippets.values().next().expect("one").contains(
            "{{#each (annotation ing \"haproxy.org/timeout-server\" as_list=true) as |value|}}\n  timeout server {{value}}\n{{/each}}"
        )
    );
}

/// A table of a Service- and Defaults-scope timeout (with an alias), an Ingress-only
/// allow-list and a refused annotation.
fn scoped_table() -> AnnotationTable {
    let mut timeout = definition("duration");
    timeout.scopes = vec![
        AnnotationScope::Ingress,
        AnnotationScope::Service,
        AnnotationScope::Defaults,
    ];
    timeout.aliases = vec!["haproxy.org/server-timeout".into()];
    timeout.section = Some("backend".into());
    timeout.template = Some("timeout server {{value}}".into());
    let mut allow = definition("addresses");
    allow.scopes = vec![AnnotationScope::Ingress];
    allow.section = Some("backend".into());
    allow.template = Some("x".into());
    let mut refused = definition("text");
    refused.refused = Some("nginx syntax cannot be translated".into());
    table(&[
        ("haproxy.org/timeout-server", timeout),
        ("haproxy.org/allow-list", allow),
        ("nginx.ingress.kubernetes.io/server-snippet", refused),
    ])
}

#[test]
fn a_service_value_wins_over_the_ingress_and_a_default_fills_in_only_what_neither_carries_validly()
{
    let table = scoped_table();
    let defaults = json!({"haproxy.org/timeout-server": "1m"});
    let merged = |ingress: Value, service: Value| {
        let merged = table
            .backend_annotations(&ingress, &service, &defaults)
            .expect("valid defaults");
        (Value::Object(merged.annotations), merged.service_left_out)
    };

    let (annotations, left_out) = merged(
        json!({"haproxy.org/timeout-server": "5s", "haproxy.org/allow-list": "10.0.0.0/8"}),
        json!({"haproxy.org/server-timeout": "7s"}),
    );
    assert_eq!(
        annotations,
        json!({"haproxy.org/server-timeout": "7s", "haproxy.org/allow-list": "10.0.0.0/8"}),
        "the Service's alias replaces the Ingress's name; the Ingress-only one stays"
    );
    assert!(left_out.is_empty(), "{left_out:?}");

    let (annotations, _) = merged(json!({"haproxy.org/timeout-server": "5s"}), Value::Null);
    assert_eq!(annotations, json!({"haproxy.org/timeout-server": "5s"}));

    let (annotations, _) = merged(json!({"haproxy.org/timeout-server": "soon"}), Value::Null);
    assert_eq!(
        annotations,
        json!({"haproxy.org/timeout-server": "1m"}),
        "an invalid Ingress value is left out, so the default stands in"
    );

    let (annotations, left_out) = merged(
        Value::Null,
        json!({"haproxy.org/timeout-server": "-3s", "app.example/owner": "team"}),
    );
    assert_eq!(
        annotations,
        json!({"haproxy.org/timeout-server": "1m"}),
        "an invalid Service value is left out too"
    );
    assert_eq!(left_out.len(), 1, "{left_out:?}");
    assert!(
        left_out[0].contains("haproxy.org/timeout-server"),
        "{left_out:?}"
    );
}

#[test]
fn what_a_service_carries_and_does_not_apply_is_named_with_the_reason() {
    let table = scoped_table();
    let merged = table
        .backend_annotations(
            &Value::Null,
            &json!({
                "haproxy.org/allow-list": "10.0.0.0/8",
                "haproxy.org/no-such-thing": "1",
                "nginx.ingress.kubernetes.io/server-snippet": "return 200;",
                "prometheus.io/scrape": "true",
            }),
            &Value::Null,
        )
        .expect("no defaults");
    assert!(merged.annotations.is_empty(), "{:?}", merged.annotations);
    let reasons = merged.service_left_out;
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains(
        "haproxy.org/allow-list is read on Ingresses only; on a Service it has no effect"
    )));
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("no-such-thing is not one haptor knows"))
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("server-snippet is not supported"))
    );
}

#[test]
fn a_default_that_is_not_a_valid_defaults_scope_value_is_the_configs_error_naming_it() {
    let table = scoped_table();
    let error = |defaults: Value| {
        table
            .backend_annotations(&Value::Null, &Value::Null, &defaults)
            .expect_err("refused")
    };
    let bad_value = error(json!({"haproxy.org/timeout-server": "forever"}));
    assert!(
        bad_value.starts_with("extraContext annotation_defaults: ")
            && bad_value.contains("haproxy.org/timeout-server"),
        "{bad_value}"
    );
    let ingress_only = error(json!({"haproxy.org/allow-list": "10.0.0.0/8"}));
    assert!(
        ingress_only.contains("haproxy.org/allow-list takes no default"),
        "{ingress_only}"
    );
    let unknown = error(json!({"haproxy.org/nope": "1"}));
    assert!(
        unknown.contains("haproxy.org/nope is not an annotation"),
        "{unknown}"
    );
    let not_a_map = error(json!(["haproxy.org/timeout-server"]));
    assert!(not_a_map.contains("is not a map"), "{not_a_map}");
}

#[test]
fn scopes_beyond_the_ingress_need_the_ingress_and_a_live_annotation() {
    let mut service_only = definition("bool");
    service_only.scopes = vec![AnnotationScope::Service];
    let mut refused = definition("bool");
    refused.scopes = vec![AnnotationScope::Ingress, AnnotationScope::Defaults];
    refused.refused = Some("no".into());
    let settings = AnnotationSettings {
        prefixes: vec!["haproxy.org/".into()],
        definitions: [
            ("haproxy.org/a".to_string(), service_only),
            ("haproxy.org/b".to_string(), refused),
        ]
        .into(),
    };
    let problems = AnnotationTable::new(&settings).expect_err("refused");
    let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(problems.len(), 2, "{messages:?}");
    assert!(messages[0].contains("add Ingress"), "{messages:?}");
    assert!(
        messages[1].contains("a refused annotation is read nowhere"),
        "{messages:?}"
    );
}

#[test]
fn each_line_of_a_generated_snippet_traces_back_to_its_definitions_field_and_line() {
    let mut defined = definition("duration");
    defined.section = Some("backend".into());
    defined.template = Some("timeout server {{value}}\n\nhttp-request x\n".into());
    defined.when_invalid = Some("http-request deny\n".into());
    let settings = AnnotationSettings {
        prefixes: vec!["haproxy.org/".into()],
        definitions: [("haproxy.org/t".to_string(), defined.clone())].into(),
    };
    let snippet = generated_snippets(&settings)
        .into_values()
        .next()
        .expect("a snippet");
    let fields: [(&str, &str); 2] = [
        ("template", defined.template.as_deref().unwrap_or_default()),
        (
            "whenInvalid",
            defined.when_invalid.as_deref().unwrap_or_default(),
        ),
    ];
    for (index, text) in snippet.lines().enumerate() {
        match generated_line_origin(&defined, index + 1) {
            Some((field, Some(line))) => {
                let source = fields
                    .iter()
                    .find(|(name, _)| *name == field)
                    .and_then(|(_, source)| source.lines().nth(line - 1))
                    .expect("a line of the field");
                assert_eq!(text.trim(), source.trim(), "line {}", index + 1);
            }
            Some((_, None)) => assert!(text.starts_with("{{"), "line {}: {text}", index + 1),
            None => panic!("line {} has no origin", index + 1),
        }
    }
    assert_eq!(
        generated_line_origin(&defined, snippet.lines().count() + 1),
        None
    );
}
