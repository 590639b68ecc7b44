use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::pure::store::{StoreSnapshot, StoresSnapshot};

fn services() -> StoresSnapshot {
    let snapshot = StoreSnapshot::from_objects(
        "services",
        vec!["metadata.namespace".into(), "metadata.name".into()],
        vec![
            json!({"metadata": {"namespace": "shop", "name": "web"}, "spec": {"ports": [{"port": 80.0}]}}),
            json!({"metadata": {"namespace": "shop", "name": "api"}, "spec": {"ports": [{"port": 8080}]}}),
            json!({"metadata": {"namespace": "blog", "name": "web"}, "spec": {"ports": [{"port": 3000}]}}),
        ],
    )
    .unwrap();
    let mut stores = StoresSnapshot::new();
    stores.insert(Arc::new(snapshot));
    stores
}

fn input(haproxy_config: &str) -> TemplateSetInput {
    TemplateSetInput {
        haproxy_config: haproxy_config.to_string(),
        ..Default::default()
    }
}

fn render_text(template: &str) -> Result<String, TemplateError> {
    let set = TemplateSet::compile(input(template))?;
    Ok(set
        .render(&RenderContext::new(services(), PathResolver::default()))?
        .haproxy_cfg)
}

fn render_ok(template: &str) -> String {
    render_text(template).unwrap_or_else(|err| panic!("{template}: {err}"))
}

// ---------------------------------------------------------------- stores in templates

#[test]
fn resources_lists_a_store_in_list_order_as_a_block_and_as_a_list() {
    let expected: Vec<String> = services()
        .get("services")
        .unwrap()
        .objects()
        .map(|o| {
            let o = o.to_value();
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    for template in [
        r#"{{#resources "services"}}{{metadata.namespace}}/{{metadata.name}} {{/resources}}"#,
        r#"{{#resources "services" as |s|}}{{s.metadata.namespace}}/{{s.metadata.name}} {{/resources}}"#,
        r#"{{#each (resources "services")}}{{metadata.namespace}}/{{metadata.name}} {{/each}}"#,
    ] {
        let out = render_ok(template);
        assert_eq!(
            out.split_whitespace().collect::<Vec<_>>(),
            expected,
            "{template}"
        );
    }
}

#[test]
fn the_store_blocks_number_their_iterations_and_fall_back_to_else_when_empty() {
    assert_eq!(
        render_ok(
            r#"{{#resources "services" as |s i|}}{{i}}{{@index}}{{#if @first}}F{{/if}}{{#if @last}}L{{/if}} {{/resources}}"#
        ),
        "00F 11 22L "
    );
    assert_eq!(
        render_ok(r#"{{#fetch "services" "nowhere"}}x{{else}}none{{/fetch}}"#),
        "none"
    );
}

#[test]
fn inside_a_store_block_with_a_parameter_this_is_the_enclosing_this() {
    let set = TemplateSet::compile(input(
        r#"{{#with limits}}{{#resources "services" as |s|}}{{max}}:{{s.metadata.name}} {{/resources}}{{/with}}"#,
    ))
    .unwrap();
    let out = set
        .render(
            &RenderContext::new(services(), PathResolver::default())
                .with_value("limits", json!({"max": 7})),
        )
        .unwrap()
        .haproxy_cfg;
    assert_eq!(out.split_whitespace().count(), 3);
    assert!(out.split_whitespace().all(|w| w.starts_with("7:")), "{out}");
}

#[test]
fn store_data_is_not_a_context_path() {
    assert_eq!(
        render_ok("{{#if resources.services}}a path{{else}}no path{{/if}}"),
        "no path"
    );
    assert_eq!(render_ok(r#"{{len (resources "services")}}"#), "3");
}

#[test]
fn fetch_accepts_a_key_prefix_and_get_single_a_full_key() {
    assert_eq!(render_ok(r#"{{len (fetch "services" "shop")}}"#), "2");
    assert_eq!(render_ok(r#"{{len (fetch "services" "none")}}"#), "0");
    let port = render_ok(
        r#"{{#with (get_single "services" "shop" "web")}}{{spec.ports.0.port}}{{/with}}"#,
    );
    assert_eq!(port, "80", "whole floats are printed as integers");
    assert_eq!(
        render_ok(r#"{{#if (get_single "services" "x" "y")}}found{{else}}absent{{/if}}"#),
        "absent"
    );
}

#[test]
fn fetch_as_a_block_iterates_the_matches_like_each_over_the_list() {
    let as_block = render_ok(
        r#"{{#fetch "services" "shop" as |svc|}}{{@index}}:{{svc.metadata.name}}{{#if @last}}.{{/if}} {{/fetch}}"#,
    );
    let as_list = render_ok(
        r#"{{#each (fetch "services" "shop") as |svc|}}{{@index}}:{{svc.metadata.name}}{{#if @last}}.{{/if}} {{/each}}"#,
    );
    assert_eq!(as_block, as_list);
    assert_eq!(as_block.split_whitespace().count(), 2);
    let empty = render_ok(r#"{{#fetch "services" "nowhere"}}x{{else}}none{{/fetch}}"#);
    assert_eq!(empty, "none");
    let scoped = render_ok(r#"{{#fetch "services" "blog"}}{{metadata.namespace}}{{/fetch}}"#);
    assert_eq!(scoped, "blog");
}

#[test]
fn get_single_with_two_matches_is_an_error_naming_the_count() {
    let err = render_text("\n{{#with (get_single \"services\" \"shop\")}}{{/with}}").unwrap_err();
    assert_eq!(err.line(), Some(2), "{err}");
    assert!(err.to_string().contains("2 objects"), "{err}");
}

#[test]
fn an_unknown_store_is_named_with_the_known_ones() {
    let err = render_text("global\n  {{#each (resources \"ingressez\")}}{{/each}}").unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("template 'haproxy.cfg' line 2"), "{text}");
    assert!(
        text.contains("no watched resource named 'ingressez'"),
        "{text}"
    );
    assert!(text.contains("known: services"), "{text}");
}

// ---------------------------------------------------------------- errors and strictness

#[test]
fn a_missing_variable_is_an_error_naming_template_and_line() {
    let err = render_text("global\n  maxconn {{dataplane.maxconn}}\n").unwrap_err();
    assert_eq!(err.template(), Some("haproxy.cfg"));
    assert_eq!(err.line(), Some(2), "{err}");
    assert!(err.message().contains("dataplane.maxconn"), "{err}");
}

#[test]
fn a_missing_variable_inside_a_loop_reports_the_loop_body_line() {
    let err =
        render_text("{{#each (resources \"services\")}}\nserver {{metadata.nope}}\n{{/each}}")
            .unwrap_err();
    assert_eq!(err.line(), Some(2), "{err}");
}

#[test]
fn fail_aborts_with_exactly_the_authors_message() {
    let err = render_text(
        "global\n{{#if true}}\n  {{fail \"no default certificate configured\"}}\n{{/if}}",
    )
    .unwrap_err();
    match &err {
        TemplateError::Failed {
            template,
            line,
            message,
            ..
        } => {
            assert_eq!(template, "haproxy.cfg");
            assert_eq!(*line, Some(3));
            assert_eq!(message, "no default certificate configured");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert!(
        err.to_string()
            .ends_with(": no default certificate configured"),
        "{err}"
    );
}

#[test]
fn a_syntax_error_names_template_line_and_column() {
    let mut set = input("global\n");
    set.maps
        .insert("hosts.map".into(), "ok\n{{#each x}}\nno close".into());
    let err = TemplateSet::compile(set).unwrap_err();
    assert!(matches!(err, TemplateError::Compile { .. }), "{err:?}");
    assert_eq!(err.template(), Some("maps/hosts.map"));
    assert!(err.line().is_some() && err.column().is_some(), "{err:?}");
}

#[test]
fn an_unclosed_block_is_reported_where_it_opened_rather_than_at_the_templates_end() {
    let err =
        TemplateSet::compile(input("global\n  {{#each x as |y|}}\n  {{y}}\nend\n")).unwrap_err();
    assert_eq!((err.line(), err.column()), (Some(2), Some(3)), "{err}");
    assert_eq!(
        err.message(),
        "`{{#each x as |y|}}` opened at line 2, column 3 is never closed: add `{{/each}}` where its block ends"
    );
}

#[test]
fn a_close_of_the_wrong_block_names_what_was_opened_where() {
    let err = TemplateSet::compile(input("{{#if a}}\n{{#with b}}\nx\n{{/if}}\n")).unwrap_err();
    assert_eq!(err.line(), Some(4), "{err}");
    assert_eq!(
        err.message(),
        "`{{/if}}` at line 4, column 1 closes an outer block while `{{#with b}}` opened at line 2, column 1 is still open: add `{{/with}}` before it"
    );
}

#[test]
fn a_syntax_error_that_is_no_block_problem_keeps_the_handlebars_message() {
    let err = TemplateSet::compile(input("{{#if a}}\n{{x y=}}\n{{/if}}\n")).unwrap_err();
    assert!(err.message().contains("invalid handlebars syntax"), "{err}");
    assert_eq!(err.line(), Some(2), "{err}");
}

/// A config file whose templates sit at known lines: haproxy.cfg's first line is line 9,
/// the `tail` snippet's line 14, the hosts.map's line 18 and the annotation's line 25.
const LOCATED: &str = "\
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata:
  name: c
spec:
  # the main template
  haproxyConfig:
    template: |-
      global
        {{> tail}}
  templateSnippets:
    tail:
      template: |

        {{fail \"snippet line 2\"}}
  maps:
    hosts.map:
      template: \"{{#each x}}\"
  annotations:
    prefixes: [haproxy.org/]
    definitions:
      haproxy.org/x:
        section: backend
        template: |
          a
          b {{nosuchhelper value}}
";

fn located(edit: impl Fn(&mut TemplateSetInput)) -> TemplateError {
    let config =
        crate::pure::config::config_from_yaml("c.yaml", LOCATED).expect("the config parses");
    let mut input = crate::pure::pipeline::template_input(&config.spec);
    edit(&mut input);
    match TemplateSet::compile(input) {
        Err(err) => err,
        Ok(set) => set
            .render(&RenderContext::new(services(), PathResolver::default()))
            .expect_err("the render fails"),
    }
}

#[test]
fn a_template_error_names_the_config_file_and_the_line_its_template_line_is_at() {
    let fine = |input: &mut TemplateSetInput| {
        input.maps.clear();
        input.annotations.definitions.clear();
    };
    let err = located(fine);
    assert_eq!(err.file_line(), Some(("c.yaml", 15)), "{err}");
    assert_eq!(
        err.to_string(),
        "c.yaml:15: template 'tail' line 2, column 1: snippet line 2"
    );
    assert_eq!((err.template(), err.line()), (Some("tail"), Some(2)));

    let err = located(|input| input.annotations.definitions.clear());
    assert_eq!(
        err.file_line(),
        Some(("c.yaml", 18)),
        "a one-line template: {err}"
    );
    assert!(err.message().contains("`{{#each x}}` opened at"), "{err}");

    let err = located(|input| input.maps.clear());
    assert_eq!(
        err.file_line(),
        Some(("c.yaml", 26)),
        "an annotation's template line, not its generated snippet's: {err}"
    );

    let err = located(|input| {
        fine(input);
        input.haproxy_config.push_str("\n{{nosuchhelper 1}}");
    });
    assert_eq!(
        err.file_line(),
        Some(("c.yaml", 10)),
        "past the block's end: its last line"
    );
}

#[test]
fn a_template_error_without_a_line_is_placed_at_its_templates_key() {
    let err = located(|input| {
        input.maps.clear();
        input.annotations.definitions.clear();
        input.snippets.insert("@bad".into(), String::new());
    });
    assert!(err.message().contains("cannot name a snippet"), "{err}");
    assert_eq!(
        err.file_line(),
        Some(("c.yaml", 11)),
        "a snippet the file does not hold: the line of the snippets"
    );
    let err = located(|input| {
        input.maps.clear();
        input.annotations.definitions.clear();
        input
            .snippets
            .insert("tail".into(), "{{fail \"x\"}}".into());
        input.haproxy_config = "{{> tail}}".into();
    });
    assert_eq!(err.file_line(), Some(("c.yaml", 14)), "{err}");
}

#[test]
fn an_unknown_helper_fails_at_compile_time() {
    let err = TemplateSet::compile(input("a\n{{uppper name}}")).unwrap_err();
    assert_eq!(err.line(), Some(2), "{err}");
    assert!(err.message().contains("uppper"), "{err}");
}

#[test]
fn a_partial_that_names_no_snippet_fails_at_compile_time() {
    let err = TemplateSet::compile(input("{{> backends}}")).unwrap_err();
    assert!(
        err.message()
            .contains("no template snippet named 'backends'"),
        "{err}"
    );
}

#[test]
fn snippets_including_each_other_are_rejected_at_compile_time() {
    let mut set = input("{{> a}}");
    set.snippets.insert("a".into(), "{{> b}}".into());
    set.snippets
        .insert("b".into(), "{{render_glob \"a*\"}}".into());
    let err = TemplateSet::compile(set).unwrap_err();
    assert!(err.message().contains("cycle"), "{err}");
    assert!(
        err.message().contains('a') && err.message().contains('b'),
        "{err}"
    );
}

#[test]
fn a_snippet_rendering_itself_by_a_computed_name_stops_at_the_depth_limit() {
    let mut set = input("{{render \"loop\"}}");
    set.snippets
        .insert("loop".into(), "x{{render (concat \"lo\" \"op\")}}".into());
    let set = TemplateSet::compile(set).unwrap();
    let err = set.render(&RenderContext::default()).unwrap_err();
    assert!(err.message().contains("nests deeper"), "{err}");
}

#[test]
fn inline_partial_decorators_are_rejected() {
    let err =
        TemplateSet::compile(input("{{#*inline \"x\"}}{{> x}}{{/inline}}{{> x}}")).unwrap_err();
    assert!(err.message().contains("decorators"), "{err}");
}

#[test]
fn reserved_snippet_names_are_rejected() {
    for name in ["haproxy.cfg", "maps/x", ""] {
        let mut set = input("");
        set.snippets.insert(name.into(), "x".into());
        assert!(TemplateSet::compile(set).is_err(), "{name:?}");
    }
}

#[test]
fn an_error_inside_a_snippet_names_the_snippet() {
    let mut set = input("global\n{{> backends-010-web}}\n");
    set.snippets.insert(
        "backends-010-web".into(),
        "backend web\n  {{fail \"boom\"}}\n".into(),
    );
    let err = TemplateSet::compile(set)
        .unwrap()
        .render(&RenderContext::default())
        .unwrap_err();
    assert_eq!(err.template(), Some("backends-010-web"), "{err}");
    assert_eq!(err.line(), Some(2), "{err}");
}

// ---------------------------------------------------------------- output

#[test]
fn text_is_never_html_escaped() {
    let context =
        RenderContext::default().with_value("acl", json!("hdr(host) -m str <a&b> \"q\" 'x'"));
    let set = TemplateSet::compile(input("{{acl}}|{{{acl}}}")).unwrap();
    let out = set.render(&context).unwrap().haproxy_cfg;
    assert_eq!(
        out,
        "hdr(host) -m str <a&b> \"q\" 'x'|hdr(host) -m str <a&b> \"q\" 'x'"
    );
}

#[test]
fn output_beyond_the_size_limit_is_an_error_naming_the_template() {
    let mut set = input("small");
    set.maps.insert(
        "big.map".into(),
        "{{#each (seq 1000)}}0123456789{{/each}}".into(),
    );
    let limits = RenderLimits {
        max_output_bytes: 5_000,
        ..Default::default()
    };
    let set = TemplateSet::compile(set).unwrap().with_limits(limits);
    let err = set.render(&RenderContext::default()).unwrap_err();
    assert!(
        matches!(
            err,
            TemplateError::OutputLimit {
                limit_bytes: 5_000,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.template(), Some("maps/big.map"));
    let roomy = set.with_limits(RenderLimits {
        max_output_bytes: 20_000,
        ..Default::default()
    });
    assert!(roomy.render(&RenderContext::default()).is_ok());
}

#[test]
fn a_render_past_its_time_limit_is_stopped() {
    let set = TemplateSet::compile(input("{{#each (seq 10000)}}{{this}}\n{{/each}}"))
        .unwrap()
        .with_limits(RenderLimits {
            max_render_time: Duration::ZERO,
            ..Default::default()
        });
    let err = set.render(&RenderContext::default()).unwrap_err();
    assert!(matches!(err, TemplateError::TimeLimit { .. }), "{err:?}");
}

#[test]
fn aux_templates_land_at_resolved_paths() {
    let mut set = input("map_str {{path_for \"hosts.map\" \"map\"}}");
    set.maps
        .insert("hosts.map".into(), "example.com web\n".into());
    set.files.insert("503.http".into(), "HTTP/1.0 503\n".into());
    set.ssl_certificates
        .insert("default/tls".into(), "PEM".into());
    let resolver = PathResolver::default();
    let out = TemplateSet::compile(set)
        .unwrap()
        .render(&RenderContext::new(services(), resolver.clone()))
        .unwrap();
    let map_path = resolver.path(AuxKind::Map, "hosts.map");
    assert_eq!(out.haproxy_cfg, format!("map_str {map_path}"));
    assert_eq!(
        out.aux(AuxKind::Map, "hosts.map").map(|f| f.path.as_str()),
        Some(map_path.as_str())
    );
    assert_eq!(out.aux_files[&map_path].content, "example.com web\n");
    assert!(out.aux(AuxKind::File, "503.http").is_some());
    assert_eq!(
        out.aux(AuxKind::Cert, "default/tls")
            .map(|f| f.path.clone()),
        Some(resolver.path(AuxKind::Cert, "default/tls"))
    );
}

#[test]
fn path_for_rejects_an_unknown_kind() {
    let err = render_text(r#"{{path_for "x" "mapp"}}"#).unwrap_err();
    assert!(err.message().contains("'mapp'"), "{err}");
}

#[test]
fn register_file_adds_a_file_and_returns_its_path() {
    let template = r#"crt-list {{register_file "crt-list" "certs.list" "a.pem\n"}} {{register_file "crt-list" "certs.list" "a.pem\n"}}"#;
    let out = TemplateSet::compile(input(template))
        .unwrap()
        .render(&RenderContext::default())
        .unwrap();
    let file = out
        .aux(AuxKind::CrtList, "certs.list")
        .expect("registered file");
    assert_eq!(file.content, "a.pem\n");
    assert_eq!(out.haproxy_cfg, format!("crt-list {0} {0}", file.path));
}

#[test]
fn register_file_with_conflicting_content_is_an_error() {
    let template =
        "{{register_file \"file\" \"x\" \"one\"}}\n{{register_file \"file\" \"x\" \"two\"}}";
    let err = TemplateSet::compile(input(template))
        .unwrap()
        .render(&RenderContext::default())
        .unwrap_err();
    assert_eq!(err.line(), Some(2), "{err}");
    assert!(err.message().contains("different content"), "{err}");
}

#[test]
fn concurrent_renders_keep_their_registered_files_apart() {
    let set =
        Arc::new(TemplateSet::compile(input(r#"{{register_file "file" "who" who}}"#)).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let set = Arc::clone(&set);
            std::thread::spawn(move || {
                let context =
                    RenderContext::default().with_value("who", json!(format!("render-{i}")));
                (0..50)
                    .map(|_| {
                        set.render(&context)
                            .map(|out| out.aux(AuxKind::File, "who").map(|f| f.content.clone()))
                    })
                    .collect::<Vec<_>>()
                    .into_iter()
                    .all(|content| content == Ok(Some(format!("render-{i}"))))
            })
        })
        .collect();
    for handle in handles {
        assert!(handle.join().unwrap());
    }
}

#[test]
fn render_glob_renders_matching_snippets_in_name_order() {
    let mut set = input("{{render_glob \"backends-*\"}}");
    set.snippets.insert("backends-020-b".into(), "B".into());
    set.snippets.insert("backends-010-a".into(), "A".into());
    set.snippets.insert("frontends-000".into(), "F".into());
    let out = TemplateSet::compile(set)
        .unwrap()
        .render(&RenderContext::default())
        .unwrap();
    assert_eq!(out.haproxy_cfg, "AB");
}

#[test]
fn a_partial_sees_the_current_scope() {
    let mut set = input(r#"{{#resources "services"}}{{> line}}{{/resources}}"#);
    set.snippets
        .insert("line".into(), "{{metadata.name}};".into());
    let out = TemplateSet::compile(set)
        .unwrap()
        .render(&RenderContext::new(services(), PathResolver::default()));
    assert_eq!(out.unwrap().haproxy_cfg.matches(';').count(), 3);
}

// ---------------------------------------------------------------- context

#[test]
fn extra_context_and_values_are_top_level() {
    let context = RenderContext::default()
        .with_value("dataplane", json!({"port": 5555.0}))
        .with_extra_context(json!({"debug": true}));
    let set = TemplateSet::compile(input(
        "{{dataplane.port}} {{#if debug}}debug{{/if}} {{paths.maps_dir}}",
    ))
    .unwrap();
    let out = set.render(&context).unwrap().haproxy_cfg;
    assert_eq!(
        out,
        format!("5555 debug {}", PathResolver::default().maps_dir)
    );
}

#[test]
fn extra_context_cannot_shadow_built_in_values() {
    let set = TemplateSet::compile(input("x")).unwrap();
    for extra in [json!({"resources": 1}), json!({"dataplane": 1}), json!([1])] {
        let context = RenderContext::default()
            .with_value("dataplane", json!({}))
            .with_extra_context(extra.clone());
        let err = set.render(&context).unwrap_err();
        assert!(
            matches!(err, TemplateError::Context { .. }),
            "{extra}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------- stateless helpers

fn with_data(template: &str, data: serde_json::Value) -> String {
    let set =
        TemplateSet::compile(input(template)).unwrap_or_else(|err| panic!("{template}: {err}"));
    set.render(&RenderContext::default().with_value("d", data))
        .unwrap_or_else(|err| panic!("{template}: {err}"))
        .haproxy_cfg
}

#[test]
fn sort_by_orders_by_fields_numerically_and_descending() {
    let data = json!([
        {"n": "b", "w": 10}, {"n": "a", "w": 9}, {"n": "c", "w": 10}, {"n": "d"}
    ]);
    assert_eq!(
        with_data(r#"{{#each (sort_by d "w")}}{{n}}{{/each}}"#, data.clone()),
        "dabc"
    );
    assert_eq!(
        with_data(
            r#"{{#each (sort_by d "w:desc" "n:desc")}}{{n}}{{/each}}"#,
            data
        ),
        "cbad"
    );
}

#[test]
fn group_by_collects_items_under_each_value() {
    let data = json!([{"ns": "b", "n": 1}, {"ns": "a", "n": 2}, {"ns": "b", "n": 3}]);
    let out = with_data(
        r#"{{#each (group_by d "ns")}}{{@key}}={{#each this}}{{n}}{{/each}};{{/each}}"#,
        data,
    );
    assert_eq!(out, "a=2;b=13;");
}

#[test]
fn list_helpers_behave() {
    let data = json!({"list": ["x", 2, true], "obj": {"b": 1, "a": 2}, "empty": []});
    assert_eq!(
        with_data(r#"{{join d.list ", "}}|{{join d.list}}"#, data.clone()),
        "x, 2, true|x,2,true"
    );
    assert_eq!(
        with_data(r#"{{join (keys d.obj) "+"}}"#, data.clone()),
        "a+b"
    );
    assert_eq!(
        with_data(
            "{{first d.list}} {{last d.list}} [{{first d.empty}}]",
            data.clone()
        ),
        "x true []"
    );
    assert_eq!(with_data("{{len d.list}}", data), "3");
    assert_eq!(
        with_data(
            r#"{{join (seq 3) ","}} {{join (seq 2 4) ","}}"#,
            json!(null)
        ),
        "0,1,2 2,3"
    );
}

#[test]
fn dig_and_default_tolerate_missing_fields() {
    let data =
        json!({"metadata": {"annotations": {"haproxy.org/timeout": "5s"}}, "list": [{"a": 1}]});
    assert_eq!(
        with_data(
            r#"{{dig d "metadata" "annotations" "haproxy.org/timeout"}}"#,
            data.clone()
        ),
        "5s"
    );
    assert_eq!(
        with_data(r#"[{{dig d "metadata" "labels" "x"}}]"#, data.clone()),
        "[]"
    );
    assert_eq!(with_data(r#"{{dig d "list" 0 "a"}}"#, data.clone()), "1");
    assert_eq!(
        with_data(r#"{{default d.metadata.nope "30s"}}"#, data.clone()),
        "30s"
    );
    assert_eq!(
        with_data(r#"{{fallback d.nope d.also_nope "x"}}"#, data.clone()),
        "x"
    );
    assert_eq!(
        with_data(
            r#"{{default (dig d "metadata" "annotations" "haproxy.org/timeout") "30s"}}"#,
            data
        ),
        "5s"
    );
}

#[test]
fn string_helpers_behave() {
    let data = json!("  Web.Example.COM  ");
    assert_eq!(
        with_data("{{lower (trim d)}}|{{upper (trim d)}}", data.clone()),
        "web.example.com|WEB.EXAMPLE.COM"
    );
    assert_eq!(
        with_data(r#"{{replace (trim d) "." "_"}}"#, data.clone()),
        "Web_Example_COM"
    );
    assert_eq!(
        with_data(
            r#"{{contains d "Example"}} {{starts_with (trim d) "Web"}} {{ends_with d "x"}}"#,
            data
        ),
        "true true false"
    );
    assert_eq!(
        with_data(
            r#"{{contains d "b"}} {{contains d "z"}}"#,
            json!(["a", "b"])
        ),
        "true false"
    );
    assert_eq!(
        with_data(r#"{{join (split d "/") "|"}}"#, json!("a/b/c")),
        "a|b|c"
    );
    assert_eq!(
        with_data(r#"{{concat "be_" d "_" 80}}"#, json!("web")),
        "be_web_80"
    );
}

#[test]
fn regex_helpers_match_and_replace() {
    let data = json!("/api/v1/users");
    assert_eq!(
        with_data(
            r#"{{regex_match d "^/api/v[0-9]+"}} {{regex_match d "^/web"}}"#,
            data.clone()
        ),
        "true false"
    );
    assert_eq!(
        with_data(r#"{{regex_replace d "^/api/(v[0-9]+)/.*" "$1"}}"#, data),
        "v1"
    );
    let err = TemplateSet::compile(input(r#"{{regex_match "x" "("}}"#))
        .unwrap()
        .render(&RenderContext::default());
    assert!(err.unwrap_err().message().contains("pattern '('"));
}

#[test]
fn is_regex_tells_a_usable_pattern_and_regex_escape_quotes_a_literal() {
    assert_eq!(
        with_data(
            r#"{{is_regex "/something(/|$)(.*)"}} {{is_regex "/a(b"}} {{is_regex "(?=x)"}} {{is_regex d}}"#,
            json!("a{1000}{1000}")
        ),
        "true false false false",
        "unbalanced, look-around and oversized patterns are not regexes a template passes on"
    );
    assert_eq!(
        with_data("{{regex_escape d}}", json!("shop.example")),
        r"shop\.example"
    );
}

#[test]
fn sanitize_makes_a_safe_haproxy_identifier() {
    let out = with_data("{{sanitize d}}", json!("shop/web svc#1"));
    assert!(
        out.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c)),
        "{out}"
    );
    assert!(out.starts_with("shop") && out.ends_with('1'), "{out}");
}

#[test]
fn encodings_round_trip() {
    assert_eq!(
        with_data("{{b64decode d}}", json!("LS0tLS1CRUdJTg==")),
        "-----BEGIN"
    );
    assert_eq!(
        with_data("{{b64decode (b64encode d)}}", json!("a<b>&c")),
        "a<b>&c"
    );
    assert_eq!(
        with_data("{{to_json d}}", json!({"a": [1, "x"]})),
        r#"{"a":[1,"x"]}"#
    );
    assert_eq!(with_data("{{add (to_int d) 1}}", json!("41")), "42");
    let err = TemplateSet::compile(input("{{b64decode \"%%%\"}}"))
        .unwrap()
        .render(&RenderContext::default());
    assert!(err.unwrap_err().message().contains("base64"));
}

#[test]
fn indent_prefixes_every_non_empty_line() {
    assert_eq!(
        with_data("{{indent 2 d}}", json!("a\n\nb\n")),
        "  a\n\n  b\n"
    );
}

#[test]
fn arithmetic_keeps_integers_whole_and_refuses_division_by_zero() {
    let out = with_data(
        "{{add 2 3}} {{sub 2 3}} {{mul 4 5}} {{div 7 2}} {{mod 7 2}} {{div 1.0 4}} {{mul 0.5 4}}",
        json!(null),
    );
    assert_eq!(out, "5 -1 20 3 1 0.25 2");
    let err = TemplateSet::compile(input("{{div 1 0}}"))
        .unwrap()
        .render(&RenderContext::default())
        .unwrap_err();
    assert!(err.message().contains("division by zero"), "{err}");
}

#[test]
fn builtin_comparisons_are_available() {
    let out = with_data(
        "{{#if (and (eq d 80) (ne d 81) (gt d 1) (lt d 100) (not false) (or false true))}}yes{{/if}}",
        json!(80.0),
    );
    assert_eq!(out, "yes");
}

#[test]
fn helper_misuse_names_the_helper_and_argument() {
    let err = render_text("{{lower undefined_thing}}").unwrap_err();
    assert!(err.message().contains("lower"), "{err}");
    assert!(err.message().contains("undefined_thing"), "{err}");
}

#[test]
fn a_second_render_sees_a_changed_store_and_a_changed_extra_context() {
    let set = TemplateSet::compile(input(
        "{{#each (resources \"svc\")}}{{metadata.name}} {{/each}}{{greeting}}",
    ))
    .unwrap();
    let (_, store) = slice_and_service_stores();
    store.apply(json!({"metadata": {"name": "a"}})).unwrap();
    let context = |extra: Value| {
        let mut stores = StoresSnapshot::new();
        stores.insert(store.snapshot());
        RenderContext::new(stores, PathResolver::default()).with_extra_context(extra)
    };
    assert_eq!(
        set.render(&context(json!({"greeting": "hi"})))
            .unwrap()
            .haproxy_cfg,
        "a hi"
    );
    store.apply(json!({"metadata": {"name": "b"}})).unwrap();
    assert_eq!(
        set.render(&context(json!({"greeting": "hi"})))
            .unwrap()
            .haproxy_cfg,
        "a b hi"
    );
    assert_eq!(
        set.render(&context(json!({"greeting": "bye"})))
            .unwrap()
            .haproxy_cfg,
        "a b bye"
    );
    let mut without = StoresSnapshot::new();
    without.insert(Arc::new(
        StoreSnapshot::from_objects("svc", vec!["metadata.name".into()], vec![]).unwrap(),
    ));
    let empty = RenderContext::new(without, PathResolver::default())
        .with_extra_context(json!({"greeting": "bye"}));
    assert_eq!(set.render(&empty).unwrap().haproxy_cfg, "bye");
}

#[test]
fn server_slots_keep_an_endpoint_in_its_slot_across_renders() {
    let set = TemplateSet::compile(input(
        "{{server_slots \"eps\" \"default\" \"web\" \"http\" slots=3 params=\"check\"}}",
    ))
    .unwrap();
    let (store, _) = slice_and_service_stores();
    let slice = web_slice;
    let render = || {
        let mut stores = StoresSnapshot::new();
        stores.insert(store.snapshot());
        set.render(&RenderContext::new(stores, PathResolver::default()))
            .unwrap()
            .haproxy_cfg
    };
    store.apply(slice(&["10.0.0.2", "10.0.0.3"])).unwrap();
    assert_eq!(
        render(),
        "  server SRV_1 10.0.0.2:8080 check\n  server SRV_2 10.0.0.3:8080 check\n  server SRV_3 127.0.0.1:1 disabled check\n"
    );
    // 10.0.0.2 leaves, 10.0.0.1 arrives: 10.0.0.3 stays in slot 2 although it no longer sorts second.
    store.apply(slice(&["10.0.0.1", "10.0.0.3"])).unwrap();
    assert_eq!(
        render(),
        "  server SRV_1 10.0.0.1:8080 check\n  server SRV_2 10.0.0.3:8080 check\n  server SRV_3 127.0.0.1:1 disabled check\n"
    );
    store.apply(slice(&["10.0.0.3", "10.0.0.4"])).unwrap();
    assert!(render().contains("server SRV_2 10.0.0.3:8080"));
}

#[test]
fn resources_mentioning_a_word_iterate_only_the_objects_whose_text_holds_it() {
    let set = TemplateSet::compile(input(
        "{{#resources \"svc\" mentioning=\"example.com/flag example.com/other\" as |o|}}{{o.metadata.name}}@{{@index}}{{#if @last}}.{{/if}} {{/resources}}|{{#resources \"svc\" mentioning=\"nowhere\"}}x{{else}}none{{/resources}}|{{len (resources \"svc\" mentioning=\"example.com/other\")}}",
    ))
    .unwrap();
    let (_, store) = slice_and_service_stores();
    for (name, annotations) in [
        ("a", json!({"example.com/flag": "1"})),
        ("b", json!({})),
        ("c", json!({"example.com/other": "yes"})),
    ] {
        store
            .apply(json!({"metadata": {"name": name, "annotations": annotations}}))
            .unwrap();
    }
    let mut stores = StoresSnapshot::new();
    stores.insert(store.snapshot());
    let out = set
        .render(&RenderContext::new(stores, PathResolver::default()))
        .unwrap()
        .haproxy_cfg;
    assert_eq!(out, "a@0 c@1. |none|1");
}

#[test]
fn an_updated_object_is_seen_by_the_next_render_when_the_store_keeps_its_shape() {
    let set = TemplateSet::compile(input(
        "{{#each (resources \"svc\")}}{{metadata.name}}={{spec.port}} {{/each}}",
    ))
    .unwrap();
    let (_, store) = slice_and_service_stores();
    for name in ["a", "b", "c"] {
        store
            .apply(json!({"metadata": {"name": name}, "spec": {"port": 1}}))
            .unwrap();
    }
    let render = || {
        let mut stores = StoresSnapshot::new();
        stores.insert(store.snapshot());
        set.render(&RenderContext::new(stores, PathResolver::default()))
            .unwrap()
            .haproxy_cfg
    };
    assert_eq!(render(), "a=1 b=1 c=1 ");
    store
        .apply(json!({"metadata": {"name": "b"}, "spec": {"port": 2}}))
        .unwrap();
    assert_eq!(render(), "a=1 b=2 c=1 ");
    store.delete(&json!({"metadata": {"name": "a"}}));
    assert_eq!(render(), "b=2 c=1 ");
}

// ---------------------------------------------------------------- template memos

/// A store of EndpointSlices for service `web` and one of Services, as `server_slots` and
/// the memo tests use them.
fn slice_and_service_stores() -> (
    crate::pure::store::ResourceStore,
    crate::pure::store::ResourceStore,
) {
    let slices = crate::pure::store::ResourceStore::new(
        "eps",
        vec![
            "metadata.namespace".into(),
            "metadata.labels.kubernetes\\.io/service-name".into(),
        ],
        vec![],
    )
    .unwrap();
    let services =
        crate::pure::store::ResourceStore::new("svc", vec!["metadata.name".into()], vec![])
            .unwrap();
    (slices, services)
}

fn web_slice(addresses: &[&str]) -> serde_json::Value {
    json!({"metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
           "ports": [{"name": "http", "port": 8080}],
           "endpoints": addresses.iter().map(|a| json!({"addresses": [a]})).collect::<Vec<_>>()})
}

fn named_service(name: &str, port: u16) -> serde_json::Value {
    json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"port": port}})
}

/// haproxy.cfg reads only Services; the map `slots.map` reads only EndpointSlices (through
/// `server_slots`) and registers a file.
fn memo_test_set() -> TemplateSet {
    let mut templates =
        input("{{#resources \"svc\" as |s|}}{{s.metadata.name}}:{{s.spec.port}} {{/resources}}");
    templates.maps.insert(
        "slots.map".into(),
        "{{register_file \"file\" \"note\" \"slots\"}}\n{{server_slots \"eps\" \"default\" \"web\" \"http\" slots=3}}".into(),
    );
    TemplateSet::compile(templates).unwrap()
}

fn render_stores(
    set: &TemplateSet,
    stores: &[&crate::pure::store::ResourceStore],
    extra: serde_json::Value,
) -> RenderedConfig {
    let mut snapshot = StoresSnapshot::new();
    for store in stores {
        snapshot.insert(store.snapshot());
    }
    set.render(&RenderContext::new(snapshot, PathResolver::default()).with_extra_context(extra))
        .unwrap()
}

#[test]
fn a_template_whose_stores_did_not_change_is_reused_and_one_whose_store_changed_renders() {
    let set = memo_test_set();
    let (slices, services) = slice_and_service_stores();
    slices.apply(web_slice(&["10.0.0.1"])).unwrap();
    services.apply(named_service("web", 80)).unwrap();
    let first = render_stores(&set, &[&slices, &services], json!({}));
    assert!(set.reused_in_last_render().is_empty());

    services.apply(named_service("api", 81)).unwrap();
    let second = render_stores(&set, &[&slices, &services], json!({}));
    assert_eq!(set.reused_in_last_render(), ["maps/slots.map"]);
    assert_eq!(second.haproxy_cfg, "api:81 web:80 ");
    assert_eq!(
        second.aux_files, first.aux_files,
        "the map and its file are kept"
    );

    slices.apply(web_slice(&["10.0.0.2"])).unwrap();
    let third = render_stores(&set, &[&slices, &services], json!({}));
    assert_eq!(set.reused_in_last_render(), [HAPROXY_CFG]);
    assert!(
        third
            .aux_files
            .values()
            .any(|f| f.content.contains("10.0.0.2:8080")),
        "{:?}",
        third.aux_files
    );
}

#[test]
fn a_changed_context_renders_every_template_again() {
    let set = memo_test_set();
    let (slices, services) = slice_and_service_stores();
    slices.apply(web_slice(&["10.0.0.1"])).unwrap();
    render_stores(&set, &[&slices, &services], json!({"a": 1}));
    render_stores(&set, &[&slices, &services], json!({"a": 1}));
    assert_eq!(set.reused_in_last_render().len(), 2);
    render_stores(&set, &[&slices, &services], json!({"a": 2}));
    assert!(set.reused_in_last_render().is_empty());
}

#[test]
fn slots_of_a_reused_template_are_remembered_for_the_next_render() {
    let set = memo_test_set();
    let (slices, services) = slice_and_service_stores();
    slices.apply(web_slice(&["10.0.0.2", "10.0.0.3"])).unwrap();
    render_stores(&set, &[&slices, &services], json!({}));
    // Only Services change: the map is reused, and its slot assignment must survive.
    services.apply(named_service("web", 80)).unwrap();
    render_stores(&set, &[&slices, &services], json!({}));
    assert_eq!(set.reused_in_last_render(), ["maps/slots.map"]);
    // 10.0.0.2 leaves and 10.0.0.4 arrives: 10.0.0.3 keeps slot 2 only if the reused
    // render passed the assignment on (a fresh assignment puts it first).
    slices.apply(web_slice(&["10.0.0.3", "10.0.0.4"])).unwrap();
    let out = render_stores(&set, &[&slices, &services], json!({}));
    let map = out.aux(AuxKind::Map, "slots.map").unwrap();
    assert!(
        map.content.contains("server SRV_2 10.0.0.3:8080"),
        "{}",
        map.content
    );
}

#[test]
fn a_failed_render_keeps_the_memos_of_the_last_successful_one() {
    let mut templates = input(
        "{{#resources \"svc\" as |s|}}{{#if (eq s.spec.port 0)}}{{fail \"port 0\"}}{{/if}}{{/resources}}",
    );
    templates.maps.insert(
        "slots.map".into(),
        "{{server_slots \"eps\" \"default\" \"web\" \"http\" slots=3}}".into(),
    );
    let set = TemplateSet::compile(templates).unwrap();
    let (slices, services) = slice_and_service_stores();
    slices.apply(web_slice(&["10.0.0.1"])).unwrap();
    services.apply(named_service("web", 80)).unwrap();
    let render = |set: &TemplateSet| {
        let mut snapshot = StoresSnapshot::new();
        snapshot.insert(slices.snapshot());
        snapshot.insert(services.snapshot());
        set.render(&RenderContext::new(snapshot, PathResolver::default()))
    };
    render(&set).unwrap();
    services.apply(named_service("bad", 0)).unwrap();
    assert!(render(&set).is_err());
    services.delete_ref(&crate::pure::store::ObjectRef::new("default", "bad"));
    render(&set).unwrap();
    assert_eq!(set.reused_in_last_render(), ["maps/slots.map"]);
}

#[test]
fn memoised_renders_equal_full_renders_through_a_sequence_of_changes() {
    let memoised = memo_test_set();
    let full = memo_test_set().without_memos();
    let (slices, services) = slice_and_service_stores();
    let steps: Vec<Box<dyn Fn()>> = vec![
        Box::new(|| {
            slices.apply(web_slice(&["10.0.0.1", "10.0.0.2"])).unwrap();
        }),
        Box::new(|| {
            services.apply(named_service("web", 80)).unwrap();
        }),
        Box::new(|| {
            services.apply(named_service("api", 81)).unwrap();
        }),
        Box::new(|| {
            slices
                .apply(web_slice(&["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]))
                .unwrap();
        }),
        Box::new(|| {}),
        Box::new(|| {
            services.delete_ref(&crate::pure::store::ObjectRef::new("default", "web"));
        }),
        Box::new(|| {
            slices.apply(web_slice(&["10.0.0.5"])).unwrap();
        }),
    ];
    let mut reused = 0;
    for (n, step) in steps.iter().enumerate() {
        step();
        let a = render_stores(&memoised, &[&slices, &services], json!({}));
        let b = render_stores(&full, &[&slices, &services], json!({}));
        assert_eq!(a, b, "step {n}");
        reused += memoised.reused_in_last_render().len();
        assert!(full.reused_in_last_render().is_empty());
    }
    assert!(
        reused >= 4,
        "the sequence exercises reuse ({reused} reused)"
    );
}

// ---------------------------------------------------------------- served and ignored

fn ingress_object(name: &str, class: &str) -> serde_json::Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"ingressClassName": class}})
}

fn ingress_key(name: &str) -> crate::pure::rendered::ObjectKey {
    crate::pure::rendered::ObjectKey {
        api_version: "networking.k8s.io/v1".into(),
        kind: "Ingress".into(),
        namespace: "default".into(),
        name: name.into(),
    }
}

fn ingress_store() -> crate::pure::store::ResourceStore {
    crate::pure::store::ResourceStore::new(
        "ing",
        vec!["metadata.namespace".into(), "metadata.name".into()],
        vec![],
    )
    .unwrap()
}

/// haproxy.cfg reads only Services; the map records an outcome for every Ingress.
const OUTCOME_MAP: &str = "{{#resources \"ing\" as |i|}}{{#if (eq i.spec.ingressClassName \"haptor\")}}{{served i}}{{i.metadata.name}}\n{{else}}{{ignored i (concat \"ingressClassName '\" i.spec.ingressClassName \"' is not haptor's\")}}{{/if}}{{/resources}}";

fn outcome_test_set() -> TemplateSet {
    let mut templates =
        input("{{#resources \"svc\" as |s|}}{{s.metadata.name}}:{{s.spec.port}} {{/resources}}");
    templates
        .maps
        .insert("routes.map".into(), OUTCOME_MAP.into());
    TemplateSet::compile(templates).unwrap()
}

#[test]
fn served_and_ignored_record_an_outcome_per_object_and_render_nothing() {
    let set = outcome_test_set();
    let (_, services) = slice_and_service_stores();
    let ingresses = ingress_store();
    ingresses.apply(ingress_object("a", "haptor")).unwrap();
    ingresses.apply(ingress_object("b", "nginx")).unwrap();
    let out = render_stores(&set, &[&ingresses, &services], json!({}));
    assert_eq!(out.aux(AuxKind::Map, "routes.map").unwrap().content, "a\n");
    assert_eq!(
        out.outcomes
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>(),
        [
            (ingress_key("a"), crate::pure::rendered::Outcome::Served),
            (
                ingress_key("b"),
                crate::pure::rendered::Outcome::ignored("ingressClassName 'nginx' is not haptor's")
            ),
        ]
    );
}

#[test]
fn served_wins_over_ignored_for_one_object_within_and_across_templates_and_keeps_the_skipped_reasons()
 {
    let mut templates = input(
        "{{#resources \"ing\" as |i|}}{{ignored i \"rule 1 skipped\"}}{{served i}}{{ignored i \"rule 3 skipped\"}}{{/resources}}",
    );
    templates.maps.insert(
        "later.map".into(),
        "{{#resources \"ing\" as |i|}}{{ignored i \"later\"}}{{/resources}}".into(),
    );
    let set = TemplateSet::compile(templates).unwrap();
    let ingresses = ingress_store();
    ingresses.apply(ingress_object("a", "haptor")).unwrap();
    let out = render_stores(&set, &[&ingresses], json!({}));
    assert_eq!(out.haproxy_cfg, "");
    assert_eq!(
        out.outcomes.get(&ingress_key("a")),
        Some(&crate::pure::rendered::Outcome::PartlyServed(vec![
            "rule 1 skipped".into(),
            "rule 3 skipped".into(),
            "later".into()
        ]))
    );
}

#[test]
fn ignored_needs_a_reason_and_both_need_a_kubernetes_object() {
    let set = |template: &str| {
        let set = TemplateSet::compile(input(template)).unwrap();
        let ingresses = ingress_store();
        ingresses.apply(ingress_object("a", "haptor")).unwrap();
        let mut snapshot = StoresSnapshot::new();
        snapshot.insert(ingresses.snapshot());
        set.render(&RenderContext::new(snapshot, PathResolver::default()))
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let empty = set("{{#resources \"ing\" as |i|}}{{ignored i \"\"}}{{/resources}}").unwrap_err();
    assert!(empty.contains("reason"), "{empty}");
    let missing = set("{{#resources \"ing\" as |i|}}{{ignored i}}{{/resources}}").unwrap_err();
    assert!(missing.contains("ignored needs at least 2"), "{missing}");
    let not_object =
        set("{{#resources \"ing\" as |i|}}{{served i.metadata}}{{/resources}}").unwrap_err();
    assert!(
        not_object.contains("served: argument 1 is not a Kubernetes object with apiVersion"),
        "{not_object}"
    );
}

#[test]
fn a_reused_template_replays_its_outcomes_and_a_rendered_one_replaces_them() {
    let memoised = outcome_test_set();
    let full = outcome_test_set().without_memos();
    let (_, services) = slice_and_service_stores();
    let ingresses = ingress_store();
    ingresses.apply(ingress_object("a", "haptor")).unwrap();
    ingresses.apply(ingress_object("b", "nginx")).unwrap();
    let first = render_stores(&memoised, &[&ingresses, &services], json!({}));
    assert_eq!(first.outcomes.len(), 2);

    // Only Services change: routes.map is reused, and its outcomes must be kept.
    services.apply(named_service("web", 80)).unwrap();
    let second = render_stores(&memoised, &[&ingresses, &services], json!({}));
    assert_eq!(memoised.reused_in_last_render(), ["maps/routes.map"]);
    assert_eq!(second.outcomes, first.outcomes);
    assert_eq!(
        second,
        render_stores(&full, &[&ingresses, &services], json!({}))
    );

    // The Ingress moves to another class: the map renders again, with the new outcome.
    ingresses.apply(ingress_object("a", "other")).unwrap();
    let third = render_stores(&memoised, &[&ingresses, &services], json!({}));
    assert_eq!(memoised.reused_in_last_render(), [HAPROXY_CFG]);
    assert_eq!(
        third.outcomes.get(&ingress_key("a")),
        Some(&crate::pure::rendered::Outcome::ignored(
            "ingressClassName 'other' is not haptor's"
        ))
    );
    assert_eq!(
        third,
        render_stores(&full, &[&ingresses, &services], json!({}))
    );
}

#[test]
fn a_trial_render_leaves_the_memos_and_server_slots_the_next_real_render_starts_from() {
    let set = memo_test_set();
    let (slices, services) = slice_and_service_stores();
    slices.apply(web_slice(&["10.0.0.1"])).unwrap();
    services.apply(named_service("web", 80)).unwrap();
    let first = render_stores(&set, &[&slices, &services], json!({}));

    // What if the slice moved? (The admission webhook's render.)
    let mut overlay = StoresSnapshot::new();
    overlay.insert(
        slices
            .snapshot_with_applied(web_slice(&["10.0.0.9", "10.0.0.8"]))
            .unwrap(),
    );
    overlay.insert(services.snapshot());
    let trial = set
        .render_trial(
            &RenderContext::new(overlay, PathResolver::default()).with_extra_context(json!({})),
        )
        .unwrap();
    assert!(
        trial
            .aux_files
            .values()
            .any(|f| f.content.contains("10.0.0.9"))
    );

    // The live stores did not change: the next real render reuses every memo of the first.
    let next = render_stores(&set, &[&slices, &services], json!({}));
    assert_eq!(
        set.reused_in_last_render().len(),
        2,
        "{:?}",
        set.reused_in_last_render()
    );
    assert_eq!(next, first);
}

#[test]
fn version_at_least_compares_dotted_versions_number_by_number() {
    for (version, minimum, expected) in [
        ("3.2", "3.0", "yes"),
        ("3.0", "3.0", "yes"),
        ("2.6", "3.0", "no"),
        ("3.10", "3.9", "yes"),
        ("2.6.12", "2.6", "yes"),
        ("3", "3.0", "yes"),
        ("3.0", "3.0.1", "no"),
    ] {
        let template = format!(
            "{{{{#if (version_at_least \"{version}\" \"{minimum}\")}}}}yes{{{{else}}}}no{{{{/if}}}}"
        );
        assert_eq!(render_ok(&template), expected, "{version} >= {minimum}");
    }
    let err = render_text("{{version_at_least \"3.x\" \"3.0\"}}").unwrap_err();
    assert!(
        err.to_string()
            .contains("version_at_least: argument 1 is '3.x', not a dotted version like 3.0"),
        "{err}"
    );
}

// ---------------------------------------------------------------- Gateway API helpers

#[test]
fn hostname_intersection_gives_the_more_specific_pattern_or_null() {
    let cases = [
        (
            r#"(hostname_intersection "*.example.com" "foo.example.com")"#,
            "foo.example.com",
        ),
        (
            r#"(hostname_intersection "foo.bar.example.com" "*.example.com")"#,
            "foo.bar.example.com",
        ),
        (
            r#"(hostname_intersection "*.example.com" "example.com")"#,
            "null",
        ),
        (
            r#"(hostname_intersection "*.example.com" "*.foo.example.com")"#,
            "*.foo.example.com",
        ),
        (
            r#"(hostname_intersection null "Web.Example")"#,
            "web.example",
        ),
        (r#"(hostname_intersection "" null)"#, "*"),
        (r#"(hostname_intersection "a.example" "b.example")"#, "null"),
    ];
    for (expression, wanted) in cases {
        let text = render_ok(&format!(
            "{{{{#with {expression} as |h|}}}}{{{{h}}}}{{{{else}}}}null{{{{/with}}}}"
        ));
        assert_eq!(text, wanted, "{expression}");
    }
}

#[test]
fn sort_lines_orders_by_key_drops_repeats_and_keeps_the_first_of_each_head() {
    let text = render_ok(
        "{{#sort_lines separator=\" => \" unique_by=\" \"}}\nb => x 2\na => y 1\nc => x 3\n{{/sort_lines}}",
    );
    assert_eq!(text, "y 1\nx 2\n");
    let text =
        render_ok("{{#sort_lines unique=true}}\n2\tsame\n1\tfirst\n2\tsame\n{{/sort_lines}}");
    assert_eq!(text, "first\nsame\n");
}

#[test]
fn sum_nested_filter_and_pluck_compute_over_lists() {
    let text = render_ok(
        r#"{{sum (resources "services") "spec.ports.0.port"}} {{sum (resources "services") "missing" default=2 first=2}} {{len (nested (resources "services") "spec.ports")}} {{join (pluck (filter (resources "services") "metadata.name" "web") "metadata.namespace") ","}}"#,
    );
    assert_eq!(text, "11160 4 3 blog,shop");
}

/// A render over one Gateway, with selectors in its spec for `selector_matches`.
fn render_over_a_gateway(template: &str) -> Result<RenderedConfig, TemplateError> {
    let snapshot = StoreSnapshot::from_objects(
        "gateways",
        vec!["metadata.namespace".into(), "metadata.name".into()],
        vec![json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"namespace": "infra", "name": "gw", "generation": 4, "labels": {"team": "web"}},
            "spec": {
                "same": {"matchLabels": {"team": "web"}},
                "other": {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["web"]}]},
                "exists": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}
            }
        })],
    )
    .unwrap();
    let mut stores = StoresSnapshot::new();
    stores.insert(Arc::new(snapshot));
    TemplateSet::compile(input(template))?
        .render(&RenderContext::new(stores, PathResolver::default()))
}

#[test]
fn selector_matches_reads_match_labels_and_expressions() {
    let rendered = render_over_a_gateway(
        r#"{{#each (resources "gateways") as |g|}}{{selector_matches g.spec.same g.metadata.labels}} {{selector_matches g.spec.other g.metadata.labels}} {{selector_matches g.spec.exists g.metadata.labels}} {{selector_matches null g.metadata.labels}}{{/each}}"#,
    )
    .expect("renders");
    assert_eq!(rendered.haproxy_cfg, "true false true true");
}

#[test]
fn with_rendered_hands_a_snippets_text_to_its_block_and_its_else_when_empty() {
    let mut set = input(
        r#"{{#with_rendered "verdict" word="yes" as |v|}}[{{v}} {{word}}]{{/with_rendered}}{{#with_rendered "empty" as |v|}}{{v}}{{else}}none{{/with_rendered}}"#,
    );
    set.snippets
        .insert("verdict".into(), "\n  said {{word}}  \n".into());
    set.snippets.insert("empty".into(), "  \n".into());
    let compiled = TemplateSet::compile(set).expect("compiles");
    let text = compiled
        .render(&RenderContext::new(services(), PathResolver::default()))
        .expect("renders")
        .haproxy_cfg;
    assert_eq!(text, "[said yes yes]none");
}

#[test]
fn condition_records_status_by_scope_and_renders_nothing() {
    let rendered = render_over_a_gateway(
        r#"{{#each (resources "gateways") as |g|}}{{condition g "Programmed" "True" "Programmed" "ok" listener="http"}}{{listener_kinds g "http" "HTTPRoute"}}{{/each}}"#,
    )
    .expect("renders");
    assert_eq!(rendered.haproxy_cfg, "");
    let statuses = crate::pure::gateway_status::statuses(&rendered.status_records);
    let listener = &statuses[0].status["listeners"][0];
    assert_eq!(listener["name"], "http");
    assert_eq!(listener["conditions"][0]["observedGeneration"], 4);
    assert_eq!(listener["supportedKinds"][0]["kind"], "HTTPRoute");
    let failed = render_over_a_gateway(
        r#"{{#each (resources "gateways") as |g|}}{{condition g "Accepted" "Maybe" "Accepted"}}{{/each}}"#,
    );
    assert!(failed.is_err_and(|e| e.to_string().contains("not True, False or Unknown")));
}

/// haproxy.cfg writes a backend per Service with `server_slots` lines straight into its
/// output, with text around them that reads the Services.
fn spliced_test_set(around: &str) -> TemplateSet {
    TemplateSet::compile(input(&around.replace(
        "SLOTS",
        "{{server_slots \"eps\" \"default\" s.metadata.name \"http\" slots=\"dynamic\"}}",
    )))
    .unwrap()
}

fn slice_of(service: &str, name: &str, addresses: &[&str]) -> serde_json::Value {
    json!({"metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": service}},
           "ports": [{"name": "http", "port": 8080}],
           "endpoints": addresses.iter().map(|a| json!({"addresses": [a]})).collect::<Vec<_>>()})
}

#[test]
fn an_endpoint_change_replaces_only_the_server_lines_and_equals_a_full_render() {
    let template = "{{#resources \"svc\" as |s|}}backend {{s.metadata.name}}\n  balance roundrobin\nSLOTS\n{{/resources}}";
    let spliced = spliced_test_set(template);
    let full = spliced_test_set(template).without_memos();
    let (slices, services) = slice_and_service_stores();
    services.apply(named_service("api", 80)).unwrap();
    services.apply(named_service("web", 80)).unwrap();
    slices
        .apply(slice_of("web", "web-1", &["10.0.0.1"]))
        .unwrap();
    slices
        .apply(slice_of("api", "api-1", &["10.0.1.1"]))
        .unwrap();
    let steps: Vec<Box<dyn Fn()>> = vec![
        Box::new(|| {}),
        Box::new(|| {
            slices
                .apply(slice_of("web", "web-1", &["10.0.0.1", "10.0.0.2"]))
                .unwrap();
        }),
        Box::new(|| {
            slices
                .apply(slice_of("web", "web-2", &["10.0.0.9"]))
                .unwrap();
        }),
        Box::new(|| {
            slices.apply(slice_of("api", "api-1", &[])).unwrap();
        }),
        Box::new(|| {
            slices
                .apply(slice_of(
                    "web",
                    "web-1",
                    &["10.0.0.2", "10.0.0.3", "10.0.0.4"],
                ))
                .unwrap();
        }),
    ];
    for (index, step) in steps.iter().enumerate() {
        step();
        let a = render_stores(&spliced, &[&slices, &services], json!({}));
        let b = render_stores(&full, &[&slices, &services], json!({}));
        assert_eq!(a.haproxy_cfg, b.haproxy_cfg, "step {index}");
        if index > 0 {
            assert_eq!(
                spliced.spliced_in_last_render(),
                [HAPROXY_CFG],
                "step {index}: only EndpointSlices changed"
            );
        }
    }
    // A Service change reads a store other helpers read: a whole render.
    services.apply(named_service("zzz", 80)).unwrap();
    let a = render_stores(&spliced, &[&slices, &services], json!({}));
    assert!(spliced.spliced_in_last_render().is_empty());
    assert!(
        a.haproxy_cfg
            .ends_with("backend zzz\n  balance roundrobin\n\n"),
        "{}",
        a.haproxy_cfg
    );
}

#[test]
fn endpoint_changes_across_hundreds_of_backends_splice_to_what_a_full_render_writes() {
    // Each Service's slots twice (a backend and its copy: one key in two calls), in more
    // backends than one chunk of the splice's tables holds.
    let template = "{{#resources \"svc\" as |s|}}backend {{s.metadata.name}}\nSLOTS\nbackend copy-{{s.metadata.name}}\nSLOTS\n{{/resources}}";
    let spliced = spliced_test_set(template);
    let full = spliced_test_set(template).without_memos();
    let (slices, services) = slice_and_service_stores();
    let name = |n: usize| format!("app{n:03}");
    for n in 0..300 {
        services.apply(named_service(&name(n), 80)).unwrap();
        let address = format!("10.1.{}.{}", n / 250, n % 250 + 1);
        slices
            .apply(slice_of(&name(n), &format!("{}-1", name(n)), &[&address]))
            .unwrap();
    }
    let steps: Vec<Vec<(usize, Vec<&str>)>> = vec![
        vec![],
        vec![(5, vec!["10.9.0.1", "10.9.0.2"])],
        vec![(150, vec![]), (299, vec!["10.9.0.3"])],
        vec![
            (0, vec!["10.9.0.4"]),
            (5, vec!["10.9.0.2"]),
            (200, vec!["10.9.0.5", "10.9.0.6", "10.9.0.7"]),
        ],
        vec![(150, vec!["10.9.0.8"])],
    ];
    for (index, changes) in steps.iter().enumerate() {
        for (n, addresses) in changes {
            slices
                .apply(slice_of(&name(*n), &format!("{}-1", name(*n)), addresses))
                .unwrap();
        }
        let a = render_stores(&spliced, &[&slices, &services], json!({}));
        let b = render_stores(&full, &[&slices, &services], json!({}));
        assert_eq!(a.haproxy_cfg, b.haproxy_cfg, "step {index}");
        if index > 0 {
            assert_eq!(
                spliced.spliced_in_last_render(),
                [HAPROXY_CFG],
                "step {index}"
            );
        }
    }
    // The slots kept their endpoints through the splices: one more endpoint for app005
    // goes after the one it had, in a full render too.
    slices
        .apply(slice_of(&name(5), "app005-1", &["10.9.0.2", "10.9.0.9"]))
        .unwrap();
    let a = render_stores(&spliced, &[&slices, &services], json!({}));
    assert_eq!(
        a.haproxy_cfg,
        render_stores(&full, &[&slices, &services], json!({})).haproxy_cfg
    );
}

#[test]
fn server_lines_written_into_a_capture_make_the_template_render_whole() {
    let template = "{{#resources \"svc\" as |s|}}{{#sort_lines}}backend {{s.metadata.name}}\nSLOTS{{/sort_lines}}{{/resources}}";
    let set = spliced_test_set(template);
    let full = spliced_test_set(template).without_memos();
    let (slices, services) = slice_and_service_stores();
    services.apply(named_service("web", 80)).unwrap();
    slices
        .apply(slice_of("web", "web-1", &["10.0.0.1"]))
        .unwrap();
    render_stores(&set, &[&slices, &services], json!({}));
    slices
        .apply(slice_of("web", "web-1", &["10.0.0.1", "10.0.0.2"]))
        .unwrap();
    let a = render_stores(&set, &[&slices, &services], json!({}));
    assert!(set.spliced_in_last_render().is_empty());
    assert_eq!(
        a.haproxy_cfg,
        render_stores(&full, &[&slices, &services], json!({})).haproxy_cfg
    );
    assert!(a.haproxy_cfg.contains("10.0.0.2:8080"), "{}", a.haproxy_cfg);
}

fn kube_service(name: &str, port: u16) -> serde_json::Value {
    let mut service = named_service(name, port);
    service["apiVersion"] = json!("v1");
    service["kind"] = json!("Service");
    service
}

/// haproxy.cfg loops over the Services at its top level (each iteration writes a line,
/// registers a file and records an outcome) and again inside a `with` block, and reads
/// the EndpointSlices once; `@index` is read when `index` is set.
fn fragment_test_set(index: bool) -> TemplateSet {
    let at = if index { "{{@index}}:" } else { "" };
    TemplateSet::compile(input(&format!(
        "{{{{#resources \"svc\" as |s|}}}}{at}{{{{s.metadata.name}}}}={{{{s.spec.port}}}} \
         {{{{register_file \"file\" (concat s.metadata.name \".txt\") s.metadata.name}}}}\
         {{{{served s}}}}\n{{{{/resources}}}}\
         {{{{#with \"x\" as |x|}}}}{{{{#resources \"svc\" as |s|}}}}{{{{x}}}}{{{{s.metadata.name}}}} {{{{/resources}}}}{{{{/with}}}}\n\
         {{{{#each (resources \"eps\")}}}}eps{{{{/each}}}}\n"
    )))
    .unwrap()
}

#[test]
fn iterations_over_unchanged_objects_are_written_from_their_fragments_and_equal_a_full_render() {
    for index in [false, true] {
        let memoised = fragment_test_set(index);
        let full = fragment_test_set(index).without_memos();
        let (slices, services) = slice_and_service_stores();
        for (name, port) in [("api", 81), ("web", 80), ("db", 5432)] {
            services.apply(kube_service(name, port)).unwrap();
        }
        let both = |step: &str| {
            let a = render_stores(&memoised, &[&slices, &services], json!({}));
            let b = render_stores(&full, &[&slices, &services], json!({}));
            assert_eq!(a, b, "index {index}, {step}");
            memoised.fragments_reused_in_last_render()
        };
        assert_eq!(both("first render"), 0);
        services.apply(kube_service("web", 8080)).unwrap();
        assert_eq!(
            both("one Service changed"),
            2,
            "the two unchanged Services' top-level iterations (the loop in `with` renders)"
        );
        slices.apply(web_slice(&["10.0.0.1"])).unwrap();
        assert_eq!(
            both("another store the template reads changed"),
            3,
            "no iteration read the EndpointSlices"
        );
        services.apply(kube_service("cache", 6379)).unwrap();
        // `cache` sorts second: with `@index` read, the indexes after it move and only
        // `api`'s iteration is reused.
        assert_eq!(
            both("a Service added among the others"),
            if index { 1 } else { 3 }
        );
    }
}
