//! Keyword tables of HAProxy 2.6 for the schema check: which directives each configuration
//! section accepts, which parameters `bind` and `server` lines take and how many values each
//! one consumes, which `balance` algorithms exist, and HAProxy's time and size value formats.
//! The tables hold the keywords of HAProxy 2.6's configuration manual (section numbers are
//! given on each table) that the Debian 2.6.12 build accepts. Keywords of modules that build
//! leaves out (51Degrees, DeviceAtlas, WURFL, QUIC, zlib, OpenSSL engines, memory profiling)
//! are absent, and so are directives that 2.6 still recognises only to reject them as removed
//! (`reqadd`, `clitimeout`, `monitor-net`, `nbproc`, ...). Lookups are binary searches over
//! sorted static arrays; a test keeps the arrays sorted. Which words open a section, and
//! which sections 2.6 has, is [`SectionKind`]'s to say; every 2.6 section has a table here.

use super::sections::SectionKind;

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
    ("interface", ParamArity::Value),
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
    /// Any other section: its sorted keywords, and whether HAProxy lets `no` prefix a
    /// directive there (`no option ...`, `no log`, `no busy-polling`).
    Plain {
        keywords: &'static [&'static str],
        accepts_no: bool,
    },
}

impl SectionTable {
    /// The table of a section kind, or `None` for one HAProxy 2.6 does not have.
    fn of(kind: SectionKind) -> Option<SectionTable> {
        let plain = |keywords, accepts_no| {
            Some(SectionTable::Plain {
                keywords,
                accepts_no,
            })
        };
        match kind {
            SectionKind::Defaults => Some(SectionTable::Proxy(D)),
            SectionKind::Frontend => Some(SectionTable::Proxy(F)),
            SectionKind::Listen => Some(SectionTable::Proxy(L)),
            SectionKind::Backend => Some(SectionTable::Proxy(B)),
            SectionKind::Global => plain(GLOBAL_KEYWORDS, true),
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

    /// Whether the section accepts `keyword` as the first word of a directive. Proxy
    /// sections also accept the `no` and `default` prefixes.
    fn allows(self, keyword: &str) -> bool {
        match self {
            SectionTable::Proxy(column) => {
                keyword == "no"
                    || keyword == "default"
                    || lookup_pair(PROXY_KEYWORDS, keyword)
                        .is_some_and(|columns| columns & column != 0)
            }
            SectionTable::Plain {
                keywords,
                accepts_no,
            } => (accepts_no && keyword == "no") || keywords.binary_search(&keyword).is_ok(),
        }
    }

    /// Every keyword the section accepts, prefixes left out.
    fn keywords(self) -> impl Iterator<Item = &'static str> {
        let (column, plain): (u8, &'static [&'static str]) = match self {
            SectionTable::Proxy(column) => (column, &[]),
            SectionTable::Plain { keywords, .. } => (0, keywords),
        };
        PROXY_KEYWORDS
            .iter()
            .filter(move |(_, columns)| columns & column != 0)
            .map(|(keyword, _)| *keyword)
            .chain(plain.iter().copied())
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

/// Whether `keyword` starts a directive in the section kind `section`. Conditional-block and
/// diagnostic directives (`.if`, `.endif`, `.notice`, ...) are allowed everywhere, and a
/// section kind without a table allows everything, so that the check never rejects what it
/// cannot judge.
pub fn section_keyword_allowed(section: &str, keyword: &str) -> KeywordStatus {
    if CONDITIONAL_DIRECTIVES.contains(&keyword) {
        return KeywordStatus::Allowed;
    }
    let Some(table) = SectionTable::named(section) else {
        return KeywordStatus::Allowed;
    };
    if table.allows(keyword) {
        KeywordStatus::Allowed
    } else if SectionKind::ALL
        .iter()
        .filter_map(|other| SectionTable::of(*other))
        .any(|other| other.allows(keyword))
    {
        KeywordStatus::NotInSection
    } else {
        KeywordStatus::Unknown
    }
}

/// Whether `option <name>` is allowed in the proxy section kind `section` (manual 4.1).
/// Sections other than the four proxy kinds keep their own options and get `Allowed`.
pub fn proxy_option_status(section: &str, option: &str) -> KeywordStatus {
    let Some(SectionTable::Proxy(column)) = SectionTable::named(section) else {
        return KeywordStatus::Allowed;
    };
    match lookup_pair(PROXY_OPTIONS, option) {
        Some(columns) if columns & column != 0 => KeywordStatus::Allowed,
        Some(_) => KeywordStatus::NotInSection,
        None => KeywordStatus::Unknown,
    }
}

/// The keyword allowed in `section` that is closest to `keyword` by edit distance (ignoring
/// case), for a "did you mean" hint. `None` when `keyword` is itself allowed, when the
/// section has no table, or when nothing is close: at most a third of the longer word's
/// characters may differ.
pub fn suggest_keyword(section: &str, keyword: &str) -> Option<&'static str> {
    let table = SectionTable::named(section)?;
    if keyword.is_empty() || table.allows(keyword) {
        return None;
    }
    let wanted = keyword.to_ascii_lowercase();
    table
        .keywords()
        .map(|candidate| (edit_distance(&wanted, candidate), candidate))
        .filter(|(distance, candidate)| distance * 3 <= wanted.len().max(candidate.len()))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance between two words, counted in bytes (keywords are ASCII).
fn edit_distance(left: &str, right: &str) -> usize {
    let right = right.as_bytes();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    let mut current = vec![0; right.len() + 1];
    for (i, left_byte) in left.bytes().enumerate() {
        current[0] = i + 1;
        for (j, right_byte) in right.iter().enumerate() {
            let substitution = previous[j] + usize::from(left_byte != *right_byte);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[right.len()]
}

/// How many values the `server`/`default-server` parameter `word` takes, or `None` if
/// HAProxy 2.6 has no such parameter. The same parameters serve `server` lines in `peers`
/// and `ring` sections and `server-template`.
pub fn is_server_param(word: &str) -> Option<ParamArity> {
    lookup_pair(SERVER_PARAMS, word)
}

/// How many values the `bind` parameter `word` takes, or `None` if HAProxy 2.6 (as built by
/// Debian) has no such parameter.
pub fn is_bind_param(word: &str) -> Option<ParamArity> {
    lookup_pair(BIND_PARAMS, word)
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
mod tests {
    use super::*;

    /// The HAProxy configuration corpus shared by haptor's helpers.
    const CORPUS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/haproxy/");

    /// `.if` conditions found in the corpus that hold for Debian's 2.6.12 build (threads,
    /// OpenSSL 3.0). Lines under any other condition are skipped: they may use newer keywords.
    const CONDITIONS_TRUE_ON_DEBIAN_2_6: &[&str] = &[
        "feature(THREAD)",
        "!ssllib_name_startswith(AWS-LC)",
        "openssl_version_atleast(1.1.1)",
        "openssl_version_atleast(3.0.0)",
    ];

    fn assert_sorted_and_unique(name: &str, keys: &[&str]) {
        for pair in keys.windows(2) {
            assert!(
                pair[0] < pair[1],
                "{name}: {:?} must sort before {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn every_table_is_sorted_without_duplicates_so_binary_search_finds_every_entry() {
        let plain: &[(&str, &[&str])] = &[
            ("GLOBAL_KEYWORDS", GLOBAL_KEYWORDS),
            ("USERLIST_KEYWORDS", USERLIST_KEYWORDS),
            ("PEERS_KEYWORDS", PEERS_KEYWORDS),
            ("MAILERS_KEYWORDS", MAILERS_KEYWORDS),
            ("PROGRAM_KEYWORDS", PROGRAM_KEYWORDS),
            ("HTTP_ERRORS_KEYWORDS", HTTP_ERRORS_KEYWORDS),
            ("RING_KEYWORDS", RING_KEYWORDS),
            ("LOG_FORWARD_KEYWORDS", LOG_FORWARD_KEYWORDS),
            ("RESOLVERS_KEYWORDS", RESOLVERS_KEYWORDS),
            ("CACHE_KEYWORDS", CACHE_KEYWORDS),
            ("FCGI_APP_KEYWORDS", FCGI_APP_KEYWORDS),
            ("NAMESPACE_LIST_KEYWORDS", NAMESPACE_LIST_KEYWORDS),
            ("TIMEOUT_NAMES", TIMEOUT_NAMES),
        ];
        for (name, keys) in plain {
            assert_sorted_and_unique(name, keys);
        }
        let keys = |table: &[(&'static str, u8)]| table.iter().map(|(k, _)| *k).collect::<Vec<_>>();
        assert_sorted_and_unique("PROXY_KEYWORDS", &keys(PROXY_KEYWORDS));
        assert_sorted_and_unique("PROXY_OPTIONS", &keys(PROXY_OPTIONS));
        let keys = |table: &[(&'static str, ParamArity)]| {
            table.iter().map(|(k, _)| *k).collect::<Vec<_>>()
        };
        assert_sorted_and_unique("BIND_PARAMS", &keys(BIND_PARAMS));
        assert_sorted_and_unique("SERVER_PARAMS", &keys(SERVER_PARAMS));
    }

    #[test]
    fn every_section_kind_of_haproxy_2_6_has_a_keyword_table() {
        let without_table: Vec<SectionKind> = SectionKind::ALL
            .iter()
            .copied()
            .filter(|kind| kind.in_haproxy_2_6() && SectionTable::of(*kind).is_none())
            .collect();
        assert!(without_table.is_empty(), "no table for {without_table:?}");
        let later_with_table: Vec<SectionKind> = SectionKind::ALL
            .iter()
            .copied()
            .filter(|kind| !kind.in_haproxy_2_6() && SectionTable::of(*kind).is_some())
            .collect();
        assert!(
            later_with_table.is_empty(),
            "2.6 has no {later_with_table:?} section"
        );
    }

    #[test]
    fn every_proxy_keyword_and_option_belongs_to_at_least_one_section() {
        for (keyword, columns) in PROXY_KEYWORDS.iter().chain(PROXY_OPTIONS) {
            assert!(columns & ALL != 0, "{keyword} is allowed nowhere");
        }
    }

    #[test]
    fn bind_is_allowed_in_a_frontend_but_not_in_a_backend_or_defaults() {
        assert_eq!(
            section_keyword_allowed("frontend", "bind"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("listen", "bind"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("backend", "bind"),
            KeywordStatus::NotInSection
        );
        assert_eq!(
            section_keyword_allowed("defaults", "bind"),
            KeywordStatus::NotInSection
        );
    }

    #[test]
    fn server_lines_belong_to_backends_listens_peers_and_rings_only() {
        for section in ["backend", "listen", "peers", "ring"] {
            assert_eq!(
                section_keyword_allowed(section, "server"),
                KeywordStatus::Allowed,
                "{section}"
            );
        }
        for section in ["frontend", "defaults", "global", "resolvers"] {
            assert_eq!(
                section_keyword_allowed(section, "server"),
                KeywordStatus::NotInSection,
                "{section}"
            );
        }
    }

    #[test]
    fn a_global_keyword_written_in_a_frontend_is_not_in_section() {
        assert_eq!(
            section_keyword_allowed("global", "nbthread"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("frontend", "nbthread"),
            KeywordStatus::NotInSection
        );
    }

    #[test]
    fn an_invented_keyword_is_unknown_everywhere() {
        for section in [
            "global", "defaults", "frontend", "backend", "listen", "peers", "cache",
        ] {
            assert_eq!(
                section_keyword_allowed(section, "frobnicate"),
                KeywordStatus::Unknown
            );
        }
    }

    #[test]
    fn directives_that_2_6_only_recognises_to_reject_are_unknown() {
        for keyword in [
            "reqadd",
            "rspdel",
            "block",
            "clitimeout",
            "monitor-net",
            "redispatch",
        ] {
            assert_eq!(
                section_keyword_allowed("listen", keyword),
                KeywordStatus::Unknown,
                "{keyword}"
            );
        }
        assert_eq!(
            section_keyword_allowed("global", "nbproc"),
            KeywordStatus::Unknown
        );
    }

    #[test]
    fn modules_missing_from_the_debian_build_have_unknown_keywords() {
        for keyword in [
            "51degrees-data-file",
            "wurfl-data-file",
            "tune.quic.retry-threshold",
            "tune.zlib.memlevel",
        ] {
            assert_eq!(
                section_keyword_allowed("global", keyword),
                KeywordStatus::Unknown,
                "{keyword}"
            );
        }
        assert_eq!(
            section_keyword_allowed("global", "lua-load"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("global", "lua-prepend-path"),
            KeywordStatus::Allowed
        );
    }

    #[test]
    fn deprecated_but_accepted_keywords_stay_allowed() {
        assert_eq!(
            section_keyword_allowed("frontend", "bind-process"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("backend", "transparent"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("global", "tune.ssl.capture-cipherlist-size"),
            KeywordStatus::Allowed
        );
    }

    #[test]
    fn sections_without_a_table_allow_every_keyword() {
        assert_eq!(
            section_keyword_allowed("spoe-agent", "frobnicate"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("", "frobnicate"),
            KeywordStatus::Allowed
        );
    }

    #[test]
    fn conditional_block_directives_are_allowed_in_every_section() {
        for section in ["global", "frontend", "userlist", "cache"] {
            for directive in [".if", ".elif", ".else", ".endif", ".notice"] {
                assert_eq!(
                    section_keyword_allowed(section, directive),
                    KeywordStatus::Allowed
                );
            }
        }
        assert_eq!(
            section_keyword_allowed("frontend", ".iff"),
            KeywordStatus::Unknown
        );
    }

    #[test]
    fn the_no_and_default_prefixes_are_allowed_only_where_haproxy_takes_them() {
        assert_eq!(
            section_keyword_allowed("frontend", "no"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("defaults", "default"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("global", "no"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            section_keyword_allowed("program", "no"),
            KeywordStatus::Allowed
        );
        assert_ne!(
            section_keyword_allowed("userlist", "no"),
            KeywordStatus::Allowed
        );
        assert_ne!(
            section_keyword_allowed("global", "default"),
            KeywordStatus::Allowed
        );
    }

    #[test]
    fn options_follow_the_keyword_matrix_columns() {
        assert_eq!(
            proxy_option_status("frontend", "httplog"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            proxy_option_status("backend", "httplog"),
            KeywordStatus::NotInSection
        );
        assert_eq!(
            proxy_option_status("backend", "httpchk"),
            KeywordStatus::Allowed
        );
        assert_eq!(
            proxy_option_status("frontend", "httpchk"),
            KeywordStatus::NotInSection
        );
        assert_eq!(
            proxy_option_status("listen", "http-tunnel"),
            KeywordStatus::Unknown
        );
        assert_eq!(
            proxy_option_status("fcgi-app", "keep-conn"),
            KeywordStatus::Allowed
        );
    }

    #[test]
    fn a_misspelt_keyword_gets_the_nearest_keyword_of_its_section() {
        assert_eq!(suggest_keyword("global", "maxconnn"), Some("maxconn"));
        assert_eq!(
            suggest_keyword("frontend", "use-backend"),
            Some("use_backend")
        );
        assert_eq!(suggest_keyword("backend", "timout"), Some("timeout"));
        assert_eq!(suggest_keyword("backend", "Balance"), Some("balance"));
        assert_eq!(
            suggest_keyword("resolvers", "nameservers"),
            Some("nameserver")
        );
    }

    #[test]
    fn no_suggestion_is_made_for_allowed_or_unrelated_words() {
        assert_eq!(suggest_keyword("global", "maxconn"), None);
        assert_eq!(suggest_keyword("frontend", "zzzzzzzz"), None);
        assert_eq!(suggest_keyword("frontend", ""), None);
        assert_eq!(suggest_keyword("spoe-agent", "timout"), None);
    }

    #[test]
    fn a_suggestion_only_names_keywords_allowed_in_that_section() {
        // `fullconn` is one edit away but belongs to backends, not frontends.
        let suggestion = suggest_keyword("frontend", "fullcon");
        assert_ne!(suggestion, Some("fullconn"));
        if let Some(keyword) = suggestion {
            assert_eq!(
                section_keyword_allowed("frontend", keyword),
                KeywordStatus::Allowed
            );
        }
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }

    #[test]
    fn server_parameters_report_whether_they_take_a_value() {
        assert_eq!(is_server_param("check"), Some(ParamArity::Flag));
        assert_eq!(is_server_param("inter"), Some(ParamArity::Value));
        assert_eq!(is_server_param("weight"), Some(ParamArity::Value));
        assert_eq!(is_server_param("ssl"), Some(ParamArity::Flag));
        assert_eq!(is_server_param("frobnicate"), None);
        // Documented for 2.6 but unknown to the 2.6.12 binary.
        assert_eq!(is_server_param("no-verifyhost"), None);
    }

    #[test]
    fn bind_parameters_report_whether_they_take_a_value() {
        assert_eq!(is_bind_param("ssl"), Some(ParamArity::Flag));
        assert_eq!(is_bind_param("crt"), Some(ParamArity::Value));
        assert_eq!(is_bind_param("accept-proxy"), Some(ParamArity::Flag));
        assert_eq!(is_bind_param("quic-cc-algo"), None);
        assert_eq!(is_bind_param("check"), None);
    }

    #[test]
    fn balance_algorithms_include_the_parenthesised_forms() {
        for word in [
            "roundrobin",
            "static-rr",
            "leastconn",
            "first",
            "source",
            "uri",
            "url_param",
            "hdr(host)",
            "random",
            "random(2)",
            "random()",
            "rdp-cookie",
            "rdp-cookie(mstshash)",
            "hash",
        ] {
            assert!(is_balance_algorithm(word), "{word}");
        }
        for word in [
            "hdr",
            "hdr()",
            "hdr(host",
            "random(x)",
            "rdp-cookie()",
            "sticky",
            "",
            "uri()",
        ] {
            assert!(!is_balance_algorithm(word), "{word}");
        }
    }

    #[test]
    fn time_values_default_to_milliseconds_and_honour_units() {
        assert_eq!(parse_time_ms("100"), Some(100));
        assert_eq!(parse_time_ms("250ms"), Some(250));
        assert_eq!(parse_time_ms("5s"), Some(5000));
        assert_eq!(parse_time_ms("1m"), Some(60_000));
        assert_eq!(parse_time_ms("2h"), Some(7_200_000));
        assert_eq!(parse_time_ms("1d"), Some(86_400_000));
        assert_eq!(parse_time_ms("0"), Some(0));
    }

    #[test]
    fn microseconds_round_up_to_the_next_millisecond() {
        assert_eq!(parse_time_ms("500us"), Some(1));
        assert_eq!(parse_time_ms("2000us"), Some(2));
        assert_eq!(parse_time_ms("0us"), Some(0));
    }

    #[test]
    fn malformed_or_overflowing_time_values_are_rejected() {
        for text in [
            "",
            "5x",
            "s",
            "1.5s",
            "-1s",
            " 5s",
            "5 s",
            "10sec",
            "1M",
            "25d",
            "99999999999999999999",
        ] {
            assert_eq!(parse_time_ms(text), None, "{text:?}");
        }
        assert_eq!(parse_time_ms("24d"), Some(24 * 86_400_000));
    }

    #[test]
    fn sizes_take_binary_suffixes_in_either_case() {
        assert_eq!(parse_size_bytes("16k"), Some(16_384));
        assert_eq!(parse_size_bytes("16K"), Some(16_384));
        assert_eq!(parse_size_bytes("1m"), Some(1_048_576));
        assert_eq!(parse_size_bytes("3G"), Some(3 * 1_073_741_824));
        assert_eq!(parse_size_bytes("512"), Some(512));
    }

    #[test]
    fn malformed_or_oversized_sizes_are_rejected() {
        for text in [
            "",
            "k",
            "16kb",
            "1t",
            "0x10",
            "-1",
            "4g",
            "99999999999999999999k",
        ] {
            assert_eq!(parse_size_bytes(text), None, "{text:?}");
        }
    }

    #[test]
    fn the_timeout_names_cover_every_proxy_timeout_event() {
        for name in [
            "client",
            "server",
            "connect",
            "queue",
            "http-request",
            "http-keep-alive",
            "tunnel",
            "client-fin",
            "server-fin",
            "tarpit",
            "check",
        ] {
            assert!(TIMEOUT_NAMES.contains(&name), "{name}");
        }
    }

    /// Splits a configuration line into words: `#` outside quotes starts a comment, quotes
    /// group words, a backslash escapes the next character. Good enough for the corpus.
    fn split_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut quote: Option<char> = None;
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match (quote, c) {
                (_, '\\') => {
                    word.extend(chars.next());
                    in_word = true;
                }
                (Some(open), c) if c == open => quote = None,
                (Some(_), c) => word.push(c),
                (None, '"' | '\'') => {
                    quote = Some(c);
                    in_word = true;
                }
                (None, '#') => break,
                (None, c) if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                (None, c) => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        if in_word {
            words.push(word);
        }
        words
    }

    /// A parameter table lookup: [`is_bind_param`] or [`is_server_param`].
    type ParamLookup = fn(&str) -> Option<ParamArity>;

    /// Where the parameters start on a line that takes `bind` or `server` parameters, and
    /// which lookup judges them.
    fn parameter_layout(keyword: &str) -> Option<(usize, ParamLookup)> {
        match keyword {
            "server" | "peer" => Some((2, is_server_param)),
            "default-server" => Some((0, is_server_param)),
            "server-template" => Some((3, is_server_param)),
            "bind" | "dgram-bind" => Some((1, is_bind_param)),
            "default-bind" => Some((0, is_bind_param)),
            _ => None,
        }
    }

    /// Every problem the tables report for one directive line of a config 2.6 accepts.
    fn misses_on_line(section: &str, words: &[String]) -> Vec<String> {
        let mut misses = Vec::new();
        let prefixed = matches!(words[0].as_str(), "no" | "default") && words.len() > 1;
        let (keyword, arguments) = if prefixed {
            (&words[1], &words[2..])
        } else {
            (&words[0], &words[1..])
        };
        let status = section_keyword_allowed(section, keyword);
        if status != KeywordStatus::Allowed {
            misses.push(format!("[{section}] {keyword}: {status:?}"));
        }
        if keyword == "option"
            && let Some(option) = arguments.first()
        {
            let status = proxy_option_status(section, option);
            if status != KeywordStatus::Allowed {
                misses.push(format!("[{section}] option {option}: {status:?}"));
            }
        }
        if let Some((start, lookup)) = parameter_layout(keyword) {
            let mut index = start;
            while let Some(word) = arguments.get(index) {
                // An environment variable expands to parameters only when HAProxy starts.
                if word.contains("${") {
                    index += 1;
                    continue;
                }
                match lookup(word) {
                    Some(ParamArity::Flag) => index += 1,
                    Some(ParamArity::Value) => index += 2,
                    Some(ParamArity::Values(count)) => index += 1 + usize::from(count),
                    None => {
                        misses.push(format!("[{section}] {keyword} parameter {word}: unknown"));
                        break;
                    }
                }
            }
        }
        misses
    }

    #[test]
    fn every_directive_and_parameter_of_corpus_configs_that_2_6_accepts_is_allowed() {
        let manifest = std::fs::read_to_string(format!("{CORPUS_DIR}MANIFEST.tsv"))
            .expect("the HAProxy corpus manifest should be readable");
        let accepted: Vec<&str> = manifest
            .lines()
            .skip(1)
            .filter_map(|line| {
                let fields: Vec<&str> = line.split('\t').collect();
                matches!(fields.get(3), Some(&"0") | Some(&"2")).then(|| fields[0])
            })
            .collect();
        assert!(
            accepted.len() > 200,
            "only {} accepted configs listed",
            accepted.len()
        );

        let mut misses = Vec::new();
        let mut directives = 0;
        for file in &accepted {
            let text = std::fs::read_to_string(format!("{CORPUS_DIR}{file}"))
                .expect("every config listed in the manifest should be readable");
            let mut section = String::new();
            let mut conditions: Vec<bool> = Vec::new();
            for (number, line) in text.lines().enumerate() {
                let words = split_words(line);
                let Some(first) = words.first() else { continue };
                match first.as_str() {
                    ".if" => conditions.push(
                        CONDITIONS_TRUE_ON_DEBIAN_2_6.contains(&words[1..].join(" ").as_str()),
                    ),
                    ".elif" | ".else" => {
                        if let Some(last) = conditions.last_mut() {
                            *last = false;
                        }
                    }
                    ".endif" => {
                        conditions.pop();
                    }
                    _ if !conditions.iter().all(|holds| *holds) => {}
                    _ if first.starts_with('.') => {}
                    _ if SectionKind::from_keyword(first)
                        .is_some_and(SectionKind::in_haproxy_2_6) =>
                    {
                        section.clone_from(first)
                    }
                    _ => {
                        directives += 1;
                        for miss in misses_on_line(&section, &words) {
                            misses.push(format!("{file}:{}: {miss}", number + 1));
                        }
                    }
                }
            }
        }
        assert!(directives > 1000, "only {directives} directives checked");
        assert!(
            misses.is_empty(),
            "{} misses:\n{}",
            misses.len(),
            misses.join("\n")
        );
    }
}
