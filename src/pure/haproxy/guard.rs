//! The code-running guard: directives that make HAProxy run code, start programs or load a
//! shared object while it reads or checks a configuration (`lua-load`, external checks,
//! `program` sections, OpenSSL engines and providers, ...), and the environment changes that
//! steer them (`setenv`, ...), are refused unless the `HAProxyTemplateConfig`'s own templates
//! wrote them. `haproxy -c` runs on renders that contain watched objects' values (the
//! admission webhook's included): were such a value able to add a `lua-load` line, checking
//! the render would run the object's code, as `nginx -t` on user input did in ingress-nginx
//! (CVE-2025-1974).
//!
//! The rule: a code-running directive is accepted only when its whole line (trimmed, runs of
//! spaces and tabs collapsed to one space, see [`normalize_line`]) is one of the
//! [`TrustedLines`] of the render: lines that appear as literal text in the config's
//! `haproxy.cfg` template or one of its snippets, on a template line that is not part of any
//! `{{ }}` expression (see `template::literal_lines`; map, file and certificate templates
//! do not count, they are not `haproxy.cfg`). Such a line cannot carry object text: an
//! object value reaches the output only through a `{{ }}` expression. A line an expression
//! produced (`lua-load {{x}}`), or one that a value holding a newline injected, is refused at
//! its line. The rule trusts a line's text, not its position: an object that reproduces a
//! trusted line exactly adds nothing its author did not write.
//!
//! The guard judges every line, inside `.if` blocks too (HAProxy runs a true block's lines),
//! and reads keywords as HAProxy does, after quotes and escapes (`"lua-load"`,
//! `lu"a-l"oad` and `\x6cua-load` are all `lua-load`). A keyword that holds an environment
//! reference (`"${K}" /x.lua`) is refused on an untrusted line too, as its value could name
//! any of these directives; so is an `option` or `filter` whose name holds one.
//!
//! `haptor lint FILE` does not apply the guard: a hand-written file has no templates and is
//! not fed watched objects, so all of it is its author's. The guard applies wherever a render
//! of templates is validated ([`check_offline`](crate::pure::pipeline::check_offline)).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::ast::{Config, Directive};
use super::parser::config_lines;
use super::schema::SchemaProblem;
use super::sections::SectionKind;
use crate::pure::rendered::hex;

/// Directives that run code (or start programs, or load shared objects) when HAProxy 2.6
/// reads or checks a configuration, or that steer what those run, with what each does. They
/// are refused in every section (most exist only in `global`; the schema check reports a
/// misplaced one as well).
const CODE_RUNNING_KEYWORDS: &[(&str, &str)] = &[
    // Global: allows health checks to run external programs (`option external-check`);
    // in proxies `external-check command` / `external-check path` name the program and
    // the PATH it runs with.
    (
        "external-check",
        "runs external programs as health checks, or names them",
    ),
    (
        "insecure-fork-wanted",
        "lets HAProxy start processes (Lua's os.execute, external checks)",
    ),
    (
        "insecure-setuid-wanted",
        "lets the programs HAProxy starts gain privileges through setuid",
    ),
    ("lua-load", "runs code when HAProxy loads the configuration"),
    (
        "lua-load-per-thread",
        "runs code when HAProxy loads the configuration",
    ),
    // `lua-prepend-path <dir> cpath` makes `require` load shared objects from <dir>.
    (
        "lua-prepend-path",
        "chooses where Lua's require loads code and shared objects from",
    ),
    // HAProxy Enterprise's module loader; community 2.6 rejects these as unknown keywords,
    // refused anyway so a build that knows them is guarded as well.
    ("module-load", "loads a shared object"),
    (
        "module-path",
        "chooses where module-load loads shared objects from",
    ),
    // The environment: `${...}` references in later lines, LD_PRELOAD and PATH of the
    // programs HAProxy starts, OPENSSL_CONF / OPENSSL_MODULES (engines and providers).
    (
        "presetenv",
        "changes the environment that later lines and the programs HAProxy starts read",
    ),
    (
        "resetenv",
        "changes the environment that later lines and the programs HAProxy starts read",
    ),
    (
        "setenv",
        "changes the environment that later lines and the programs HAProxy starts read",
    ),
    // Only in builds with USE_ENGINE (not Debian's 2.6, whose schema check calls it unknown).
    ("ssl-engine", "loads an OpenSSL engine (a shared object)"),
    (
        "ssl-provider",
        "loads an OpenSSL provider (a shared object)",
    ),
    (
        "ssl-provider-path",
        "chooses where OpenSSL loads providers (shared objects) from",
    ),
    (
        "unsetenv",
        "changes the environment that later lines and the programs HAProxy starts read",
    ),
];

/// The end of every refusal: what haptor accepts instead.
const ONLY_LITERAL: &str = "haptor accepts it only on a line the HAProxyTemplateConfig's templates write literally (not from a watched object's values)";

/// The lines a render's templates wrote literally (see the [module](self) rule), normalised
/// with [`normalize_line`], and a digest that tells two sets apart (the validation cache
/// key holds it, so a success under one config cannot vouch for a render under another).
/// Cloning is cheap. The default trusts no line.
#[derive(Clone, Default)]
pub struct TrustedLines(Option<Arc<TrustedSet>>);

struct TrustedSet {
    lines: BTreeSet<String>,
    digest: String,
}

impl TrustedLines {
    /// The set of `lines` (raw template lines; each is normalised, blank ones dropped).
    pub fn new<'a>(lines: impl IntoIterator<Item = &'a str>) -> TrustedLines {
        let lines: BTreeSet<String> = lines
            .into_iter()
            .map(normalize_line)
            .filter(|line| !line.is_empty())
            .collect();
        if lines.is_empty() {
            return TrustedLines(None);
        }
        let mut hasher = Sha256::new();
        hasher.update(b"haptor-trusted-lines-v1");
        for line in &lines {
            hasher.update(b"\0");
            hasher.update(line.as_bytes());
        }
        let digest = hex(&hasher.finalize());
        TrustedLines(Some(Arc::new(TrustedSet { lines, digest })))
    }

    /// Whether the line `raw` (as it stands in `haproxy.cfg`) is one of the set.
    pub fn trusts(&self, raw: &str) -> bool {
        self.0
            .as_ref()
            .is_some_and(|set| set.lines.contains(&normalize_line(raw)))
    }

    /// How many distinct lines the set holds.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |set| set.lines.len())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// A digest of the set: equal sets, equal digests (`"none"` for the empty set).
    pub fn digest(&self) -> &str {
        self.0.as_ref().map_or("none", |set| set.digest.as_str())
    }
}

impl PartialEq for TrustedLines {
    fn eq(&self, other: &TrustedLines) -> bool {
        self.digest() == other.digest()
    }
}

impl Eq for TrustedLines {}

impl fmt::Debug for TrustedLines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustedLines")
            .field("lines", &self.len())
            .field("digest", &self.digest())
            .finish()
    }
}

/// A line as the trust rule compares it: without the spaces, tabs, vertical tabs, form feeds
/// and carriage returns around it, and with every run of spaces, tabs, vertical tabs and
/// form feeds inside it (HAProxy's word separators) turned into one space. A carriage return
/// inside a line stays (HAProxy stops reading the line there).
pub fn normalize_line(raw: &str) -> String {
    let is_edge = |c: char| matches!(c, ' ' | '\t' | '\r' | '\x0b' | '\x0c');
    let is_separator = |c: char| matches!(c, ' ' | '\t' | '\x0b' | '\x0c');
    let mut out = String::with_capacity(raw.len());
    let mut in_run = false;
    for c in raw.trim_matches(is_edge).chars() {
        if is_separator(c) {
            if !in_run {
                out.push(' ');
            }
            in_run = true;
        } else {
            out.push(c);
            in_run = false;
        }
    }
    out
}

/// The code-running directives of `config` (parsed from `text`) whose line `trusted` does
/// not hold, each as a problem at its line. Empty when there are none.
pub fn check_code_running(
    config: &Config,
    text: &str,
    trusted: &TrustedLines,
) -> Vec<SchemaProblem> {
    let lines: Vec<&str> = config_lines(text).collect();
    let mut problems = Vec::new();
    let mut judge = |line: usize, found: Option<(String, &'static str)>| {
        let Some((name, what)) = found else {
            return;
        };
        let raw = line.checked_sub(1).and_then(|i| lines.get(i)).copied();
        if raw.is_some_and(|raw| trusted.trusts(raw)) {
            return;
        }
        problems.push(SchemaProblem {
            line,
            message: format!("{name} {what}; {ONLY_LITERAL}"),
        });
    };
    for directive in &config.preamble {
        judge(directive.line, code_running(None, directive));
    }
    for section in &config.sections {
        if section.kind == SectionKind::Program {
            judge(
                section.line,
                Some((
                    "a 'program' section".to_owned(),
                    "starts a program under HAProxy's master process",
                )),
            );
        }
        for directive in &section.directives {
            judge(directive.line, code_running(Some(section.kind), directive));
        }
    }
    problems
}

/// What a directive runs or steers, when it is one of the guarded ones: the name the
/// refusal gives it and what it does.
fn code_running(
    section: Option<SectionKind>,
    directive: &Directive,
) -> Option<(String, &'static str)> {
    let words = &directive.words;
    // HAProxy takes `no` and `default` off the front before it looks the keyword up.
    let at = match words.first().map(String::as_str) {
        Some("no" | "default") if words.len() > 1 => 1,
        _ => 0,
    };
    let keyword = words.get(at)?.as_str();
    if directive.word_has_env_ref(at) {
        return Some((
            format!("'{keyword}'"),
            "takes its keyword from an environment variable, which could name a directive that runs code",
        ));
    }
    let next = words.get(at + 1).map(String::as_str);
    if matches!((keyword, at), ("option", 0) | ("filter", _)) && directive.word_has_env_ref(at + 1)
    {
        return Some((
            format!("'{keyword} {}'", next.unwrap_or_default()),
            "takes its name from an environment variable, which could name one that runs code",
        ));
    }
    match (keyword, next) {
        // `no option external-check` and `default option external-check` switch it off.
        ("option", Some("external-check")) if at == 0 => Some((
            "option external-check".to_owned(),
            "runs an external program as the health check",
        )),
        ("filter", Some("opentracing")) => Some((
            "filter opentracing".to_owned(),
            "loads the OpenTracing plugin (a shared object) its configuration file names",
        )),
        ("command", _) if section == Some(SectionKind::Program) => Some((
            "command".to_owned(),
            "names the program HAProxy's master process starts",
        )),
        _ => CODE_RUNNING_KEYWORDS
            .iter()
            .find(|(name, _)| *name == keyword)
            .map(|(name, what)| ((*name).to_owned(), *what)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::haproxy::parse_config;

    fn refused(text: &str, trusted: &TrustedLines) -> Vec<SchemaProblem> {
        let config = parse_config(text).expect("test config parses");
        check_code_running(&config, text, trusted)
    }

    fn none() -> TrustedLines {
        TrustedLines::default()
    }

    #[test]
    fn a_line_the_templates_wrote_literally_is_accepted() {
        let trusted = TrustedLines::new(["  lua-load   /etc/haproxy/x.lua", "global"]);
        assert_eq!(
            refused("global\n    lua-load /etc/haproxy/x.lua\n", &trusted),
            []
        );
        assert_eq!(
            refused("global\n\tlua-load\t/etc/haproxy/x.lua  \r\n", &trusted),
            [],
            "spacing and a trailing carriage return do not matter"
        );
    }

    #[test]
    fn a_line_that_differs_from_every_trusted_line_is_refused_at_its_line() {
        let trusted = TrustedLines::new(["lua-load /etc/haproxy/x.lua"]);
        let found = refused(
            "global\n    maxconn 10\n    lua-load /tmp/x.lua\n",
            &trusted,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 3);
        assert_eq!(
            found[0].to_string(),
            "line 3: lua-load runs code when HAProxy loads the configuration; haptor accepts it only on a line the HAProxyTemplateConfig's templates write literally (not from a watched object's values)"
        );
    }

    #[test]
    fn each_guarded_keyword_is_refused_on_an_untrusted_line() {
        let cases: &[(&str, &str)] = &[
            ("global\n  lua-load /tmp/x.lua\n", "lua-load"),
            (
                "global\n  lua-load-per-thread /tmp/x.lua\n",
                "lua-load-per-thread",
            ),
            (
                "global\n  lua-prepend-path /tmp/?.so cpath\n",
                "lua-prepend-path",
            ),
            ("global\n  module-load /tmp/x.so\n", "module-load"),
            ("global\n  module-path /tmp\n", "module-path"),
            ("global\n  external-check\n", "external-check"),
            ("global\n  insecure-fork-wanted\n", "insecure-fork-wanted"),
            (
                "global\n  insecure-setuid-wanted\n",
                "insecure-setuid-wanted",
            ),
            ("global\n  setenv LD_PRELOAD /tmp/x.so\n", "setenv"),
            ("global\n  presetenv OPENSSL_CONF /tmp/o.cnf\n", "presetenv"),
            ("global\n  resetenv PATH\n", "resetenv"),
            ("global\n  unsetenv PATH\n", "unsetenv"),
            ("global\n  ssl-engine rdrand\n", "ssl-engine"),
            ("global\n  ssl-provider legacy\n", "ssl-provider"),
            ("global\n  ssl-provider-path /tmp\n", "ssl-provider-path"),
            (
                "backend be\n  option external-check\n",
                "option external-check",
            ),
            (
                "backend be\n  external-check command /tmp/x.sh\n",
                "external-check",
            ),
            ("defaults\n  external-check path /tmp\n", "external-check"),
            (
                "frontend fe\n  filter opentracing config /tmp/ot.cfg\n",
                "filter opentracing",
            ),
        ];
        for (text, name) in cases {
            let found = refused(text, &none());
            assert_eq!(found.len(), 1, "{text:?}: {found:?}");
            assert_eq!(found[0].line, 2, "{text:?}");
            assert!(
                found[0].message.starts_with(&format!("{name} ")),
                "{text:?}: {found:?}"
            );
        }
        // Every table entry has a case above.
        for (keyword, _) in CODE_RUNNING_KEYWORDS {
            assert!(
                cases
                    .iter()
                    .any(|(text, _)| text.contains(&format!(" {keyword} "))
                        || text.contains(&format!(" {keyword}\n"))),
                "no case for {keyword}"
            );
        }
    }

    #[test]
    fn a_program_section_and_its_command_are_refused() {
        let text = "global\n  master-worker\nprogram evil\n  command /tmp/x.sh\n  user nobody\n";
        let found = refused(text, &none());
        let lines: Vec<usize> = found.iter().map(|p| p.line).collect();
        assert_eq!(lines, [3, 4], "{found:?}");
        assert!(
            found[0]
                .message
                .starts_with("a 'program' section starts a program")
        );
        assert!(found[1].message.starts_with("command names the program"));
        let trusted = TrustedLines::new(["program evil", "command /tmp/x.sh"]);
        assert_eq!(refused(text, &trusted), []);
    }

    #[test]
    fn keywords_are_read_as_haproxy_reads_them_through_quotes_and_escapes() {
        for line in [
            "\"lua-load\" /tmp/x.lua",
            "lu\"a-l\"oad /tmp/x.lua",
            "'lua-load' /tmp/x.lua",
            "\\x6cua-load /tmp/x.lua",
            "no lua-load /tmp/x.lua",
        ] {
            let text = format!("global\n  {line}\n");
            assert_eq!(refused(&text, &none()).len(), 1, "{line}");
        }
    }

    #[test]
    fn lines_inside_conditional_blocks_are_judged_too() {
        let found = refused(
            "global\n.if 1\n  lua-load /tmp/x.lua\n.endif\n.if 0\n  setenv A b\n.endif\n",
            &none(),
        );
        let lines: Vec<usize> = found.iter().map(|p| p.line).collect();
        assert_eq!(lines, [3, 6], "{found:?}");
    }

    #[test]
    fn a_keyword_from_an_environment_variable_is_refused_on_an_untrusted_line() {
        let text = "global\n  \"${K}\" /tmp/x.lua\n";
        let found = refused(text, &none());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].message.contains("environment variable"),
            "{found:?}"
        );
        assert_eq!(
            refused(text, &TrustedLines::new(["\"${K}\" /tmp/x.lua"])),
            []
        );
        let found = refused(
            "backend be\n  option \"${O}\"\n  filter \"${F}\" config /tmp/ot.cfg\n  no option \"${O}\"\n",
            &none(),
        );
        let lines: Vec<usize> = found.iter().map(|p| p.line).collect();
        assert_eq!(lines, [2, 3], "{found:?}");
    }

    #[test]
    fn switching_external_checks_off_and_ordinary_directives_are_not_refused() {
        let text = "global\n  maxconn 10\n  log stdout local0\ndefaults\n  no option external-check\n  default option external-check\n  option httpchk\nbackend be\n  filter compression\n  server command 127.0.0.1:80\n";
        assert_eq!(refused(text, &none()), []);
    }

    #[test]
    fn trusted_sets_are_told_apart_by_their_digest() {
        let a = TrustedLines::new(["lua-load /a.lua"]);
        let same = TrustedLines::new(["lua-load   /a.lua", "   "]);
        let b = TrustedLines::new(["lua-load /b.lua"]);
        assert_eq!(a, same);
        assert_ne!(a, b);
        assert_ne!(a, TrustedLines::default());
        assert_eq!(TrustedLines::new([""]), TrustedLines::default());
        assert_eq!(TrustedLines::default().digest(), "none");
        assert!(!TrustedLines::default().trusts(""));
    }

    #[test]
    fn normalising_keeps_words_and_drops_spacing() {
        assert_eq!(normalize_line("  a \t b\x0b c  \r"), "a b c");
        assert_eq!(normalize_line("a\rb"), "a\rb");
        assert_eq!(normalize_line(""), "");
    }
}
