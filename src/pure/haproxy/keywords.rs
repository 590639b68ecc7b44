//! Keyword tables for the schema check: which directives each configuration section
//! accepts, which parameters `bind` and `server` lines take and how many values each one
//! consumes, which `balance` algorithms exist, and HAProxy's time and size value formats.
//! The base tables hold the keywords of HAProxy 2.6's configuration manual (section numbers
//! are given on each table) that the Debian 2.6.12 build accepts; [`later`] holds what the
//! manuals of 3.0 and 3.2 add and drop, and [`KeywordTables`] puts both together for one
//! target line. Keywords of modules Debian's builds leave out (51Degrees, DeviceAtlas, WURFL,
//! zlib, OpenSSL engines, memory profiling) are absent, and so are directives that a line
//! still recognises only to reject them as removed (`reqadd`, `clitimeout`, `monitor-net`,
//! `nbproc`, ...). The processes test `keyword_tables` holds each line's tables against its
//! manual and its real `haproxy -c`, both ways. Lookups are binary searches over sorted
//! static arrays; a test keeps the arrays sorted. Which words open a section, and which
//! sections 2.6 has, is [`SectionKind`]'s to say; every 2.6 section has a table here.

use super::sections::SectionKind;
use super::versions::{HaproxyVersion, certainly_before, certainly_removed};
use later::{
    ADDED_BIND_PARAMS, ADDED_GLOBAL_KEYWORDS, ADDED_PROXY_KEYWORDS, ADDED_PROXY_OPTIONS,
    ADDED_SERVER_PARAMS, REMOVED_BIND_PARAMS, REMOVED_GLOBAL_KEYWORDS, REMOVED_PROXY_KEYWORDS,
};

mod later;
pub mod samples;

/// How a directive keyword relates to the section it is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeywordStatus {
    /// HAProxy 2.6 accepts the keyword in this section.
    Allowed,
    /// HAProxy 2.6 accepts no such keyword in any section (this includes removed directives
    /// that it recognises only to reject them).
    Unknown,
    /// The keyword exists, but the manual does not list it for this section. HAProxy either
    /// rejects it there (`bind` in `defaults`) or ignores it with a warning (`bind` in a
    /// `backend`).
    NotInSection,
}

/// How many words a `bind` or `server` parameter consumes after its own name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamArity {
    /// A boolean switch such as `check` or `ssl`.
    Flag,
    /// Exactly one value, such as `inter 2s` or `crt /etc/cert.pem`.
    Value,
    /// Exactly this many values. No `bind` or `server` parameter of 2.6 takes more than one.
    Values(u8),
}

/// The event names a proxy's `timeout` directive accepts (manual 4.1, `timeout <event>`).
pub const TIMEOUT_NAMES: &[&str] = &[
    "check",
    "client",
    "client-fin",
    "connect",
    "http-keep-alive",
    "http-request",
    "queue",
    "server",
    "server-fin",
    "tarpit",
    "tunnel",
];

/// Configuration-level directives (manual 2.4 conditional blocks and 2.1 diagnostics) that are
/// valid in every section.
const CONDITIONAL_DIRECTIVES: &[&str] = &[
    ".alert", ".diag", ".elif", ".else", ".endif", ".if", ".notice", ".warning",
];

/// The largest timer HAProxy 2.6 accepts, in milliseconds (2^31 - 1, about 24.8 days).
const MAX_TIMER_MS: u64 = 2_147_483_647;

/// The largest size HAProxy 2.6's size parser accepts: it stores sizes in 32 bits.
const MAX_SIZE_BYTES: u64 = u32::MAX as u64;

// ---------------------------------------------------------------------------------------------
// Proxy sections. Each proxy keyword carries the set of proxy sections it is listed for, one
// bit per column of the manual's keyword matrix.

/// Listed for `defaults` sections (some only for named ones, marked "(!)" in the matrix).
const D: u8 = 1;
/// Listed for `frontend` sections.
const F: u8 = 1 << 1;
/// Listed for `listen` sections.
const L: u8 = 1 << 2;
/// Listed for `backend` sections.
const B: u8 = 1 << 3;
/// Listed for all four proxy section kinds.
const ALL: u8 = D | F | L | B;

/// First words of proxy directives: manual 4.1 (keywords matrix) merged over sub-keywords
/// (`capture cookie`, `timeout client`, ... count for `capture` and `timeout`), completed by
/// the "May be used in sections" lines of 4.2 (`dynamic-cookie-key`, `hash-balance-factor`).
/// Two corrections where 2.6.12 accepts silently what the manual leaves out:
/// `hash-balance-factor` in `listen`, and `unique-id-format`/`unique-id-header` in `backend`
/// (used by health checks).
const PROXY_KEYWORDS: &[(&str, u8)] = &[
    ("acl", ALL),
    ("backlog", D | F | L),
    ("balance", D | L | B),
    ("bind", F | L),
    ("bind-process", ALL),
    ("capture", F | L),
    ("clitcpka-cnt", D | F | L),
    ("clitcpka-idle", D | F | L),
    ("clitcpka-intvl", D | F | L),
    ("compression", ALL),
    ("cookie", D | L | B),
    ("declare", F | L),
    ("default-server", D | L | B),
    ("default_backend", D | F | L),
    ("description", F | L | B),
    ("disabled", ALL),
    ("dispatch", L | B),
    ("dynamic-cookie-key", D | L | B),
    ("email-alert", ALL),
    ("enabled", ALL),
    ("error-log-format", D | F | L),
    ("errorfile", ALL),
    ("errorfiles", ALL),
    ("errorloc", ALL),
    ("errorloc302", ALL),
    ("errorloc303", ALL),
    ("external-check", D | L | B),
    ("filter", F | L | B),
    ("force-persist", L | B),
    ("fullconn", D | L | B),
    ("hash-balance-factor", D | L | B),
    ("hash-type", D | L | B),
    ("http-after-response", ALL),
    ("http-check", D | L | B),
    ("http-error", ALL),
    ("http-request", ALL),
    ("http-response", ALL),
    ("http-reuse", D | L | B),
    ("http-send-name-header", D | L | B),
    ("id", F | L | B),
    ("ignore-persist", L | B),
    ("load-server-state-from-file", D | L | B),
    ("log", ALL),
    ("log-format", D | F | L),
    ("log-format-sd", D | F | L),
    ("log-tag", ALL),
    ("max-keep-alive-queue", D | L | B),
    ("maxconn", D | F | L),
    ("mode", ALL),
    ("monitor", F | L),
    ("monitor-uri", D | F | L),
    ("option", ALL),
    ("persist", D | L | B),
    ("rate-limit", D | F | L),
    ("redirect", F | L | B),
    ("retries", D | L | B),
    ("retry-on", D | L | B),
    ("server", L | B),
    ("server-state-file-name", D | L | B),
    ("server-template", L | B),
    ("source", D | L | B),
    ("srvtcpka-cnt", D | L | B),
    ("srvtcpka-idle", D | L | B),
    ("srvtcpka-intvl", D | L | B),
    ("stats", ALL),
    ("stick", L | B),
    ("stick-table", F | L | B),
    ("tcp-check", D | L | B),
    ("tcp-request", ALL),
    ("tcp-response", D | L | B),
    ("timeout", ALL),
    ("transparent", D | L | B),
    ("unique-id-format", ALL),
    ("unique-id-header", ALL),
    ("use-fcgi-app", L | B),
    ("use-server", L | B),
    ("use_backend", F | L),
];

/// Names of `option <name>` in proxy sections (manual 4.1, with `no option` forms from 4.2).
const PROXY_OPTIONS: &[(&str, u8)] = &[
    ("abortonclose", D | L | B),
    ("accept-invalid-http-request", D | F | L),
    ("accept-invalid-http-response", D | L | B),
    ("allbackups", D | L | B),
    ("checkcache", D | L | B),
    ("clitcpka", D | F | L),
    ("contstats", D | F | L),
    ("disable-h2-upgrade", D | F | L),
    ("dontlog-normal", D | F | L),
    ("dontlognull", D | F | L),
    ("external-check", D | L | B),
    ("forwardfor", ALL),
    ("h1-case-adjust-bogus-client", D | F | L),
    ("h1-case-adjust-bogus-server", D | L | B),
    ("http-buffer-request", ALL),
    ("http-ignore-probes", D | F | L),
    ("http-keep-alive", ALL),
    ("http-no-delay", ALL),
    ("http-pretend-keepalive", D | L | B),
    ("http-restrict-req-hdr-names", ALL),
    ("http-server-close", ALL),
    ("http-use-proxy-header", D | F | L),
    ("httpchk", D | L | B),
    ("httpclose", ALL),
    ("httplog", D | F | L),
    ("httpslog", D | F | L),
    ("idle-close-on-response", D | F | L),
    ("independent-streams", ALL),
    ("ldap-check", D | L | B),
    ("log-health-checks", D | L | B),
    ("log-separate-errors", D | F | L),
    ("logasap", D | F | L),
    ("mysql-check", D | L | B),
    ("nolinger", ALL),
    ("originalto", ALL),
    ("persist", D | L | B),
    ("pgsql-check", D | L | B),
    ("prefer-last-server", D | L | B),
    ("redis-check", D | L | B),
    ("redispatch", D | L | B),
    ("smtpchk", D | L | B),
    ("socket-stats", D | F | L),
    ("splice-auto", ALL),
    ("splice-request", ALL),
    ("splice-response", ALL),
    ("spop-check", D | L | B),
    ("srvtcpka", D | L | B),
    ("ssl-hello-chk", D | L | B),
    ("tcp-check", D | L | B),
    ("tcp-smart-accept", D | F | L),
    ("tcp-smart-connect", D | L | B),
    ("tcpka", ALL),
    ("tcplog", ALL),
    ("transparent", D | L | B),
];

// ---------------------------------------------------------------------------------------------
// Other sections.

/// Manual 3 (global parameters): the keyword list of section 3 and the headings of 3.1
/// (process management and security), 3.2 (performance tuning) and 3.3 (debugging), plus
/// `tune.vars.check-max-size`, which 2.6.12 registers but the manual omits.
const GLOBAL_KEYWORDS: &[&str] = &[
    "busy-polling",
    "ca-base",
    "chroot",
    "close-spread-time",
    "cluster-secret",
    "cpu-map",
    "crt-base",
    "daemon",
    "default-path",
    "description",
    "expose-experimental-directives",
    "external-check",
    "fd-hard-limit",
    "gid",
    "grace",
    "group",
    "h1-accept-payload-with-any-method",
    "h1-case-adjust",
    "h1-case-adjust-file",
    "h2-workaround-bogus-websocket-clients",
    "hard-stop-after",
    "httpclient.resolvers.id",
    "httpclient.resolvers.prefer",
    "httpclient.ssl.ca-file",
    "httpclient.ssl.verify",
    "insecure-fork-wanted",
    "insecure-setuid-wanted",
    "issuers-chain-path",
    "localpeer",
    "log",
    "log-send-hostname",
    "log-tag",
    "lua-load",
    "lua-load-per-thread",
    "lua-prepend-path",
    "master-worker",
    "max-spread-checks",
    "maxcompcpuusage",
    "maxcomprate",
    "maxconn",
    "maxconnrate",
    "maxpipes",
    "maxsessrate",
    "maxsslconn",
    "maxsslrate",
    "maxzlibmem",
    "mworker-max-reloads",
    "nbthread",
    "no-memory-trimming",
    "node",
    "noepoll",
    "noevports",
    "nogetaddrinfo",
    "nokqueue",
    "nopoll",
    "noreuseport",
    "nosplice",
    "numa-cpu-mapping",
    "pidfile",
    "pp2-never-send-local",
    "presetenv",
    "profiling.tasks",
    "quiet",
    "resetenv",
    "server-state-base",
    "server-state-file",
    "set-dumpable",
    "set-var",
    "set-var-fmt",
    "setenv",
    "spread-checks",
    "ssl-default-bind-ciphers",
    "ssl-default-bind-ciphersuites",
    "ssl-default-bind-curves",
    "ssl-default-bind-options",
    "ssl-default-server-ciphers",
    "ssl-default-server-ciphersuites",
    "ssl-default-server-options",
    "ssl-dh-param-file",
    "ssl-load-extra-del-ext",
    "ssl-load-extra-files",
    "ssl-mode-async",
    "ssl-propquery",
    "ssl-provider",
    "ssl-provider-path",
    "ssl-server-verify",
    "ssl-skip-self-issued-ca",
    "stats",
    "strict-limits",
    "thread-group",
    "thread-groups",
    "tune.buffers.limit",
    "tune.buffers.reserve",
    "tune.bufsize",
    "tune.comp.maxlevel",
    "tune.fail-alloc",
    "tune.fd.edge-triggered",
    "tune.h2.header-table-size",
    "tune.h2.initial-window-size",
    "tune.h2.max-concurrent-streams",
    "tune.h2.max-frame-size",
    "tune.http.cookielen",
    "tune.http.logurilen",
    "tune.http.maxhdr",
    "tune.idle-pool.shared",
    "tune.idletimer",
    "tune.listener.multi-queue",
    "tune.lua.forced-yield",
    "tune.lua.maxmem",
    "tune.lua.service-timeout",
    "tune.lua.session-timeout",
    "tune.lua.task-timeout",
    "tune.maxaccept",
    "tune.maxpollevents",
    "tune.maxrewrite",
    "tune.pattern.cache-size",
    "tune.peers.max-updates-at-once",
    "tune.pipesize",
    "tune.pool-high-fd-ratio",
    "tune.pool-low-fd-ratio",
    "tune.rcvbuf.client",
    "tune.rcvbuf.server",
    "tune.recv_enough",
    "tune.runqueue-depth",
    "tune.sched.low-latency",
    "tune.sndbuf.client",
    "tune.sndbuf.server",
    "tune.ssl.cachesize",
    "tune.ssl.capture-buffer-size",
    "tune.ssl.capture-cipherlist-size",
    "tune.ssl.default-dh-param",
    "tune.ssl.force-private-cache",
    "tune.ssl.hard-maxrecord",
    "tune.ssl.keylog",
    "tune.ssl.lifetime",
    "tune.ssl.maxrecord",
    "tune.ssl.ssl-ctx-cache-size",
    "tune.vars.check-max-size",
    "tune.vars.global-max-size",
    "tune.vars.proc-max-size",
    "tune.vars.reqres-max-size",
    "tune.vars.sess-max-size",
    "tune.vars.txn-max-size",
    "uid",
    "ulimit-n",
    "unix-bind",
    "unsetenv",
    "user",
    "zero-warning",
];

/// Manual 3.4 (userlists).
const USERLIST_KEYWORDS: &[&str] = &["group", "user"];

/// Manual 3.5 (peers).
const PEERS_KEYWORDS: &[&str] = &[
    "bind",
    "default-bind",
    "default-server",
    "disabled",
    "enabled",
    "log",
    "peer",
    "server",
    "table",
];

/// Manual 3.6 (mailers).
const MAILERS_KEYWORDS: &[&str] = &["mailer", "timeout"];

/// Manual 3.7 (programs).
const PROGRAM_KEYWORDS: &[&str] = &["command", "group", "option", "user"];

/// Manual 3.8 (HTTP-errors).
const HTTP_ERRORS_KEYWORDS: &[&str] = &["errorfile"];

/// Manual 3.9 (rings).
const RING_KEYWORDS: &[&str] = &[
    "backing-file",
    "description",
    "format",
    "maxlen",
    "server",
    "size",
    "timeout",
];

/// Manual 3.10 (log forwarding).
const LOG_FORWARD_KEYWORDS: &[&str] =
    &["backlog", "bind", "dgram-bind", "log", "maxconn", "timeout"];

/// Manual 5.3.2 (the resolvers section).
const RESOLVERS_KEYWORDS: &[&str] = &[
    "accepted_payload_size",
    "hold",
    "nameserver",
    "parse-resolv-conf",
    "resolve_retries",
    "timeout",
];

/// Manual 6.2.1 (cache section).
const CACHE_KEYWORDS: &[&str] = &[
    "max-age",
    "max-object-size",
    "max-secondary-entries",
    "process-vary",
    "total-max-size",
];

/// Manual 10.1.1 (fcgi-app section).
const FCGI_APP_KEYWORDS: &[&str] = &[
    "acl",
    "docroot",
    "index",
    "log-stderr",
    "option",
    "pass-header",
    "path-info",
    "set-param",
];

/// `namespace_list` section, described in network-namespaces.txt rather than the manual.
const NAMESPACE_LIST_KEYWORDS: &[&str] = &["namespace"];

// ---------------------------------------------------------------------------------------------
// Line parameters.

/// Manual 5.1 (bind options). `quic-cc-algo` and `quic-force-retry` are left out: the Debian
/// build has no QUIC support.
const BIND_PARAMS: &[(&str, ParamArity)] = &[
    ("accept-netscaler-cip", ParamArity::Value),
    ("accept-proxy", ParamArity::Flag),
    ("allow-0rtt", ParamArity::Flag),
    ("alpn", ParamArity::Value),
    ("backlog", ParamArity::Value),
    ("ca-file", ParamArity::Value),
    ("ca-ignore-err", ParamArity::Value),
    ("ca-sign-file", ParamArity::Value),
    ("ca-sign-pass", ParamArity::Value),
    ("ca-verify-file", ParamArity::Value),
    ("ciphers", ParamArity::Value),
    ("ciphersuites", ParamArity::Value),
    ("crl-file", ParamArity::Value),
    ("crt", ParamArity::Value),
    ("crt-ignore-err", ParamArity::Value),
    ("crt-list", ParamArity::Value),
    ("curves", ParamArity::Value),
    ("defer-accept", ParamArity::Flag),
    ("ecdhe", ParamArity::Value),
    ("expose-fd", ParamArity::Value),
    ("force-sslv3", ParamArity::Flag),
    ("force-tlsv10", ParamArity::Flag),
    ("force-tlsv11", ParamArity::Flag),
    ("force-tlsv12", ParamArity::Flag),
    ("force-tlsv13", ParamArity::Flag),
    ("generate-certificates", ParamArity::Flag),
    ("gid", ParamArity::Value),
    ("group", ParamArity::Value),
    ("id", ParamArity::Value),
    ("interface", ParamArity::Value),
    ("level", ParamArity::Value),
    ("maxconn", ParamArity::Value),
    ("mode", ParamArity::Value),
    ("mss", ParamArity::Value),
    ("name", ParamArity::Value),
    ("namespace", ParamArity::Value),
    ("nice", ParamArity::Value),
    ("no-ca-names", ParamArity::Flag),
    ("no-sslv3", ParamArity::Flag),
    ("no-tls-tickets", ParamArity::Flag),
    ("no-tlsv10", ParamArity::Flag),
    ("no-tlsv11", ParamArity::Flag),
    ("no-tlsv12", ParamArity::Flag),
    ("no-tlsv13", ParamArity::Flag),
    ("npn", ParamArity::Value),
    ("prefer-client-ciphers", ParamArity::Flag),
    ("process", ParamArity::Value),
    ("proto", ParamArity::Value),
    ("severity-output", ParamArity::Value),
    ("shards", ParamArity::Value),
    ("ssl", ParamArity::Flag),
    ("ssl-max-ver", ParamArity::Value),
    ("ssl-min-ver", ParamArity::Value),
    ("strict-sni", ParamArity::Flag),
    ("tcp-ut", ParamArity::Value),
    ("tfo", ParamArity::Flag),
    ("thread", ParamArity::Value),
    ("tls-ticket-keys", ParamArity::Value),
    ("transparent", ParamArity::Flag),
    ("uid", ParamArity::Value),
    ("user", ParamArity::Value),
    ("v4v6", ParamArity::Flag),
    ("v6only", ParamArity::Flag),
    ("verify", ParamArity::Value),
];

/// Manual 5.2 (server and default-server options). `no-verifyhost` is documented but unknown
/// to 2.6.12 and left out; `no-check-send-proxy` is accepted but undocumented. `usesrc` and
/// `interface` are only valid after `source <addr>`, whose parser consumes them.
const SERVER_PARAMS: &[(&str, ParamArity)] = &[
    ("addr", ParamArity::Value),
    ("agent-addr", ParamArity::Value),
    ("agent-check", ParamArity::Flag),
    ("agent-inter", ParamArity::Value),
    ("agent-port", ParamArity::Value),
    ("agent-send", ParamArity::Value),
    ("allow-0rtt", ParamArity::Flag),
    ("alpn", ParamArity::Value),
    ("backup", ParamArity::Flag),
    ("ca-file", ParamArity::Value),
    ("check", ParamArity::Flag),
    ("check-alpn", ParamArity::Value),
    ("check-proto", ParamArity::Value),
    ("check-send-proxy", ParamArity::Flag),
    ("check-sni", ParamArity::Value),
    ("check-ssl", ParamArity::Flag),
    ("check-via-socks4", ParamArity::Flag),
    ("ciphers", ParamArity::Value),
    ("ciphersuites", ParamArity::Value),
    ("cookie", ParamArity::Value),
    ("crl-file", ParamArity::Value),
    ("crt", ParamArity::Value),
    ("disabled", ParamArity::Flag),
    ("downinter", ParamArity::Value),
    ("enabled", ParamArity::Flag),
    ("error-limit", ParamArity::Value),
    ("fall", ParamArity::Value),
    ("fastinter", ParamArity::Value),
    ("force-sslv3", ParamArity::Flag),
    ("force-tlsv10", ParamArity::Flag),
    ("force-tlsv11", ParamArity::Flag),
    ("force-tlsv12", ParamArity::Flag),
    ("force-tlsv13", ParamArity::Flag),
    ("id", ParamArity::Value),
    ("init-addr", ParamArity::Value),
    ("inter", ParamArity::Value),
    ("log-proto", ParamArity::Value),
    ("max-reuse", ParamArity::Value),
    ("maxconn", ParamArity::Value),
    ("maxqueue", ParamArity::Value),
    ("minconn", ParamArity::Value),
    ("namespace", ParamArity::Value),
    ("no-agent-check", ParamArity::Flag),
    ("no-backup", ParamArity::Flag),
    ("no-check", ParamArity::Flag),
    ("no-check-send-proxy", ParamArity::Flag),
    ("no-check-ssl", ParamArity::Flag),
    ("no-send-proxy", ParamArity::Flag),
    ("no-send-proxy-v2", ParamArity::Flag),
    ("no-send-proxy-v2-ssl", ParamArity::Flag),
    ("no-send-proxy-v2-ssl-cn", ParamArity::Flag),
    ("no-ssl", ParamArity::Flag),
    ("no-ssl-reuse", ParamArity::Flag),
    ("no-sslv3", ParamArity::Flag),
    ("no-tfo", ParamArity::Flag),
    ("no-tls-tickets", ParamArity::Flag),
    ("no-tlsv10", ParamArity::Flag),
    ("no-tlsv11", ParamArity::Flag),
    ("no-tlsv12", ParamArity::Flag),
    ("no-tlsv13", ParamArity::Flag),
    ("non-stick", ParamArity::Flag),
    ("npn", ParamArity::Value),
    ("observe", ParamArity::Value),
    ("on-error", ParamArity::Value),
    ("on-marked-down", ParamArity::Value),
    ("on-marked-up", ParamArity::Value),
    ("pool-low-conn", ParamArity::Value),
    ("pool-max-conn", ParamArity::Value),
    ("pool-purge-delay", ParamArity::Value),
    ("port", ParamArity::Value),
    ("proto", ParamArity::Value),
    ("proxy-v2-options", ParamArity::Value),
    ("redir", ParamArity::Value),
    ("resolve-net", ParamArity::Value),
    ("resolve-opts", ParamArity::Value),
    ("resolve-prefer", ParamArity::Value),
    ("resolvers", ParamArity::Value),
    ("rise", ParamArity::Value),
    ("send-proxy", ParamArity::Flag),
    ("send-proxy-v2", ParamArity::Flag),
    ("send-proxy-v2-ssl", ParamArity::Flag),
    ("send-proxy-v2-ssl-cn", ParamArity::Flag),
    ("slowstart", ParamArity::Value),
    ("sni", ParamArity::Value),
    ("socks4", ParamArity::Value),
    ("source", ParamArity::Value),
    ("ssl", ParamArity::Flag),
    ("ssl-max-ver", ParamArity::Value),
    ("ssl-min-ver", ParamArity::Value),
    ("ssl-reuse", ParamArity::Flag),
    ("stick", ParamArity::Flag),
    ("tcp-ut", ParamArity::Value),
    ("tfo", ParamArity::Flag),
    ("tls-tickets", ParamArity::Flag),
    ("track", ParamArity::Value),
    ("usesrc", ParamArity::Value),
    ("verify", ParamArity::Value),
    ("verifyhost", ParamArity::Value),
    ("weight", ParamArity::Value),
    ("ws", ParamArity::Value),
];

// ---------------------------------------------------------------------------------------------
// Lookups.

/// The keyword table of one section kind.
#[derive(Debug, Clone, Copy)]
enum SectionTable {
    /// A proxy section: the bit of its column in the keyword matrix.
    Proxy(u8),
    /// Any other section: its sorted 2.6 keywords, what later lines added and removed, and
    /// whether HAProxy lets `no` prefix a directive there (`no option ...`, `no log`,
    /// `no busy-polling`).
    Plain {
        keywords: &'static [&'static str],
        added: &'static [(&'static str, HaproxyVersion)],
        removed: &'static [(&'static str, HaproxyVersion)],
        accepts_no: bool,
    },
}

impl SectionTable {
    /// The table of a section kind, or `None` for one HAProxy 2.6 does not have.
    fn of(kind: SectionKind) -> Option<SectionTable> {
        let plain = |keywords, accepts_no| {
            Some(SectionTable::Plain {
                keywords,
                added: &[],
                removed: &[],
                accepts_no,
            })
        };
        match kind {
            SectionKind::Defaults => Some(SectionTable::Proxy(D)),
            SectionKind::Frontend => Some(SectionTable::Proxy(F)),
            SectionKind::Listen => Some(SectionTable::Proxy(L)),
            SectionKind::Backend => Some(SectionTable::Proxy(B)),
            SectionKind::Global => Some(SectionTable::Plain {
                keywords: GLOBAL_KEYWORDS,
                added: ADDED_GLOBAL_KEYWORDS,
                removed: REMOVED_GLOBAL_KEYWORDS,
                accepts_no: true,
            }),
            SectionKind::Userlist => plain(USERLIST_KEYWORDS, false),
            SectionKind::Peers => plain(PEERS_KEYWORDS, true),
            SectionKind::Resolvers => plain(RESOLVERS_KEYWORDS, false),
            SectionKind::Mailers => plain(MAILERS_KEYWORDS, false),
            SectionKind::Program => plain(PROGRAM_KEYWORDS, true),
            SectionKind::HttpErrors => plain(HTTP_ERRORS_KEYWORDS, false),
            SectionKind::Ring => plain(RING_KEYWORDS, false),
            SectionKind::Cache => plain(CACHE_KEYWORDS, false),
            SectionKind::LogForward => plain(LOG_FORWARD_KEYWORDS, true),
            SectionKind::FcgiApp => plain(FCGI_APP_KEYWORDS, true),
            SectionKind::NamespaceList => plain(NAMESPACE_LIST_KEYWORDS, false),
            SectionKind::CrtStore
            | SectionKind::Traces
            | SectionKind::Acme
            | SectionKind::LogProfile => None,
        }
    }

    /// The table of the section whose header keyword is `section`, if there is one.
    fn named(section: &str) -> Option<SectionTable> {
        SectionKind::from_keyword(section).and_then(SectionTable::of)
    }
}

/// The value paired with `key` in a table sorted by key.
fn lookup_pair<T: Copy>(table: &[(&str, T)], key: &str) -> Option<T> {
    table
        .binary_search_by(|(candidate, _)| (*candidate).cmp(key))
        .ok()
        .and_then(|index| table.get(index))
        .map(|(_, value)| *value)
}

/// The keyword tables as they stand for one HAProxy line: HAProxy 2.6's, with what later
/// lines added from the first documented line that lists it and without what they removed
/// ([`later`]). A line between two documented ones has what either of them has (nothing is
/// refused that it may have). Every lookup of the schema check and the view goes through
/// one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeywordTables {
    target: HaproxyVersion,
}

impl KeywordTables {
    /// The tables of HAProxy `target`.
    pub const fn new(target: HaproxyVersion) -> KeywordTables {
        KeywordTables { target }
    }

    /// The line these tables describe.
    pub fn target(self) -> HaproxyVersion {
        self.target
    }

    /// Whether an item first listed by the manual of `since` may be present.
    fn has_added(self, since: HaproxyVersion) -> bool {
        !certainly_before(self.target, since)
    }

    /// Whether `word` is still present: not in `removed` for a line that certainly
    /// dropped it.
    fn keeps(self, word: &str, removed: &[(&str, HaproxyVersion)]) -> bool {
        !removed
            .iter()
            .any(|(item, gone)| *item == word && certainly_removed(self.target, *gone))
    }

    /// A value of a 2.6 table or of its later additions, as the target has it.
    fn lookup<T: Copy>(
        self,
        base: &[(&str, T)],
        added: &[(&'static str, T, HaproxyVersion)],
        removed: &[(&str, HaproxyVersion)],
        word: &str,
    ) -> Option<T> {
        lookup_pair(base, word)
            .or_else(|| {
                added
                    .iter()
                    .find(|(item, _, since)| *item == word && self.has_added(*since))
                    .map(|(_, value, _)| *value)
            })
            .filter(|_| self.keeps(word, removed))
    }

    /// Every word of a 2.6 table and its later additions that the target has.
    fn words<T: Copy>(
        self,
        base: &'static [(&'static str, T)],
        added: &'static [(&'static str, T, HaproxyVersion)],
        removed: &'static [(&'static str, HaproxyVersion)],
    ) -> Vec<(&'static str, T)> {
        let mut words: Vec<(&'static str, T)> = base
            .iter()
            .copied()
            .chain(
                added
                    .iter()
                    .filter(|(_, _, since)| self.has_added(*since))
                    .map(|(word, value, _)| (*word, *value)),
            )
            .filter(|(word, _)| self.keeps(word, removed))
            .collect();
        words.sort_by_key(|(word, _)| *word);
        words
    }

    /// The columns of the keyword matrix a proxy directive is listed for.
    fn proxy_columns(self, keyword: &str) -> Option<u8> {
        self.lookup(
            PROXY_KEYWORDS,
            ADDED_PROXY_KEYWORDS,
            REMOVED_PROXY_KEYWORDS,
            keyword,
        )
    }

    /// Whether the section accepts `keyword` as the first word of a directive. Proxy
    /// sections also accept the `no` and `default` prefixes.
    fn allows(self, table: SectionTable, keyword: &str) -> bool {
        match table {
            SectionTable::Proxy(column) => {
                keyword == "no"
                    || keyword == "default"
                    || self
                        .proxy_columns(keyword)
                        .is_some_and(|columns| columns & column != 0)
            }
            SectionTable::Plain {
                keywords,
                added,
                removed,
                accepts_no,
            } => {
                (accepts_no && keyword == "no")
                    || ((keywords.binary_search(&keyword).is_ok()
                        || added
                            .iter()
                            .any(|(item, since)| *item == keyword && self.has_added(*since)))
                        && self.keeps(keyword, removed))
            }
        }
    }

    /// Every keyword the section accepts, prefixes left out, sorted.
    fn table_keywords(self, table: SectionTable) -> Vec<&'static str> {
        let mut keywords: Vec<&'static str> = match table {
            SectionTable::Proxy(column) => self
                .words(PROXY_KEYWORDS, ADDED_PROXY_KEYWORDS, REMOVED_PROXY_KEYWORDS)
                .into_iter()
                .filter(|(_, columns)| columns & column != 0)
                .map(|(keyword, _)| keyword)
                .collect(),
            SectionTable::Plain {
                keywords,
                added,
                removed,
                ..
            } => keywords
                .iter()
                .copied()
                .chain(
                    added
                        .iter()
                        .filter(|(_, since)| self.has_added(*since))
                        .map(|(keyword, _)| *keyword),
                )
                .filter(|keyword| self.keeps(keyword, removed))
                .collect(),
        };
        keywords.sort_unstable();
        keywords
    }

    /// Whether `keyword` starts a directive in the section kind `section`. Conditional-block
    /// and diagnostic directives (`.if`, `.endif`, `.notice`, ...) are allowed everywhere,
    /// and a section kind without a table allows everything, so that the check never
    /// rejects what it cannot judge.
    pub fn section_keyword(self, section: &str, keyword: &str) -> KeywordStatus {
        if CONDITIONAL_DIRECTIVES.contains(&keyword) {
            return KeywordStatus::Allowed;
        }
        let Some(table) = SectionTable::named(section) else {
            return KeywordStatus::Allowed;
        };
        if self.allows(table, keyword) {
            KeywordStatus::Allowed
        } else if SectionKind::ALL
            .iter()
            .filter_map(|other| SectionTable::of(*other))
            .any(|other| self.allows(other, keyword))
        {
            KeywordStatus::NotInSection
        } else {
            KeywordStatus::Unknown
        }
    }

    /// Every directive keyword a section kind accepts on the target (prefixes and
    /// conditional directives left out), sorted; empty for a kind without a table.
    pub fn section_keywords(self, kind: SectionKind) -> Vec<&'static str> {
        SectionTable::of(kind).map_or_else(Vec::new, |table| self.table_keywords(table))
    }

    /// Whether `option <name>` is allowed in the proxy section kind `section` (manual
    /// 4.1). Sections other than the four proxy kinds keep their own options and get
    /// `Allowed`.
    pub fn proxy_option(self, section: &str, option: &str) -> KeywordStatus {
        let Some(SectionTable::Proxy(column)) = SectionTable::named(section) else {
            return KeywordStatus::Allowed;
        };
        match self.lookup(PROXY_OPTIONS, ADDED_PROXY_OPTIONS, &[], option) {
            Some(columns) if columns & column != 0 => KeywordStatus::Allowed,
            Some(_) => KeywordStatus::NotInSection,
            None => KeywordStatus::Unknown,
        }
    }

    /// Every `option` name a proxy section kind accepts on the target, sorted.
    pub fn proxy_options(self, kind: SectionKind) -> Vec<&'static str> {
        let Some(SectionTable::Proxy(column)) = SectionTable::of(kind) else {
            return Vec::new();
        };
        self.words(PROXY_OPTIONS, ADDED_PROXY_OPTIONS, &[])
            .into_iter()
            .filter(|(_, columns)| columns & column != 0)
            .map(|(option, _)| option)
            .collect()
    }

    /// The keyword allowed in `section` that is closest to `keyword` by edit distance
    /// (ignoring case), for a "did you mean" hint. `None` when `keyword` is itself allowed,
    /// when the section has no table, or when nothing is close ([`crate::pure::suggest`]'s
    /// rule: at most a third of the longer word's characters may differ).
    pub fn suggest(self, section: &str, keyword: &str) -> Option<&'static str> {
        let table = SectionTable::named(section)?;
        if keyword.is_empty() || self.allows(table, keyword) {
            return None;
        }
        crate::pure::suggest::closest(keyword, self.table_keywords(table))
    }

    /// How many values the `server`/`default-server` parameter `word` takes, or `None` if
    /// the target has no such parameter. The same parameters serve `server` lines in
    /// `peers` and `ring` sections and `server-template`.
    pub fn server_param(self, word: &str) -> Option<ParamArity> {
        // A parameter written with an argument in parentheses (`set-proxy-v2-tlv-fmt(0x20)`)
        // is looked up by its name.
        let name = word.split_once('(').map_or(word, |(name, _)| name);
        self.lookup(SERVER_PARAMS, ADDED_SERVER_PARAMS, &[], name)
    }

    /// Every `server` parameter the target has, sorted.
    pub fn server_params(self) -> Vec<&'static str> {
        let params = self.words(SERVER_PARAMS, ADDED_SERVER_PARAMS, &[]);
        params.into_iter().map(|(param, _)| param).collect()
    }

    /// How many values the `bind` parameter `word` takes, or `None` if the target (as built
    /// by Debian) has no such parameter.
    pub fn bind_param(self, word: &str) -> Option<ParamArity> {
        self.lookup(BIND_PARAMS, ADDED_BIND_PARAMS, REMOVED_BIND_PARAMS, word)
    }

    /// Every `bind` parameter the target has, sorted.
    pub fn bind_params(self) -> Vec<&'static str> {
        let params = self.words(BIND_PARAMS, ADDED_BIND_PARAMS, REMOVED_BIND_PARAMS);
        params.into_iter().map(|(param, _)| param).collect()
    }
}

/// Whether `word`, the first argument of `balance`, names a load-balancing algorithm
/// (manual 4.2 `balance`). Forms with parentheses must be complete: `hdr(<name>)` and
/// `rdp-cookie(<name>)` need a name, `random(<draws>)` takes digits only (or nothing).
/// The arguments that follow some algorithms (`url_param <param>`, `hash <expr>`) are
/// separate words and not judged here.
pub fn is_balance_algorithm(word: &str) -> bool {
    match word {
        "roundrobin" | "static-rr" | "leastconn" | "first" | "source" | "uri" | "url_param"
        | "hash" | "random" | "rdp-cookie" => true,
        _ => {
            let Some((name, rest)) = word.split_once('(') else {
                return false;
            };
            let Some(argument) = rest.strip_suffix(')') else {
                return false;
            };
            match name {
                "hdr" | "rdp-cookie" => !argument.is_empty() && !argument.contains([')', '(']),
                "random" => argument.bytes().all(|byte| byte.is_ascii_digit()),
                _ => false,
            }
        }
    }
}

/// Splits `text` into its leading ASCII digits, read as a number, and the rest. `None` when
/// there is no digit or the number does not fit in 64 bits.
fn leading_number(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (number, rest) = text.split_at(digits);
    number.parse().ok().map(|value| (value, rest))
}

/// A time value in milliseconds (manual 2.5): an integer, then optionally one of the units
/// `us`, `ms`, `s`, `m`, `h`, `d`; no unit means milliseconds. Microseconds round up to the
/// next millisecond as HAProxy does. `None` for anything else, including values above
/// HAProxy's timer limit of 2^31 - 1 ms; note that 2.6 itself only warns about stray
/// characters after a unit (`10sec`), which this function rejects.
pub fn parse_time_ms(text: &str) -> Option<u64> {
    let (value, unit) = leading_number(text)?;
    let milliseconds = match unit {
        "" | "ms" => Some(value),
        "us" => Some(value.div_ceil(1000)),
        "s" => value.checked_mul(1000),
        "m" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        "d" => value.checked_mul(86_400_000),
        _ => None,
    }?;
    (milliseconds <= MAX_TIMER_MS).then_some(milliseconds)
}

/// A size in bytes: an integer, then optionally `k`, `m` or `g` in either case (powers of
/// 1024). `None` for anything else and for sizes of 4 GiB or more, which overflow HAProxy's
/// 32-bit size parser.
pub fn parse_size_bytes(text: &str) -> Option<u64> {
    let (value, suffix) = leading_number(text)?;
    let multiplier: u64 = match suffix {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        _ => return None,
    };
    value
        .checked_mul(multiplier)
        .filter(|bytes| *bytes <= MAX_SIZE_BYTES)
}

#[cfg(test)]
mod tests;
