//! What HAProxy 3.0 and 3.2 changed in the keyword tables of 2.6: each entry is a keyword
//! the manual of one line (`configuration.txt`: the global keyword list of section 3, the
//! proxy keyword matrix of 4.1, the bind and server options of 5.1 and 5.2) lists and that
//! line's Debian build accepts, with the first documented line ([`DOCUMENTED_LINES`]) that
//! has it, or a keyword of the line before that the next one no longer has. Keywords a
//! manual lists that Debian's build leaves out (51Degrees, DeviceAtlas, WURFL, zlib, OpenSSL
//! engines, memory profiling, `debug.counters`) are absent, as in the 2.6 tables, and so is
//! `crt` in proxies, which 3.2's matrix lists but its parser does not know. The processes
//! test `keyword_tables` compares these tables with each line's manual and its real
//! `haproxy -c`, both ways.
//!
//! [`DOCUMENTED_LINES`]: crate::pure::haproxy::versions::DOCUMENTED_LINES

use super::{B, D, F, L, ParamArity};
use crate::pure::haproxy::versions::HaproxyVersion;

/// Global keywords the 2.6 tables lack, by the first documented line that has them
/// (`http-err-codes` and `http-fail-codes` have their own paragraphs, not the list).
pub(super) const ADDED_GLOBAL_KEYWORDS: &[(&str, HaproxyVersion)] = &[
    ("anonkey", HaproxyVersion::V3_0),
    ("cpu-policy", HaproxyVersion::V3_2),
    ("cpu-set", HaproxyVersion::V3_2),
    ("dns-accept-family", HaproxyVersion::V3_2),
    ("expose-deprecated-directives", HaproxyVersion::V3_0),
    ("force-cfg-parser-pause", HaproxyVersion::V3_2),
    (
        "h1-do-not-close-on-insecure-transfer-encoding",
        HaproxyVersion::V3_0,
    ),
    ("http-err-codes", HaproxyVersion::V3_0),
    ("http-fail-codes", HaproxyVersion::V3_0),
    ("harden.reject-privileged-ports.quic", HaproxyVersion::V3_0),
    ("harden.reject-privileged-ports.tcp", HaproxyVersion::V3_0),
    ("httpclient.resolvers.disabled", HaproxyVersion::V3_0),
    ("httpclient.retries", HaproxyVersion::V3_0),
    ("httpclient.timeout.connect", HaproxyVersion::V3_0),
    ("key-base", HaproxyVersion::V3_0),
    ("limited-quic", HaproxyVersion::V3_2),
    ("no-quic", HaproxyVersion::V3_2),
    ("ocsp-update.disable", HaproxyVersion::V3_0),
    ("ocsp-update.httpproxy", HaproxyVersion::V3_0),
    ("ocsp-update.maxdelay", HaproxyVersion::V3_0),
    ("ocsp-update.mindelay", HaproxyVersion::V3_0),
    ("ocsp-update.mode", HaproxyVersion::V3_0),
    ("prealloc-fd", HaproxyVersion::V3_0),
    ("ssl-default-bind-client-sigalgs", HaproxyVersion::V3_0),
    ("ssl-default-bind-sigalgs", HaproxyVersion::V3_0),
    ("ssl-default-server-client-sigalgs", HaproxyVersion::V3_0),
    ("ssl-default-server-curves", HaproxyVersion::V3_0),
    ("ssl-default-server-sigalgs", HaproxyVersion::V3_0),
    ("ssl-security-level", HaproxyVersion::V3_0),
    ("stats-file", HaproxyVersion::V3_0),
    ("tune.applet.zero-copy-forwarding", HaproxyVersion::V3_0),
    ("tune.bufsize.small", HaproxyVersion::V3_2),
    ("tune.disable-fast-forward", HaproxyVersion::V3_0),
    ("tune.disable-zero-copy-forwarding", HaproxyVersion::V3_0),
    ("tune.epoll.mask-events", HaproxyVersion::V3_0),
    ("tune.events.max-events-at-once", HaproxyVersion::V3_0),
    ("tune.h1.zero-copy-fwd-recv", HaproxyVersion::V3_0),
    ("tune.h1.zero-copy-fwd-send", HaproxyVersion::V3_0),
    ("tune.h2.be.glitches-threshold", HaproxyVersion::V3_0),
    ("tune.h2.be.initial-window-size", HaproxyVersion::V3_0),
    ("tune.h2.be.max-concurrent-streams", HaproxyVersion::V3_0),
    ("tune.h2.be.max-frames-at-once", HaproxyVersion::V3_2),
    ("tune.h2.be.rxbuf", HaproxyVersion::V3_2),
    ("tune.h2.fe.glitches-threshold", HaproxyVersion::V3_0),
    ("tune.h2.fe.initial-window-size", HaproxyVersion::V3_0),
    ("tune.h2.fe.max-concurrent-streams", HaproxyVersion::V3_0),
    ("tune.h2.fe.max-frames-at-once", HaproxyVersion::V3_2),
    ("tune.h2.fe.max-rst-at-once", HaproxyVersion::V3_2),
    ("tune.h2.fe.max-total-streams", HaproxyVersion::V3_0),
    ("tune.h2.fe.rxbuf", HaproxyVersion::V3_2),
    ("tune.h2.zero-copy-fwd-send", HaproxyVersion::V3_0),
    ("tune.lua.bool-sample-conversion", HaproxyVersion::V3_2),
    ("tune.lua.burst-timeout", HaproxyVersion::V3_0),
    ("tune.lua.log.loggers", HaproxyVersion::V3_0),
    ("tune.lua.log.stderr", HaproxyVersion::V3_0),
    ("tune.max-checks-per-thread", HaproxyVersion::V3_0),
    ("tune.max-rules-at-once", HaproxyVersion::V3_2),
    ("tune.memory.hot-size", HaproxyVersion::V3_0),
    ("tune.pt.zero-copy-forwarding", HaproxyVersion::V3_0),
    ("tune.quic.cc-hystart", HaproxyVersion::V3_0),
    ("tune.quic.cc.cubic.min-losses", HaproxyVersion::V3_2),
    ("tune.quic.disable-tx-pacing", HaproxyVersion::V3_2),
    ("tune.quic.disable-udp-gso", HaproxyVersion::V3_2),
    (
        "tune.quic.frontend.conn-tx-buffers.limit",
        HaproxyVersion::V3_0,
    ),
    (
        "tune.quic.frontend.default-max-window-size",
        HaproxyVersion::V3_2,
    ),
    (
        "tune.quic.frontend.glitches-threshold",
        HaproxyVersion::V3_0,
    ),
    ("tune.quic.frontend.max-data-size", HaproxyVersion::V3_2),
    ("tune.quic.frontend.max-idle-timeout", HaproxyVersion::V3_0),
    ("tune.quic.frontend.max-streams-bidi", HaproxyVersion::V3_0),
    ("tune.quic.frontend.max-tx-mem", HaproxyVersion::V3_2),
    ("tune.quic.frontend.stream-data-ratio", HaproxyVersion::V3_2),
    ("tune.quic.max-frame-loss", HaproxyVersion::V3_0),
    ("tune.quic.reorder-ratio", HaproxyVersion::V3_0),
    ("tune.quic.retry-threshold", HaproxyVersion::V3_0),
    ("tune.quic.socket-owner", HaproxyVersion::V3_0),
    ("tune.quic.zero-copy-fwd-send", HaproxyVersion::V3_0),
    ("tune.rcvbuf.backend", HaproxyVersion::V3_0),
    ("tune.rcvbuf.frontend", HaproxyVersion::V3_0),
    ("tune.renice.runtime", HaproxyVersion::V3_2),
    ("tune.renice.startup", HaproxyVersion::V3_2),
    ("tune.ring.queues", HaproxyVersion::V3_0),
    ("tune.sndbuf.backend", HaproxyVersion::V3_0),
    ("tune.sndbuf.frontend", HaproxyVersion::V3_0),
    ("tune.ssl.certificate-compression", HaproxyVersion::V3_2),
    ("tune.ssl.ocsp-update.maxdelay", HaproxyVersion::V3_0),
    ("tune.ssl.ocsp-update.mindelay", HaproxyVersion::V3_0),
    ("tune.stick-counters", HaproxyVersion::V3_0),
    ("tune.takeover-other-tg-connections", HaproxyVersion::V3_2),
    ("warn-blocked-traffic-after", HaproxyVersion::V3_0),
];

/// Global keywords of an earlier table that a later line no longer has, by the first
/// documented line without them.
pub(super) const REMOVED_GLOBAL_KEYWORDS: &[(&str, HaproxyVersion)] = &[(
    "tune.quic.frontend.conn-tx-buffers.limit",
    HaproxyVersion::V3_2,
)];

/// Proxy directives the 2.6 tables lack: the sections they are listed for (4.1), and the
/// first documented line that has them.
pub(super) const ADDED_PROXY_KEYWORDS: &[(&str, u8, HaproxyVersion)] = &[
    ("guid", F | L | B, HaproxyVersion::V3_0),
    ("hash-preserve-affinity", D | L | B, HaproxyVersion::V3_2),
    ("log-steps", D | F | L, HaproxyVersion::V3_2),
    ("max-session-srv-conns", D | F | L, HaproxyVersion::V3_0),
    ("quic-initial", D | F | L, HaproxyVersion::V3_2),
];

/// Proxy directives later lines refuse ("'bind-process' is not supported anymore").
pub(super) const REMOVED_PROXY_KEYWORDS: &[(&str, HaproxyVersion)] =
    &[("bind-process", HaproxyVersion::V3_0)];

/// `option` names the 2.6 tables lack. The sections are those where the real checker
/// applies them: 3.2's matrix lists `http-drop-response-trailers` for no frontend, where
/// 3.2 applies it all the same, and lists the `accept-invalid-*` options under their old
/// names only (4.2 documents the new ones).
pub(super) const ADDED_PROXY_OPTIONS: &[(&str, u8, HaproxyVersion)] = &[
    (
        "accept-unsafe-violations-in-http-request",
        D | F | L,
        HaproxyVersion::V3_2,
    ),
    (
        "accept-unsafe-violations-in-http-response",
        D | L | B,
        HaproxyVersion::V3_2,
    ),
    ("forwarded", D | L | B, HaproxyVersion::V3_0),
    (
        "http-drop-request-trailers",
        D | L | B,
        HaproxyVersion::V3_2,
    ),
    (
        "http-drop-response-trailers",
        D | F | L,
        HaproxyVersion::V3_2,
    ),
];

/// `bind` parameters the 2.6 tables lack, with how many values each takes (5.1).
pub(super) const ADDED_BIND_PARAMS: &[(&str, ParamArity, HaproxyVersion)] = &[
    ("client-sigalgs", ParamArity::Value, HaproxyVersion::V3_0),
    ("default-crt", ParamArity::Value, HaproxyVersion::V3_0),
    ("guid-prefix", ParamArity::Value, HaproxyVersion::V3_0),
    ("idle-ping", ParamArity::Value, HaproxyVersion::V3_2),
    ("label", ParamArity::Value, HaproxyVersion::V3_2),
    ("nbconn", ParamArity::Value, HaproxyVersion::V3_0),
    ("no-alpn", ParamArity::Flag, HaproxyVersion::V3_0),
    ("no-strict-sni", ParamArity::Flag, HaproxyVersion::V3_2),
    ("quic-cc-algo", ParamArity::Value, HaproxyVersion::V3_0),
    ("quic-force-retry", ParamArity::Flag, HaproxyVersion::V3_0),
    ("quic-socket", ParamArity::Value, HaproxyVersion::V3_0),
    ("sigalgs", ParamArity::Value, HaproxyVersion::V3_0),
    ("tls-tickets", ParamArity::Flag, HaproxyVersion::V3_2),
];

/// `bind` parameters later lines refuse (`process`: "not supported anymore, please use
/// 'thread' instead").
pub(super) const REMOVED_BIND_PARAMS: &[(&str, HaproxyVersion)] =
    &[("process", HaproxyVersion::V3_0)];

/// `server` parameters the 2.6 tables lack, with how many values each takes (5.2);
/// `set-proxy-v2-tlv-fmt` is written with its TLV id, `set-proxy-v2-tlv-fmt(0x20) <fmt>`.
pub(super) const ADDED_SERVER_PARAMS: &[(&str, ParamArity, HaproxyVersion)] = &[
    (
        "check-pool-conn-name",
        ParamArity::Value,
        HaproxyVersion::V3_2,
    ),
    ("check-reuse-pool", ParamArity::Flag, HaproxyVersion::V3_2),
    ("client-sigalgs", ParamArity::Value, HaproxyVersion::V3_0),
    ("curves", ParamArity::Value, HaproxyVersion::V3_0),
    ("guid", ParamArity::Value, HaproxyVersion::V3_0),
    ("hash-key", ParamArity::Value, HaproxyVersion::V3_0),
    ("idle-ping", ParamArity::Value, HaproxyVersion::V3_2),
    ("init-state", ParamArity::Value, HaproxyVersion::V3_2),
    ("log-bufsize", ParamArity::Value, HaproxyVersion::V3_0),
    (
        "no-check-reuse-pool",
        ParamArity::Flag,
        HaproxyVersion::V3_2,
    ),
    ("pool-conn-name", ParamArity::Value, HaproxyVersion::V3_0),
    (
        "set-proxy-v2-tlv-fmt",
        ParamArity::Value,
        HaproxyVersion::V3_0,
    ),
    ("shard", ParamArity::Value, HaproxyVersion::V3_0),
    ("sigalgs", ParamArity::Value, HaproxyVersion::V3_0),
    ("strict-maxconn", ParamArity::Flag, HaproxyVersion::V3_2),
];
