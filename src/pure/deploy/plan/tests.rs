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
fn adding_a_server_or_a_backend_needs_a_reload_with_the_reason() {
    let from = cfg("  server s1 10.0.0.1:80\n");
    let more_servers = cfg("  server s1 10.0.0.1:80\n  server s2 10.0.0.2:80\n");
    let plan1 = plan(Some(&from), &more_servers).expect("plans");
    assert!(plan1.reload);
    assert_eq!(
        plan1.reload_reasons,
        vec!["section 'backend be' changed".to_string()]
    );
    assert!(
        plan1.operations.iter().all(|o| !o.is_runtime()),
        "a reload carries every change"
    );

    let mut new_backend = from.clone();
    new_backend
        .haproxy_cfg
        .push_str("\nbackend api\n  server a1 10.0.1.1:80\n");
    let plan2 = plan(Some(&from), &new_backend).expect("plans");
    assert!(plan2.reload);
    assert_eq!(
        plan2.reload_reasons,
        vec!["section 'backend api' was added".to_string()]
    );
}

#[test]
fn a_changed_map_is_replaced_live_and_a_new_map_needs_a_reload() {
    let base = cfg("  server s1 10.0.0.1:80\n");
    let from = with_map(base.clone(), "a.example be\n");
    let to = with_map(base.clone(), "a.example be\n# comment\nb.example be\n");
    let live = plan(Some(&from), &to).expect("plans");
    assert!(!live.reload);
    assert_eq!(
        live.operations[0],
        Operation::ReplaceMap {
            path: "maps/hosts.map".into(),
            entries: vec![
                ("a.example".into(), "be".into()),
                ("b.example".into(), "be".into())
            ]
        }
    );
    let fresh = plan(Some(&base), &to).expect("plans");
    assert!(fresh.reload);
    assert_eq!(
        fresh.reload_reasons,
        vec!["map maps/hosts.map is new".to_string()]
    );
}

#[test]
fn identical_renders_need_nothing() {
    let r = with_map(cfg("  server s1 10.0.0.1:80\n"), "a b\n");
    let plan = plan(Some(&r), &r).expect("plans");
    assert!(plan.is_empty());
    assert_eq!(plan.to_text(), "reload: no\n");
}

#[test]
fn a_first_deployment_writes_everything_and_reloads() {
    let r = with_map(cfg("  server s1 10.0.0.1:80\n"), "a b\n");
    let plan = plan(None, &r).expect("plans");
    assert!(plan.reload);
    assert_eq!(
        plan.operations,
        vec![
            Operation::WriteConfig,
            Operation::WriteFile {
                path: "maps/hosts.map".into()
            }
        ]
    );
}

#[test]
fn a_new_config_that_does_not_parse_is_an_error_naming_the_line_of_the_whole_text() {
    let text = |last: &str| RenderedConfig {
        haproxy_cfg: format!(
            "global\n  maxconn 10\n\nbackend a\n  server s1 10.0.0.1:80\n\nbackend b\n  {last}\n"
        ),
        ..Default::default()
    };
    let good = text("server s1 10.0.0.2:80");
    let bad = text("server s1 \"unterminated");
    let err = plan(Some(&good), &bad).expect_err("unparseable");
    assert_eq!((err.which, err.line), ("new", 8));
    // An old text that does not parse is replaced, for a reason naming its line.
    let replaced = plan(Some(&bad), &good).expect("replaced");
    assert!(replaced.reload);
    assert!(
        replaced.reload_reasons[0].contains("line 8"),
        "{replaced:?}"
    );
}

#[test]
fn a_first_deployment_reloads_with_every_file_without_reading_the_config() {
    let unparseable = RenderedConfig {
        haproxy_cfg: "global\n  log \"unterminated\n".into(),
        ..Default::default()
    };
    let plan = plan(None, &unparseable).expect("nothing to compare with");
    assert!(plan.reload);
    assert_eq!(plan.operations, [Operation::WriteConfig]);
}

#[test]
fn only_the_differing_sections_are_compared_and_they_mean_what_they_mean_in_the_whole() {
    let backends = |n: usize, changed: &str| {
        let mut text = String::from("global\n  maxconn 10\n\ndefaults\n  mode http\n");
        for b in 0..n {
            text.push_str(&format!("\nbackend b{b}\n  balance roundrobin\n"));
            if b == n / 2 {
                text.push_str(changed);
            }
            text.push_str(&format!("  server s1 10.0.{b}.1:80\n"));
        }
        text
    };
    let from = RenderedConfig {
        haproxy_cfg: backends(50, ""),
        ..Default::default()
    };
    let checked = backends(50, "  option httpchk\n");
    let part = differing_sections(&from.haproxy_cfg, &checked).expect("no conditional blocks");
    assert_eq!(part.old, "backend b25\n  balance roundrobin\n");
    assert_eq!(
        part.new,
        "backend b25\n  balance roundrobin\n  option httpchk\n"
    );
    // A structural change inside the part is found; an address change is runtime-only.
    let to = RenderedConfig {
        haproxy_cfg: backends(50, "  option httpchk\n"),
        ..Default::default()
    };
    assert!(plan(Some(&from), &to).unwrap().reload);
    let moved = RenderedConfig {
        haproxy_cfg: from
            .haproxy_cfg
            .replace("10.0.25.1:80", "10.0.25.9:80\n  # moved"),
        ..Default::default()
    };
    let plan = plan(Some(&from), &moved).unwrap();
    assert!(!plan.reload, "{:?}", plan.reload_reasons);
    assert!(
        plan.operations.iter().any(
            |op| matches!(op, Operation::SetServerAddress { backend, .. } if backend == "b25")
        ),
        "{:?}",
        plan.operations
    );
}

#[test]
fn the_line_comparison_agrees_with_the_full_comparison() {
    let from =
        cfg("  server s1 10.0.0.1:80 check weight 10\n  server s2 127.0.0.1:1 disabled check\n");
    let to = cfg("  server s1 10.0.0.3:81 check weight 20\n  server s2 10.0.0.4:80 check\n");
    let fast =
        server_line_changes(&from.haproxy_cfg, &to.haproxy_cfg).expect("only server lines differ");
    let old = parse_config(&from.haproxy_cfg).expect("parses");
    let new = parse_config(&to.haproxy_cfg).expect("parses");
    assert_eq!(structural_difference(&old, &new), None);
    assert_eq!(fast, server_operations(&old, &new));
    assert_eq!(fast.len(), 4, "{fast:?}");
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
        assert!(plan(Some(&from), to).expect("plans").reload);
    }
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
    let decide = |old: &str, new: &str| -> Option<(bool, Vec<Operation>)> {
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
        Some(match structural_difference(&old, &new) {
            Some(_) => (true, Vec::new()),
            None => (false, server_operations(&old, &new)),
        })
    };
    let mut compared = 0;
    for _ in 0..3_000 {
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
        if let Some(whole) = decide(&old, &new) {
            let by_part = decide(part.old, part.new).expect("parts of valid texts are valid");
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
