//! Unit tests of `view`.

use super::*;
use crate::pure::haproxy::parse_config;

const CONFIG: &str = r#"
global
crt-base /etc/ssl
defaults
mode http
timeout connect 5s
frontend www
bind :80
bind :443 ssl crt site.pem crt-list /etc/list.txt ca-file ca.pem alpn h2,http/1.1
acl bad src -f /etc/haproxy/blocked.lst
http-request set-header X-Be %[req.hdr(host),lower,map_dom(/etc/haproxy/hosts.map,default)]
http-request deny if { src -f /etc/haproxy/deny.lst }
use_backend api if { path_beg /api }
use_backend %[req.hdr(host),map(/etc/haproxy/be.map)]
use_backend static unless bad
default_backend web
backend web
balance hdr(host) x
default-server inter 2s
server web1 10.0.0.1:8080 weight 10 check maxconn 100
server web2 10.0.0.2:8080 disabled crt client.pem ssl
server sock /var/run/app.sock
server-template srv 1-5 app.svc.local:80 check resolvers dns init-addr none
listen stats
bind "fd@${stats}"
server local 127.0.0.1 check
"#;

fn the_view() -> ConfigView {
    view(&parse_config(CONFIG).expect("test config parses"))
}

#[test]
fn the_bind_summary_reads_frontends_and_listens_and_skips_the_rest() {
    let text = "global\n  maxconn 10\nfrontend www\n  bind :80\n  bind 127.0.0.1:443 ssl crt /x.pem\n\
                backend be\n  server s1 \"unterminated\nlisten stats\n  bind :9000\n";
    // The broken backend line is never parsed: only frontend and listen sections are.
    assert_eq!(
        frontend_binds(text).expect("parses"),
        vec![
            ("www".to_string(), ":80".to_string()),
            ("www".to_string(), "127.0.0.1:443".to_string()),
            ("stats".to_string(), ":9000".to_string()),
        ]
    );
}

#[test]
fn frontends_include_listen_sections_with_their_binds() {
    let view = the_view();
    let names: Vec<(&str, bool)> = view
        .frontends
        .iter()
        .map(|f| (f.name.as_str(), f.is_listen))
        .collect();
    assert_eq!(names, [("www", false), ("stats", true)]);
    let www = &view.frontends[0];
    let addresses: Vec<&str> = www.binds.iter().map(|b| b.address.as_str()).collect();
    assert_eq!(addresses, [":80", ":443"]);
    let tls = &www.binds[1];
    assert!(tls.param("ssl").is_some_and(|p| p.values.is_empty()));
    assert_eq!(tls.param("crt").and_then(Param::value), Some("site.pem"));
    assert_eq!(
        tls.param("alpn").and_then(Param::value),
        Some("h2,http/1.1")
    );
    assert_eq!(view.frontends[1].binds[0].address, "fd@${stats}");
}

#[test]
fn use_backend_rules_keep_their_conditions_in_order() {
    let view = the_view();
    let www = &view.frontends[0];
    assert_eq!(www.default_backend.as_deref(), Some("web"));
    let rules: Vec<(&str, Option<bool>)> = www
        .backend_rules
        .iter()
        .map(|r| (r.backend.as_str(), r.condition.as_ref().map(|c| c.negated)))
        .collect();
    assert_eq!(
        rules,
        [
            ("api", Some(false)),
            ("%[req.hdr(host),map(/etc/haproxy/be.map)]", None),
            ("static", Some(true)),
        ]
    );
    assert_eq!(
        www.backend_rules[0]
            .condition
            .as_ref()
            .map(|c| c.words.clone()),
        Some(vec![
            "{".into(),
            "path_beg".into(),
            "/api".into(),
            "}".into()
        ])
    );
}

#[test]
fn backends_list_balance_servers_and_templates() {
    let view = the_view();
    let web = &view.backends[0];
    assert_eq!(web.name, "web");
    let balance = web.balance.as_ref().expect("balance line");
    assert_eq!(
        (balance.algorithm.as_str(), balance.args.as_slice()),
        ("hdr(host)", &["x".to_owned()][..])
    );
    assert_eq!(web.default_server_params[0].value(), Some("2s"));
    let web1 = &web.servers[0];
    assert_eq!(
        (web1.name.as_str(), web1.endpoint.host.as_str()),
        ("web1", "10.0.0.1")
    );
    assert_eq!(web1.endpoint.port_number(), Some(8080));
    assert_eq!(web1.param("weight").and_then(Param::value), Some("10"));
    assert!(web1.has_flag("check"));
    assert!(!web1.has_flag("disabled"));
    assert!(web.servers[1].has_flag("disabled"));
    assert_eq!(web.servers[2].endpoint.port, None);
    let template = &web.server_templates[0];
    assert_eq!(
        (template.prefix.as_str(), template.count.as_str()),
        ("srv", "1-5")
    );
    assert_eq!(template.endpoint.host, "app.svc.local");
    assert_eq!(template.params.len(), 3);
    assert_eq!(view.backends[1].name, "stats");
    assert!(view.backends[1].is_listen);
}

#[test]
fn map_converters_and_acl_pattern_files_are_referenced() {
    let view = the_view();
    let maps: Vec<(&str, FileKind)> = view
        .map_files
        .iter()
        .map(|f| (f.path.as_str(), f.kind))
        .collect();
    assert_eq!(
        maps,
        [
            ("/etc/haproxy/blocked.lst", FileKind::Patterns),
            ("/etc/haproxy/hosts.map", FileKind::Map),
            ("/etc/haproxy/deny.lst", FileKind::Patterns),
            ("/etc/haproxy/be.map", FileKind::Map),
        ]
    );
    assert_eq!(view.map_files[0].section, "frontend www");
}

#[test]
fn certificates_on_bind_and_server_lines_are_referenced() {
    let view = the_view();
    let certificates: Vec<(&str, FileKind)> = view
        .certificates
        .iter()
        .map(|f| (f.path.as_str(), f.kind))
        .collect();
    assert_eq!(
        certificates,
        [
            ("site.pem", FileKind::Certificate),
            ("/etc/list.txt", FileKind::CertificateList),
            ("ca.pem", FileKind::CaFile),
            ("client.pem", FileKind::Certificate),
        ]
    );
}

#[test]
fn map_actions_and_typed_map_converters_are_found() {
    let found = function_file_arguments("set-map(/a.map)");
    assert_eq!(found, [(FileKind::Map, "/a.map")]);
    let found = function_file_arguments("%[src,map_ip_int(/b.map,0)]");
    assert_eq!(found, [(FileKind::Map, "/b.map")]);
    assert!(function_file_arguments("%[src,mapx(/c)]").is_empty());
    assert!(function_file_arguments("bitmap(/c)").is_empty());
    assert_eq!(
        function_file_arguments("del-acl(/d.lst)"),
        [(FileKind::Patterns, "/d.lst")]
    );
}

#[test]
fn a_word_with_a_multibyte_character_before_a_function_name_is_viewed_without_panicking() {
    // Found by fuzzing (haproxy_schema): the name before `(` was cut one byte after the
    // character ending it, inside `\u{feff}` or `é`.
    let text = "frontend f\n    http-request set-header X %[\u{feff}hdr(Host),host_only]\n    \
                http-request return string \"café(1) née·map(/m.map)\"\n";
    let config = parse_config(text).expect("test config parses");
    let view = view(&config);
    let paths: Vec<&str> = view.map_files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["/m.map"]);
    assert!(function_file_arguments("é(x)").is_empty());
}

#[test]
fn addresses_split_at_the_last_colon_except_sockets() {
    let ipv6 = Endpoint::parse("ipv6@::1:8443");
    assert_eq!(
        (ipv6.host.as_str(), ipv6.port_number()),
        ("ipv6@::1", Some(8443))
    );
    assert_eq!(Endpoint::parse("unix@/run/a:b").port, None);
    assert_eq!(Endpoint::parse("example.com").port, None);
    assert_eq!(Endpoint::parse("h:+1").port.as_deref(), Some("+1"));
}

#[test]
fn the_view_serializes_to_json() {
    let json = serde_json::to_value(the_view()).expect("view serializes");
    assert_eq!(json["backends"][0]["servers"][0]["port"], "8080");
    assert_eq!(json["map_files"][1]["kind"], "map");
}
