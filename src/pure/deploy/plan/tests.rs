//! Tests of the deployment plan: operations, reload decisions, the fast and structural
//! paths agreeing on generated config pairs.

use super::*;
use crate::pure::rendered::AuxFile;

fn cfg(servers: &str) -> RenderedConfig {
    RenderedConfig {
        haproxy_cfg: format!(
            "global\n  maxconn 100\n\nfrontend fe\n  bind :8080\n  default_backend be\n\nbackend be\n{servers}"
        ),
        ..Default::default()
    }
}

fn with_map(mut r: RenderedConfig, content: &str) -> RenderedConfig {
    r.aux_files.insert(
        "maps/hosts.map".into(),
        AuxFile {
            kind: AuxKind::Map,
            name: "hosts.map".into(),
            path: "maps/hosts.map".into(),
            content: content.into(),
        },
    );
    r
}

#[test]
fn moving_a_server_to_a_new_address_needs_no_reload() {
    let from = cfg("  server s1 10.0.0.1:80 check\n");
    let to = cfg("  server s1 10.0.0.2:8080 check\n");
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(!plan.reload, "{:?}", plan.reload_reasons);
    assert_eq!(
        plan.operations,
        vec![
            Operation::SetServerAddress {
                backend: "be".into(),
                server: "s1".into(),
                address: "10.0.0.2".into(),
                port: Some(8080)
            },
            Operation::WriteConfig,
        ]
    );
    assert_eq!(
        plan.to_text(),
        "runtime: set server be/s1 addr 10.0.0.2 port 8080\nfile: write haproxy.cfg\nreload: no\n"
    );
}

#[test]
fn filling_a_reserved_slot_and_changing_a_weight_are_runtime_changes() {
    let from = cfg("  server s1 10.0.0.1:80 weight 10\n  server s2 127.0.0.1:1 disabled\n");
    let to = cfg("  server s1 10.0.0.1:80 weight 50\n  server s2 10.0.0.9:80\n");
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(!plan.reload);
    let runtime: Vec<String> = plan
        .operations
        .iter()
        .filter(|o| o.is_runtime())
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        runtime,
        vec![
            "runtime: set server be/s1 weight 50",
            "runtime: set server be/s2 addr 10.0.0.9 port 80",
            "runtime: set server be/s2 state ready",
        ]
    );
}

#[test]
fn servers_that_come_and_go_in_a_dynamic_backend_are_added_and_deleted_at_runtime() {
    let from = cfg("  default-server inter 2s\n  server s1 10.0.0.1:80\n  server s2 10.0.0.2:80\n");
    let to =
        cfg("  default-server inter 2s\n  server s2 10.0.0.2:80\n  server s3 10.0.0.3:81 check\n");
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(!plan.reload, "{:?}", plan.reload_reasons);
    assert_eq!(
        plan.to_text(),
        "runtime: del server be/s1\nruntime: add server be/s3 10.0.0.3:81 inter 2s check\nfile: write haproxy.cfg\nreload: no\n"
    );
    assert_eq!(
        plan.novel_servers, 1,
        "no validated server of be had 'check': haproxy -c must see this one"
    );
    let like_the_others = cfg(
        "  default-server inter 2s\n  server s1 10.0.0.1:80\n  server s2 10.0.0.2:80\n  server s4 10.0.0.4:80\n",
    );
    assert_eq!(
        super::plan(Some(&from), &like_the_others)
            .expect("plans")
            .novel_servers,
        0
    );
}

#[test]
fn adding_a_server_to_a_static_backend_or_adding_a_backend_needs_a_reload_with_the_reason() {
    let from = cfg("  balance static-rr\n  server s1 10.0.0.1:80\n");
    let more_servers =
        cfg("  balance static-rr\n  server s1 10.0.0.1:80\n  server s2 10.0.0.2:80\n");
    let plan1 = plan(Some(&from), &more_servers).expect("plans");
    assert!(plan1.reload);
    assert_eq!(
        plan1.reload_reasons,
        vec!["backend be balances with 'static-rr', a static algorithm: HAProxy adds and deletes servers at runtime only with a dynamic one".to_string()]
    );
    assert!(
        plan1.operations.iter().all(|o| !o.is_runtime()),
        "a reload carries every change"
    );

    let by_name = cfg("  server s1 10.0.0.1:80\n  server s2 db.internal:80\n");
    let plan2 = plan(Some(&cfg("  server s1 10.0.0.1:80\n")), &by_name).expect("plans");
    assert!(plan2.reload);
    assert!(
        plan2.reload_reasons[0].contains("not an IP address"),
        "{:?}",
        plan2.reload_reasons
    );

    let with_cookie = cfg("  server s1 10.0.0.1:80\n  server s2 10.0.0.2:80 cookie s2\n");
    let plan3 = plan(Some(&cfg("  server s1 10.0.0.1:80\n")), &with_cookie).expect("plans");
    assert!(plan3.reload);
    assert!(
        plan3.reload_reasons[0].contains("'cookie'"),
        "{:?}",
        plan3.reload_reasons
    );

    let fewer = plan(Some(&more_servers), &from).expect("plans");
    assert!(
        !fewer.reload,
        "HAProxy deletes servers from a static backend too: {:?}",
        fewer.reload_reasons
    );

    let mut new_backend = from.clone();
    new_backend
        .haproxy_cfg
        .push_str("\nbackend api\n  server a1 10.0.1.1:80\n");
    let plan4 = plan(Some(&from), &new_backend).expect("plans");
    assert!(plan4.reload);
    assert_eq!(
        plan4.reload_reasons,
        vec!["section 'backend api' was added".to_string()]
    );
}

#[test]
fn a_server_name_written_twice_in_a_backend_is_never_a_runtime_change() {
    let from = cfg("  server s1 10.0.0.1:80\n  server s2 10.0.0.2:80\n");
    let to = cfg(
        "  server s1 10.0.0.1:80\n  server s3 10.0.0.3:80\n  server s2 10.0.0.2:80\n  server s3 10.0.0.4:80\n",
    );
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(plan.reload);
    assert!(
        plan.reload_reasons[0].contains("twice"),
        "{:?}",
        plan.reload_reasons
    );
}

#[test]
fn the_line_comparison_gives_up_on_anything_but_server_lines() {
    let from = cfg("  server s1 10.0.0.1:80\n");
    let renamed = cfg("  server s9 10.0.0.1:80\n");
    let new_param = cfg("  server s1 10.0.0.1:80 backup\n");
    let mut other_line = from.clone();
    other_line.haproxy_cfg = other_line.haproxy_cfg.replace("maxconn 100", "maxconn 200");
    for to in [&renamed, &new_param, &other_line] {
        assert!(server_line_changes(&from.haproxy_cfg, &to.haproxy_cfg).is_none());
    }
    for to in [&new_param, &other_line] {
        assert!(plan(Some(&from), to).expect("plans").reload);
    }
    assert!(
        !plan(Some(&from), &renamed).expect("plans").reload,
        "a renamed server is one deleted and one added"
    );
}

/// A small deterministic generator: each call gives a number below its argument.
fn numbers_below(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |bound: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % bound
    }
}

#[test]
fn the_differing_lines_are_whole_lines_that_rebuild_both_texts() {
    // Texts from a few short lines, then random edits, so shared starts and ends fall on
    // and off line boundaries.
    let mut next = numbers_below(0x5eed);
    let pieces = ["a", "ab", "b", "", "a b", "\r"];
    for _ in 0..5_000 {
        let mut old = String::new();
        for _ in 0..next(6) {
            old.push_str(pieces[next(pieces.len())]);
            if next(5) > 0 {
                old.push('\n');
            }
        }
        let mut new = old.clone();
        for _ in 0..next(3) {
            let at = next(new.len() + 1);
            if next(2) == 0 && at < new.len() {
                new.remove(at);
            } else {
                new.insert_str(at, pieces[next(pieces.len())]);
            }
        }
        let region = DifferingLines::between(&old, &new);
        let old_rest = &old[region.above.len() + region.old.len()..];
        let new_rest = &new[region.above.len() + region.new.len()..];
        assert!(old.starts_with(region.above) && new.starts_with(region.above));
        assert_eq!(old_rest, new_rest, "{old:?} -> {new:?}: {region:?}");
        for (text, part) in [(&old, region.old), (&new, region.new)] {
            let start = region.above.len();
            let end = start + part.len();
            let begins_line = |at: usize| at == 0 || text.as_bytes()[at - 1] == b'\n';
            assert!(begins_line(start), "{old:?} -> {new:?}: {region:?}");
            assert!(
                end == text.len() || begins_line(end),
                "{old:?} -> {new:?}: {region:?}"
            );
        }
        if old == new {
            assert!(region.old.is_empty() && region.new.is_empty());
        }
        // Nothing shared is left in the differing parts: their first lines differ, and
        // so do their last ones.
        if !region.old.is_empty() && !region.new.is_empty() {
            let a: Vec<&str> = region.old.split_inclusive('\n').collect();
            let b: Vec<&str> = region.new.split_inclusive('\n').collect();
            assert_ne!(a.first(), b.first(), "{old:?} -> {new:?}: {region:?}");
            assert_ne!(a.last(), b.last(), "{old:?} -> {new:?}: {region:?}");
        }
    }
}

#[test]
fn comparing_only_the_differing_sections_decides_as_comparing_the_whole_texts() {
    let mut next = numbers_below(0x5ec7);
    let pool = [
        "global",
        "  maxconn 10",
        "defaults",
        "  mode http",
        "backend a",
        "backend b",
        "listen l",
        "  balance roundrobin",
        "  balance static-rr",
        "  default-server check",
        "  server s1 10.0.0.1:80",
        "  server s1 10.0.0.2:80",
        "  server s2 10.0.0.3:80 weight 5",
        "  server s2 10.0.0.3:80 weight 7",
        "  server s3 10.0.0.4:80 disabled",
        "",
        "# a comment",
    ];
    // What a plan does with two texts: reload (runtime operations are then moot), or the
    // runtime operations. HAProxy refuses two proxies of one name, so such pairs are
    // left out.
    let decide = |old: &str, new: &str, above: &str| -> Option<(bool, Vec<Operation>)> {
        let unique_proxies = |text: &str| {
            let names: Vec<&str> = text
                .lines()
                .filter(|l| ["backend ", "listen "].iter().any(|k| l.starts_with(k)))
                .collect();
            names
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                == names.len()
        };
        if !(unique_proxies(old) && unique_proxies(new)) {
            return None;
        }
        let (old, new) = (parse_config(old).ok()?, parse_config(new).ok()?);
        // Nor does it take two servers of one name in a proxy (compared with itself, such a
        // text is refused).
        if runtime_changes(&old, &old, None).is_err() || runtime_changes(&new, &new, None).is_err()
        {
            return None;
        }
        let outer = last_defaults_section(above);
        Some(match runtime_changes(&old, &new, outer.as_ref()) {
            Err(_) => (true, Vec::new()),
            Ok(changes) => {
                let mut operations = changes.operations;
                for (_, deletions) in changes.removed_backends {
                    operations.extend(deletions);
                }
                (false, operations)
            }
        })
    };
    let mut compared = 0;
    for _ in 0..8_000 {
        let mut lines: Vec<&str> = (0..3 + next(12)).map(|_| pool[next(pool.len())]).collect();
        let old = lines.join("\n") + "\n";
        for _ in 0..1 + next(3) {
            let at = next(lines.len() + 1);
            match next(3) {
                0 if at < lines.len() => {
                    lines.remove(at);
                }
                1 if at < lines.len() => lines[at] = pool[next(pool.len())],
                _ => lines.insert(at, pool[next(pool.len())]),
            }
        }
        let new = lines.join("\n") + "\n";
        let part = differing_sections(&old, &new).expect("no conditional blocks");
        assert_eq!(
            &old[part.above.len() + part.old.len()..],
            &new[part.above.len() + part.new.len()..]
        );
        if let Some(whole) = decide(&old, &new, "") {
            let by_part =
                decide(part.old, part.new, part.above).expect("parts of valid texts are valid");
            assert_eq!(by_part, whole, "{old:?} -> {new:?}: {part:?}");
            compared += 1;
        }
    }
    assert!(compared > 500, "only {compared} pairs compared");
}

#[test]
fn a_change_deep_in_a_large_config_is_planned_from_its_own_lines() {
    let servers: String = (0..2_000)
        .map(|n| {
            format!(
                "backend b{n}\n  server s1 10.0.{}.{}:80 check\n",
                n / 250,
                n % 250
            )
        })
        .collect();
    let from = RenderedConfig {
        haproxy_cfg: servers.clone(),
        ..Default::default()
    };
    let to = RenderedConfig {
        haproxy_cfg: servers.replace("10.0.6.1:80 check", "10.0.6.1:81 check"),
        ..Default::default()
    };
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(!plan.reload);
    assert_eq!(
        plan.operations,
        vec![
            Operation::SetServerAddress {
                backend: "b1501".into(),
                server: "s1".into(),
                address: "10.0.6.1".into(),
                port: Some(81),
            },
            Operation::WriteConfig
        ]
    );
}

#[test]
fn the_line_check_of_runtime_only_changes_agrees_with_the_plan_and_gives_up_on_structure() {
    let from = with_map(cfg("  server s1 10.0.0.1:80 check\n"), "a.example be\n");
    let moved = with_map(cfg("  server s1 10.0.0.2:80 check\n"), "a.example be\n");
    let remapped = with_map(cfg("  server s1 10.0.0.1:80 check\n"), "b.example be\n");
    let grown = with_map(
        cfg("  server s1 10.0.0.1:80 check\n  server s2 10.0.0.3:80 check\n"),
        "a.example be\n",
    );
    let new_file = with_map(cfg("  server s1 10.0.0.1:80 check\n"), "a.example be\n");
    let mut new_file = new_file;
    new_file.aux_files.insert(
        "files/x".into(),
        AuxFile {
            kind: AuxKind::File,
            name: "x".into(),
            path: "files/x".into(),
            content: "x".into(),
        },
    );
    for (to, runtime_only) in [
        (&from, true),
        (&moved, true),
        (&remapped, true),
        (&grown, false),
        (&new_file, false),
    ] {
        assert_eq!(
            runtime_only_by_lines(&from, to),
            runtime_only,
            "{}",
            to.haproxy_cfg
        );
        if runtime_only {
            assert!(!plan(Some(&from), to).expect("plans").reload);
        }
    }
}

#[test]
fn a_map_change_says_how_many_entries_were_added_removed_and_changed() {
    let from = with_map(
        cfg("  server s1 10.0.0.1:80\n"),
        "a.example be_a\nb.example be_b\nc.example be_c\n",
    );
    let to = with_map(
        cfg("  server s1 10.0.0.1:80\n"),
        "a.example be_a\nb.example be_x\nd.example be_d\n",
    );
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(!plan.reload);
    assert_eq!(
        plan.to_text(),
        "runtime: replace map maps/hosts.map (3 entries: 1 added, 1 removed, 1 changed)\nfile: write maps/hosts.map\nreload: no\n"
    );
}

/// A frontend that routes by `maps/hosts.map` alone (no backend named in its lines), a
/// fallback backend, then `backends`, with the map holding `map`.
fn routed(backends: &str, map: &str) -> RenderedConfig {
    with_map(
        RenderedConfig {
            haproxy_cfg: format!(
                "global\n  maxconn 100\n\ndefaults\n  mode http\n\nfrontend fe\n  bind :8080\n  use_backend %[req.hdr(host),lower,map(maps/hosts.map)] if {{ req.hdr(host),lower,map(maps/hosts.map) -m found }}\n  default_backend be_not_found\n\nbackend be_not_found\n  http-request return status 404\n\n{backends}"
            ),
            ..Default::default()
        },
        map,
    )
}

const WEB: &str = "backend web\n  server w1 10.0.0.1:80\n  server w2 10.0.0.2:80\n\n";
const API: &str = "backend api\n  server a1 10.0.1.1:80 check\n  server a2 10.0.1.2:80 check\n\n";
const TAIL: &str = "backend tail\n  server t1 10.0.2.1:80\n";

#[test]
fn a_removed_backend_has_its_servers_deleted_at_runtime_after_the_map_stops_routing_to_it() {
    let from = routed(
        &format!("{WEB}{API}{TAIL}"),
        "web.example web\napi.example api\n",
    );
    let to = routed(&format!("{WEB}{TAIL}"), "web.example web\n");
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(!plan.reload, "{:?}", plan.reload_reasons);
    assert!(plan.reload_reasons.is_empty());
    assert_eq!(plan.novel_servers, 0);
    assert_eq!(
        plan.to_text(),
        "runtime: replace map maps/hosts.map (1 entries: 0 added, 1 removed, 0 changed)\n\
         runtime: del server api/a1\n\
         runtime: del server api/a2\n\
         file: write haproxy.cfg\n\
         file: write maps/hosts.map\n\
         live: backend api removed: its 2 servers deleted at runtime; the next reload drops the empty backend\n\
         reload: no\n"
    );

    // The last section, and two at once.
    let last = routed(&format!("{WEB}{API}"), "web.example web\n");
    let plan = super::plan(Some(&last), &routed(WEB, "web.example web\n")).expect("plans");
    assert!(!plan.reload, "{:?}", plan.reload_reasons);
    assert_eq!(
        plan.operations
            .iter()
            .filter(|o| o.is_runtime())
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec!["runtime: del server api/a1", "runtime: del server api/a2"]
    );
    let all = routed(&format!("{WEB}{API}{TAIL}"), "web.example web\n");
    let both = super::plan(Some(&all), &routed(TAIL, "web.example web\n")).expect("plans");
    assert!(!both.reload, "{:?}", both.reload_reasons);
    assert_eq!(
        both.operations.iter().filter(|o| o.is_runtime()).count(),
        4,
        "{}",
        both.to_text()
    );
}

#[test]
fn map_changes_come_before_the_deletions_of_a_removed_backends_servers_and_after_those_of_a_kept_one()
 {
    // web loses w2 (its servers leaving go first, as ever), api goes whole (its servers go
    // once the map no longer routes to it), tail moves.
    let from = routed(
        &format!("{WEB}{API}{TAIL}"),
        "web.example web\napi.example api\n",
    );
    let to = routed(
        "backend web\n  server w1 10.0.0.1:80\n\nbackend tail\n  server t1 10.0.2.9:80\n",
        "web.example web\nnew.example tail\n",
    );
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(!plan.reload, "{:?}", plan.reload_reasons);
    let runtime: Vec<String> = plan
        .operations
        .iter()
        .filter(|o| o.is_runtime())
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        runtime,
        vec![
            "runtime: del server web/w2",
            "runtime: set server tail/t1 addr 10.0.2.9 port 80",
            "runtime: replace map maps/hosts.map (2 entries: 1 added, 1 removed, 0 changed)",
            "runtime: del server api/a1",
            "runtime: del server api/a2",
        ]
    );
    // The order the local target applies them in keeps it.
    let applied: Vec<String> = plan
        .runtime_operations()
        .into_iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(applied, runtime);
}

#[test]
fn a_removed_backend_a_remaining_section_still_names_needs_a_reload() {
    let map = "web.example web\n";
    let to = routed(&format!("{WEB}{TAIL}"), map);
    for (line, section) in [
        ("  use_backend api if { path_beg /api }\n", "fe"),
        ("  acl api_up nbsrv(api) gt 0\n", "fe"),
        ("  http-request track-sc0 src table api\n", "fe"),
    ] {
        let from = routed(&format!("{WEB}{API}{TAIL}"), map);
        let mut from = from;
        let mut to = to.clone();
        for config in [&mut from, &mut to] {
            config.haproxy_cfg =
                config
                    .haproxy_cfg
                    .replacen("  bind :8080\n", &format!("  bind :8080\n{line}"), 1);
        }
        let plan = plan(Some(&from), &to).expect("plans");
        assert!(plan.reload, "{line} in {section}: {}", plan.to_text());
        assert!(
            plan.reload_reasons[0].contains("section 'backend api' was removed"),
            "{:?}",
            plan.reload_reasons
        );
        assert!(plan.operations.iter().all(|o| !o.is_runtime()));
    }
    // A server of a kept backend tracking one of the removed backend's.
    let from = routed(
        &format!("{API}backend web\n  server w1 10.0.0.1:80 track api/a1\n"),
        map,
    );
    let to = routed("backend web\n  server w1 10.0.0.1:80 track api/a1\n", map);
    let tracked = plan(Some(&from), &to).expect("plans");
    assert!(tracked.reload, "{}", tracked.to_text());

    // A longer name that starts with the removed one is not a mention of it.
    let from = routed(
        &format!("{API}backend api-v2\n  server x 10.0.3.1:80\n"),
        map,
    );
    let to = routed("backend api-v2\n  server x 10.0.3.1:80\n", map);
    let mut named = (from.clone(), to.clone());
    for config in [&mut named.0, &mut named.1] {
        config.haproxy_cfg = config.haproxy_cfg.replacen(
            "  bind :8080\n",
            "  bind :8080\n  use_backend api-v2 if { path_beg /v2 }\n",
            1,
        );
    }
    let longer = plan(Some(&named.0), &named.1).expect("plans");
    assert!(!longer.reload, "{:?}", longer.reload_reasons);
}

#[test]
fn a_removed_listen_frontend_or_defaults_section_needs_a_reload() {
    let map = "web.example web\n";
    let base = routed(WEB, map);
    for (section, header) in [
        (
            "listen stats\n  bind :8404\n  stats enable\n",
            "listen stats",
        ),
        (
            "frontend other\n  bind :8081\n  default_backend web\n",
            "frontend other",
        ),
        ("defaults extra\n  mode http\n", "defaults extra"),
    ] {
        let mut from = base.clone();
        from.haproxy_cfg.push_str(&format!("\n{section}"));
        let plan = plan(Some(&from), &base).expect("plans");
        assert!(plan.reload, "{header}: {}", plan.to_text());
        assert_eq!(
            plan.reload_reasons,
            vec![format!("section '{header}' was removed")]
        );
    }
    // A backend whose servers sit in conditional blocks or come from a template.
    for backend in [
        "backend api\n  .if defined(X)\n  server a1 10.0.1.1:80\n  .endif\n",
        "backend api\n  server-template a 3 10.0.1.1:80\n",
    ] {
        let from = routed(&format!("{WEB}{backend}"), map);
        let plan = plan(Some(&from), &base).expect("plans");
        assert!(plan.reload, "{backend}: {}", plan.to_text());
    }
}

#[test]
fn a_backend_removed_deep_in_a_large_config_is_checked_against_the_lines_outside_the_compared_part()
{
    let backends = |skip: Option<usize>| -> String {
        (0..2_000)
            .filter(|n| Some(*n) != skip)
            .map(|n| {
                format!(
                    "backend b{n}\n  server s1 10.0.{}.{}:80 check\n",
                    n / 250,
                    n % 250
                )
            })
            .collect()
    };
    let frontend = |extra: &str| {
        format!(
            "frontend fe\n  bind :8080\n{extra}  use_backend %[req.hdr(host),lower,map(maps/hosts.map)]\n  default_backend b0\n\n"
        )
    };
    let pair = |extra: &str, removed: usize| {
        (
            RenderedConfig {
                haproxy_cfg: frontend(extra) + &backends(None),
                ..Default::default()
            },
            RenderedConfig {
                haproxy_cfg: frontend(extra) + &backends(Some(removed)),
                ..Default::default()
            },
        )
    };
    let (from, to) = pair("", 1500);
    let plan = plan(Some(&from), &to).expect("plans");
    assert!(!plan.reload, "{:?}", plan.reload_reasons);
    assert_eq!(
        plan.operations,
        vec![
            Operation::DelServer {
                backend: "b1500".into(),
                server: "s1".into(),
            },
            Operation::WriteConfig
        ]
    );
    // Named far above the sections compared: a reload.
    let (from, to) = pair("  use_backend b1500 if { path_beg /b }\n", 1500);
    let named = super::plan(Some(&from), &to).expect("plans");
    assert!(named.reload, "{}", named.to_text());
    assert!(
        named.reload_reasons[0].contains("use_backend b1500"),
        "{:?}",
        named.reload_reasons
    );
    // A comment naming it is no mention, and b150 is not b1500.
    let (from, to) = pair(
        "  # b1500 was here\n  use_backend b1500 if { path_beg /b }\n",
        150,
    );
    assert!(!super::plan(Some(&from), &to).expect("plans").reload);
    let (from, to) = pair("  # b1500 is on its way out\n", 1500);
    assert!(!super::plan(Some(&from), &to).expect("plans").reload);
}
