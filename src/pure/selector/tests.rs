use serde_json::json;

use super::*;

fn parse(text: &str) -> LabelSelector {
    match LabelSelector::parse(text) {
        Ok(selector) => selector,
        Err(e) => panic!("'{text}' should parse: {e}"),
    }
}

fn error(text: &str) -> SelectorError {
    match LabelSelector::parse(text) {
        Ok(selector) => panic!("'{text}' should not parse, got {selector:?}"),
        Err(e) => e,
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn equality_in_both_spellings_needs_the_label_with_that_value() {
    for text in ["app=web", "app==web", " app = web "] {
        let selector = parse(text);
        assert!(selector.matches(&labels(&[("app", "web")])), "{text}");
        assert!(!selector.matches(&labels(&[("app", "db")])), "{text}");
        assert!(
            !selector.matches(&labels(&[])),
            "{text}: absent is not equal"
        );
    }
}

#[test]
fn inequality_also_matches_objects_without_the_label_as_kubernetes_does() {
    let selector = parse("tier!=cache");
    assert!(selector.matches(&labels(&[("tier", "web")])));
    assert!(selector.matches(&labels(&[])));
    assert!(!selector.matches(&labels(&[("tier", "cache")])));
}

#[test]
fn in_needs_one_of_the_listed_values() {
    let selector = parse("env in (prod, staging)");
    assert!(selector.matches(&labels(&[("env", "prod")])));
    assert!(selector.matches(&labels(&[("env", "staging")])));
    assert!(!selector.matches(&labels(&[("env", "dev")])));
    assert!(!selector.matches(&labels(&[])));
}

#[test]
fn notin_matches_other_values_and_objects_without_the_label() {
    let selector = parse("env notin (dev,test)");
    assert!(selector.matches(&labels(&[("env", "prod")])));
    assert!(selector.matches(&labels(&[])));
    assert!(!selector.matches(&labels(&[("env", "test")])));
}

#[test]
fn a_bare_key_needs_the_label_and_a_bang_key_needs_it_absent() {
    let exists = parse("canary");
    let absent = parse("!canary");
    let with = labels(&[("canary", "")]);
    assert!(exists.matches(&with));
    assert!(!exists.matches(&labels(&[])));
    assert!(absent.matches(&labels(&[])));
    assert!(!absent.matches(&with));
}

#[test]
fn requirements_separated_by_commas_must_all_hold() {
    let selector = parse("app=web,tier!=cache,env in (prod),!legacy,team");
    assert_eq!(selector.requirements().len(), 5);
    let good = labels(&[("app", "web"), ("env", "prod"), ("team", "a")]);
    assert!(selector.matches(&good));
    let mut legacy = good.clone();
    legacy.insert("legacy".into(), "yes".into());
    assert!(!selector.matches(&legacy));
    let mut cache = good;
    cache.insert("tier".into(), "cache".into());
    assert!(!selector.matches(&cache));
}

#[test]
fn the_empty_selector_matches_everything() {
    for text in ["", "   "] {
        let selector = parse(text);
        assert!(selector.matches(&labels(&[])));
        assert!(selector.matches(&labels(&[("a", "b")])));
    }
    assert_eq!(LabelSelector::parse_optional(Some("  ")), Ok(None));
    assert_eq!(LabelSelector::parse_optional(None), Ok(None));
    assert!(LabelSelector::parse_optional(Some("a=b")).is_ok_and(|s| s.is_some()));
}

#[test]
fn the_nothing_selector_matches_no_labels() {
    assert!(!LabelSelector::nothing().matches(&labels(&[])));
    assert!(!LabelSelector::nothing().matches(&labels(&[("a", "b")])));
}

#[test]
fn an_empty_value_after_equals_selects_the_empty_label_value() {
    let selector = parse("a=,b=c");
    assert!(selector.matches(&labels(&[("a", ""), ("b", "c")])));
    assert!(
        !selector.matches(&labels(&[("b", "c")])),
        "absent is not empty"
    );
    assert!(!selector.matches(&labels(&[("a", "x"), ("b", "c")])));
}

#[test]
fn an_empty_item_in_a_value_list_is_the_empty_value_as_in_kubernetes() {
    let selector = parse("a in (x,,y)");
    assert!(selector.matches(&labels(&[("a", "")])));
    assert!(selector.matches(&labels(&[("a", "y")])));
    let only_empty = parse("a in ()");
    assert!(only_empty.matches(&labels(&[("a", "")])));
    assert!(!only_empty.matches(&labels(&[("a", "x")])));
}

#[test]
fn greater_and_less_than_compare_whole_numbers() {
    let selector = parse("replicas>2,replicas<10");
    assert!(selector.matches(&labels(&[("replicas", "5")])));
    assert!(!selector.matches(&labels(&[("replicas", "2")])));
    assert!(!selector.matches(&labels(&[("replicas", "10")])));
    assert!(
        !selector.matches(&labels(&[("replicas", "many")])),
        "a non-numeric label does not compare"
    );
    assert!(!selector.matches(&labels(&[])), "nor does an absent one");
}

#[test]
fn keys_may_carry_a_dns_prefix_and_values_may_hold_dots_dashes_and_underscores() {
    let selector = parse("app.kubernetes.io/name=my-app_v1.2,kubernetes.io/metadata.name");
    assert!(selector.matches(&labels(&[
        ("app.kubernetes.io/name", "my-app_v1.2"),
        ("kubernetes.io/metadata.name", "shop"),
    ])));
}

#[test]
fn keywords_are_values_after_an_operator() {
    let selector = parse("mode=in,other in (notin)");
    assert!(selector.matches(&labels(&[("mode", "in"), ("other", "notin")])));
}

#[test]
fn an_objects_metadata_labels_are_what_it_is_matched_on() {
    let selector = parse("app=web");
    assert!(selector.matches_object(&json!({"metadata": {"labels": {"app": "web"}}})));
    assert!(!selector.matches_object(&json!({"metadata": {"labels": {"app": "db"}}})));
    assert!(!selector.matches_object(&json!({"metadata": {"name": "x"}})));
    assert!(
        parse("app!=web").matches_object(&json!({"metadata": {}})),
        "an object without labels lacks every key"
    );
    assert!(
        !selector.matches_object(&json!({"metadata": {"labels": {"app": 3}}})),
        "a non-string label value counts as absent"
    );
}

#[test]
fn a_selector_prints_in_the_form_it_parses_from() {
    let text = "app=web,tier!=cache,env in (a,b),env notin (c),team,!legacy,n>1,n<9,e=";
    let selector = parse(text);
    assert_eq!(selector.to_string(), text);
    assert_eq!(parse(&selector.to_string()), selector);
}

#[test]
fn a_missing_value_list_is_reported_at_the_character_where_the_paren_was_expected() {
    let e = error("env in prod");
    assert_eq!(e.position, 8);
    assert_eq!(
        e.to_string(),
        "at character 8: expected '(' after 'in', as in `env in (a,b)`, found 'prod'"
    );
}

#[test]
fn an_unclosed_value_list_is_reported_at_the_end() {
    let e = error("env in (a,b");
    assert_eq!(e.position, 12);
    assert!(
        e.to_string()
            .contains("expected ',' or ')' in the value list, found the end of the selector"),
        "{e}"
    );
    let e = error("env in (a b)");
    assert_eq!(e.position, 11);
    assert!(e.to_string().contains("found 'b'"), "{e}");
}

#[test]
fn two_requirements_without_a_comma_are_reported_at_the_second() {
    let e = error("app=web tier=cache");
    assert_eq!(e.position, 9);
    assert_eq!(
        e.problem,
        SelectorProblem::ExpectedComma {
            found: "'tier'".into()
        }
    );
}

#[test]
fn an_unknown_operator_is_reported_after_the_key() {
    let e = error("app ~ web");
    assert_eq!(e.position, 5);
    assert!(
        e.to_string().contains(
            "after the key 'app' expected an operator (=, ==, !=, in, notin, >, <), a ',' or the end, found '~'"
        ),
        "{e}"
    );
    assert!(matches!(
        error("app(web)").problem,
        SelectorProblem::ExpectedOperator { .. }
    ));
}

#[test]
fn a_doubled_operator_is_reported_as_a_missing_comma() {
    let e = error("a==b==c");
    assert_eq!(e.position, 5);
    assert!(matches!(e.problem, SelectorProblem::ExpectedComma { .. }));
}

#[test]
fn a_bang_key_followed_by_an_operator_suggests_the_inequality() {
    let e = error("!tier=cache");
    assert_eq!(e.position, 6);
    assert!(e.to_string().contains("write 'tier!=cache'"), "{e}");
}

#[test]
fn a_missing_key_is_reported_where_it_should_be() {
    for (text, position) in [
        ("=web", 1),
        ("app=web,", 9),
        (",app", 1),
        ("app=web,,b", 9),
        ("in (a)", 1),
        ("!", 2),
    ] {
        let e = error(text);
        assert_eq!(e.position, position, "{text}: {e}");
        assert!(
            matches!(e.problem, SelectorProblem::ExpectedKey { .. }),
            "{text}: {e}"
        );
    }
}

#[test]
fn invalid_keys_say_which_rule_they_break() {
    let cases = [
        ("-app=x", "must begin and end with a letter or digit"),
        ("app$=x", "not '$'"),
        ("a/b/c=x", "at most one '/'"),
        ("/name=x", "the prefix before '/' is empty"),
        ("Example.com/name=x", "must be a DNS subdomain"),
        ("example.com/=x", "the name is empty"),
    ];
    for (text, reason) in cases {
        let e = error(text);
        assert_eq!(e.position, 1, "{text}: {e}");
        assert!(
            matches!(e.problem, SelectorProblem::InvalidKey { .. }),
            "{text}: {e}"
        );
        assert!(e.to_string().contains(reason), "{text}: {e}");
    }
    let long = format!("{}=x", "k".repeat(64));
    assert!(error(&long).to_string().contains("at most 63 characters"));
    assert!(parse(&format!("{}=x", "k".repeat(63))).matches(&labels(&[(&"k".repeat(63), "x")])));
}

#[test]
fn invalid_values_are_reported_at_the_value() {
    let e = error("app=web,tier=-cache");
    assert_eq!(e.position, 14);
    assert_eq!(
        e.to_string(),
        "at character 14: '-cache' is not a valid label value: a value must begin and end with a letter or digit"
    );
    let e = error("env in (ok, b@d)");
    assert_eq!(e.position, 13);
    assert!(e.to_string().contains("not '@'"), "{e}");
    assert!(
        error(&format!("a={}", "v".repeat(64)))
            .to_string()
            .contains("at most 63 characters")
    );
}

#[test]
fn a_comparison_with_a_non_number_is_refused() {
    let e = error("replicas>many");
    assert_eq!(e.position, 10);
    assert_eq!(
        e.problem,
        SelectorProblem::NotAnInteger {
            operator: ">".into(),
            value: "many".into()
        }
    );
    assert!(matches!(
        error("replicas<").problem,
        SelectorProblem::ExpectedValue { .. }
    ));
}

#[test]
fn positions_count_characters_not_bytes() {
    let e = error("é=x");
    assert_eq!(e.position, 1);
    let e = error("a=b,ü");
    assert_eq!(e.position, 5);
}
