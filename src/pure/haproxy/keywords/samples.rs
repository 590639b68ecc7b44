//! The sample fetches and converters of each documented HAProxy line (2.6, 3.0, 3.2), and
//! the syntax of the sample expressions that use them (`req.hdr(host),lower,map(hosts.map)`),
//! for the schema check. Expressions appear in `acl` lines, in anonymous ACLs of conditions
//! (`if { src 10.0.0.0/8 }`), as the argument of actions such as `set-var`, `track-sc0` and
//! `stick on`, and between `%[` and `]` in log-format strings.
//!
//! The tables are those of Debian's builds (their `-dKsmp`, `-dKcnv` and `-dKacl` keyword
//! dumps): 2.6.12's whole, and what 3.0.11 and 3.2.26 added, changed and dropped after the
//! line before (`LATER_FETCHES`, `LATER_CONVERTERS`; the ACL keywords did not change). Each
//! fetch and converter has the types of its arguments and the number of them that are
//! mandatory; the ACL keywords (`hdr_beg`, `path_end`, ...) stand for a fetch with a
//! matching method. For a line between two documented ones (3.1), a name a later documented
//! line added or changed is accepted with its arguments unchecked. Names registered at run
//! time by Lua (`lua.*`) and by device-detection modules that build leaves out are accepted
//! unchecked. The parser follows
//! HAProxy 2.6: a fetch name is made of letters, digits, `.`, `_`, `-` and `+`; arguments sit
//! in parentheses, separated by commas, and may be quoted or backslash-escaped; converters
//! follow, each after a comma. Arguments of types that HAProxy resolves only after parsing
//! (backends, servers, tables, user lists, regexes) are returned for the caller to judge.

/// The type of one argument of a sample fetch or converter, named as HAProxy names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleArgType {
    Integer,
    /// HAProxy's `string`.
    Text,
    Backend,
    Frontend,
    Server,
    Table,
    UserList,
    Regex,
    Ipv4Address,
    Ipv6Address,
    Ipv4Mask,
    Ipv6Mask,
    ProtobufField,
}

use crate::pure::haproxy::versions::{HaproxyVersion, certainly_before};
use SampleArgType::{
    Backend, Frontend, Integer, Ipv4Address, Ipv4Mask, Ipv6Address, Ipv6Mask, ProtobufField, Regex,
    Server, Table, Text, UserList,
};

impl SampleArgType {
    /// HAProxy's name for the type, as its messages print it.
    pub fn haproxy_name(self) -> &'static str {
        match self {
            Integer => "integer",
            Text => "string",
            Backend => "backend",
            Frontend => "frontend",
            Server => "server",
            Table => "table",
            UserList => "user list",
            Regex => "regex",
            Ipv4Address => "IPv4 address",
            Ipv6Address => "IPv6 address",
            Ipv4Mask => "IPv4 mask",
            Ipv6Mask => "IPv6 mask",
            ProtobufField => "Protocol buffers field number",
        }
    }

    /// Whether HAProxy keeps the argument as text while parsing (strings, and the names and
    /// regexes it resolves later); an empty one is then accepted by the parser.
    fn is_text(self) -> bool {
        matches!(
            self,
            Text | Backend | Frontend | Server | Table | UserList | Regex
        )
    }

    /// Whether `text` has the form HAProxy's parser requires of this type. Numbers are
    /// checked exactly (an optional sign, then decimal digits); addresses and masks only for
    /// their characters, so that no form HAProxy takes is refused.
    fn accepts(self, text: &str) -> bool {
        match self {
            Integer => {
                let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
                !text.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
            }
            Ipv4Address | Ipv4Mask => {
                !text.is_empty()
                    && text
                        .bytes()
                        .all(|byte| byte.is_ascii_digit() || byte == b'.')
            }
            Ipv6Address | Ipv6Mask => {
                !text.is_empty()
                    && text
                        .bytes()
                        .all(|byte| byte.is_ascii_hexdigit() || matches!(byte, b'.' | b':'))
            }
            ProtobufField => {
                !text.is_empty()
                    && text
                        .bytes()
                        .all(|byte| byte.is_ascii_digit() || byte == b'.')
            }
            _ => true,
        }
    }
}

/// The arguments a fetch or converter takes: their types in order, the first `mandatory` of
/// them required.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleSignature {
    pub mandatory: usize,
    pub types: &'static [SampleArgType],
}

/// A keyword without arguments.
const NO_ARGS: SampleSignature = args(0, &[]);

const fn args(mandatory: usize, types: &'static [SampleArgType]) -> SampleSignature {
    SampleSignature { mandatory, types }
}

/// Sample fetches of HAProxy 2.6.12 (manual 7.3.2 to 7.3.6), sorted.
const SAMPLE_FETCHES: &[(&str, SampleSignature)] = &[
    ("always_false", NO_ARGS),
    ("always_true", NO_ARGS),
    ("avg_queue", args(1, &[Backend])),
    ("base", NO_ARGS),
    ("base32", NO_ARGS),
    ("base32+src", NO_ARGS),
    ("baseq", NO_ARGS),
    ("bc_dst", NO_ARGS),
    ("bc_dst_port", NO_ARGS),
    ("bc_err", NO_ARGS),
    ("bc_err_str", NO_ARGS),
    ("bc_http_major", NO_ARGS),
    ("bc_src", NO_ARGS),
    ("bc_src_port", NO_ARGS),
    ("be_conn", args(1, &[Backend])),
    ("be_conn_free", args(1, &[Backend])),
    ("be_id", NO_ARGS),
    ("be_name", NO_ARGS),
    ("be_server_timeout", NO_ARGS),
    ("be_sess_rate", args(1, &[Backend])),
    ("be_tunnel_timeout", NO_ARGS),
    ("bin", args(1, &[Text])),
    ("bool", args(1, &[Text])),
    ("capture.req.hdr", args(1, &[Integer])),
    ("capture.req.method", NO_ARGS),
    ("capture.req.uri", NO_ARGS),
    ("capture.req.ver", NO_ARGS),
    ("capture.res.hdr", args(1, &[Integer])),
    ("capture.res.ver", NO_ARGS),
    ("connslots", args(1, &[Backend])),
    ("cook", args(0, &[Text])),
    ("cook_cnt", args(0, &[Text])),
    ("cook_val", args(0, &[Text])),
    ("cookie", args(0, &[Text])),
    ("cpu_calls", NO_ARGS),
    ("cpu_ns_avg", NO_ARGS),
    ("cpu_ns_tot", NO_ARGS),
    ("cur_server_timeout", NO_ARGS),
    ("cur_tunnel_timeout", NO_ARGS),
    ("date", args(0, &[Integer, Text])),
    ("date_us", NO_ARGS),
    ("distcc_body", args(1, &[Text, Integer])),
    ("distcc_param", args(1, &[Text, Integer])),
    ("dst", NO_ARGS),
    ("dst_conn", NO_ARGS),
    ("dst_is_local", NO_ARGS),
    ("dst_port", NO_ARGS),
    ("env", args(1, &[Text])),
    ("fc_dst", NO_ARGS),
    ("fc_dst_is_local", NO_ARGS),
    ("fc_dst_port", NO_ARGS),
    ("fc_err", NO_ARGS),
    ("fc_err_str", NO_ARGS),
    ("fc_fackets", args(0, &[Text])),
    ("fc_http_major", NO_ARGS),
    ("fc_lost", args(0, &[Text])),
    ("fc_pp_authority", NO_ARGS),
    ("fc_pp_unique_id", NO_ARGS),
    ("fc_rcvd_proxy", NO_ARGS),
    ("fc_reordering", args(0, &[Text])),
    ("fc_retrans", args(0, &[Text])),
    ("fc_rtt", args(0, &[Text])),
    ("fc_rttvar", args(0, &[Text])),
    ("fc_sacked", args(0, &[Text])),
    ("fc_src", NO_ARGS),
    ("fc_src_is_local", NO_ARGS),
    ("fc_src_port", NO_ARGS),
    ("fc_unacked", args(0, &[Text])),
    ("fcgi.docroot", NO_ARGS),
    ("fcgi.index", NO_ARGS),
    ("fe_client_timeout", NO_ARGS),
    ("fe_conn", args(1, &[Frontend])),
    ("fe_defbe", NO_ARGS),
    ("fe_id", NO_ARGS),
    ("fe_name", NO_ARGS),
    ("fe_req_rate", args(1, &[Frontend])),
    ("fe_sess_rate", args(1, &[Frontend])),
    ("hdr", args(0, &[Text, Integer])),
    ("hdr_cnt", args(0, &[Text])),
    ("hdr_ip", args(0, &[Text, Integer])),
    ("hdr_val", args(0, &[Text, Integer])),
    ("hostname", NO_ARGS),
    ("http_auth", args(1, &[UserList])),
    ("http_auth_bearer", args(0, &[Text])),
    ("http_auth_group", args(1, &[UserList])),
    ("http_auth_pass", NO_ARGS),
    ("http_auth_type", NO_ARGS),
    ("http_auth_user", NO_ARGS),
    ("http_first_req", NO_ARGS),
    ("int", args(1, &[Integer])),
    ("internal.htx.data", NO_ARGS),
    ("internal.htx.free", NO_ARGS),
    ("internal.htx.free_data", NO_ARGS),
    ("internal.htx.has_eom", NO_ARGS),
    ("internal.htx.nbblks", NO_ARGS),
    ("internal.htx.size", NO_ARGS),
    ("internal.htx.used", NO_ARGS),
    ("internal.htx_blk.data", args(1, &[Text])),
    ("internal.htx_blk.hdrname", args(1, &[Text])),
    ("internal.htx_blk.hdrval", args(1, &[Text])),
    ("internal.htx_blk.size", args(1, &[Text])),
    ("internal.htx_blk.start_line", args(1, &[Text])),
    ("internal.htx_blk.type", args(1, &[Text])),
    ("internal.strm.is_htx", NO_ARGS),
    ("ipv4", args(1, &[Ipv4Address])),
    ("ipv6", args(1, &[Ipv6Address])),
    ("last_rule_file", NO_ARGS),
    ("last_rule_line", NO_ARGS),
    ("lat_ns_avg", NO_ARGS),
    ("lat_ns_tot", NO_ARGS),
    ("meth", args(1, &[Text])),
    ("method", NO_ARGS),
    ("nbproc", NO_ARGS),
    ("nbsrv", args(1, &[Backend])),
    ("path", NO_ARGS),
    ("pathq", NO_ARGS),
    ("payload", args(2, &[Integer, Integer])),
    ("payload_lv", args(2, &[Integer, Integer, Text])),
    ("prio_class", NO_ARGS),
    ("prio_offset", NO_ARGS),
    ("proc", NO_ARGS),
    ("query", NO_ARGS),
    ("queue", args(1, &[Backend])),
    ("rand", args(0, &[Integer])),
    ("rdp_cookie", args(0, &[Text])),
    ("rdp_cookie_cnt", args(0, &[Text])),
    ("rep_ssl_hello_type", NO_ARGS),
    ("req.body", NO_ARGS),
    ("req.body_len", NO_ARGS),
    ("req.body_param", args(0, &[Text])),
    ("req.body_size", NO_ARGS),
    ("req.cook", args(0, &[Text])),
    ("req.cook_cnt", args(0, &[Text])),
    ("req.cook_val", args(0, &[Text])),
    ("req.fhdr", args(0, &[Text, Integer])),
    ("req.fhdr_cnt", args(0, &[Text])),
    ("req.hdr", args(0, &[Text, Integer])),
    ("req.hdr_cnt", args(0, &[Text])),
    ("req.hdr_ip", args(0, &[Text, Integer])),
    ("req.hdr_names", args(0, &[Text])),
    ("req.hdr_val", args(0, &[Text, Integer])),
    ("req.hdrs", NO_ARGS),
    ("req.hdrs_bin", NO_ARGS),
    ("req.len", NO_ARGS),
    ("req.payload", args(2, &[Integer, Integer])),
    ("req.payload_lv", args(2, &[Integer, Integer, Text])),
    ("req.proto_http", NO_ARGS),
    ("req.rdp_cookie", args(0, &[Text])),
    ("req.rdp_cookie_cnt", args(0, &[Text])),
    ("req.ssl_alpn", NO_ARGS),
    ("req.ssl_ec_ext", NO_ARGS),
    ("req.ssl_hello_type", NO_ARGS),
    ("req.ssl_sni", NO_ARGS),
    ("req.ssl_st_ext", NO_ARGS),
    ("req.ssl_ver", NO_ARGS),
    ("req.ver", NO_ARGS),
    ("req_len", NO_ARGS),
    ("req_proto_http", NO_ARGS),
    ("req_ssl_hello_type", NO_ARGS),
    ("req_ssl_sni", NO_ARGS),
    ("req_ssl_ver", NO_ARGS),
    ("req_ver", NO_ARGS),
    ("res.body", NO_ARGS),
    ("res.body_len", NO_ARGS),
    ("res.body_size", NO_ARGS),
    ("res.cache_hit", NO_ARGS),
    ("res.cache_name", NO_ARGS),
    ("res.comp", NO_ARGS),
    ("res.comp_algo", NO_ARGS),
    ("res.cook", args(0, &[Text])),
    ("res.cook_cnt", args(0, &[Text])),
    ("res.cook_val", args(0, &[Text])),
    ("res.fhdr", args(0, &[Text, Integer])),
    ("res.fhdr_cnt", args(0, &[Text])),
    ("res.hdr", args(0, &[Text, Integer])),
    ("res.hdr_cnt", args(0, &[Text])),
    ("res.hdr_ip", args(0, &[Text, Integer])),
    ("res.hdr_names", args(0, &[Text])),
    ("res.hdr_val", args(0, &[Text, Integer])),
    ("res.hdrs", NO_ARGS),
    ("res.hdrs_bin", NO_ARGS),
    ("res.len", NO_ARGS),
    ("res.payload", args(2, &[Integer, Integer])),
    ("res.payload_lv", args(2, &[Integer, Integer, Text])),
    ("res.ssl_hello_type", NO_ARGS),
    ("res.ver", NO_ARGS),
    ("resp_ver", NO_ARGS),
    ("sc0_bytes_in_rate", args(0, &[Table])),
    ("sc0_bytes_out_rate", args(0, &[Table])),
    ("sc0_clr_gpc0", args(0, &[Table])),
    ("sc0_clr_gpc1", args(0, &[Table])),
    ("sc0_conn_cnt", args(0, &[Table])),
    ("sc0_conn_cur", args(0, &[Table])),
    ("sc0_conn_rate", args(0, &[Table])),
    ("sc0_get_gpc0", args(0, &[Table])),
    ("sc0_get_gpc1", args(0, &[Table])),
    ("sc0_get_gpt0", args(0, &[Table])),
    ("sc0_gpc0_rate", args(0, &[Table])),
    ("sc0_gpc1_rate", args(0, &[Table])),
    ("sc0_http_err_cnt", args(0, &[Table])),
    ("sc0_http_err_rate", args(0, &[Table])),
    ("sc0_http_fail_cnt", args(0, &[Table])),
    ("sc0_http_fail_rate", args(0, &[Table])),
    ("sc0_http_req_cnt", args(0, &[Table])),
    ("sc0_http_req_rate", args(0, &[Table])),
    ("sc0_inc_gpc0", args(0, &[Table])),
    ("sc0_inc_gpc1", args(0, &[Table])),
    ("sc0_kbytes_in", args(0, &[Table])),
    ("sc0_kbytes_out", args(0, &[Table])),
    ("sc0_sess_cnt", args(0, &[Table])),
    ("sc0_sess_rate", args(0, &[Table])),
    ("sc0_tracked", args(0, &[Table])),
    ("sc0_trackers", args(0, &[Table])),
    ("sc1_bytes_in_rate", args(0, &[Table])),
    ("sc1_bytes_out_rate", args(0, &[Table])),
    ("sc1_clr_gpc", args(1, &[Integer, Table])),
    ("sc1_clr_gpc0", args(0, &[Table])),
    ("sc1_clr_gpc1", args(0, &[Table])),
    ("sc1_conn_cnt", args(0, &[Table])),
    ("sc1_conn_cur", args(0, &[Table])),
    ("sc1_conn_rate", args(0, &[Table])),
    ("sc1_get_gpc0", args(0, &[Table])),
    ("sc1_get_gpc1", args(0, &[Table])),
    ("sc1_get_gpt0", args(0, &[Table])),
    ("sc1_gpc0_rate", args(0, &[Table])),
    ("sc1_gpc1_rate", args(0, &[Table])),
    ("sc1_http_err_cnt", args(0, &[Table])),
    ("sc1_http_err_rate", args(0, &[Table])),
    ("sc1_http_fail_cnt", args(0, &[Table])),
    ("sc1_http_fail_rate", args(0, &[Table])),
    ("sc1_http_req_cnt", args(0, &[Table])),
    ("sc1_http_req_rate", args(0, &[Table])),
    ("sc1_inc_gpc0", args(0, &[Table])),
    ("sc1_inc_gpc1", args(0, &[Table])),
    ("sc1_kbytes_in", args(0, &[Table])),
    ("sc1_kbytes_out", args(0, &[Table])),
    ("sc1_sess_cnt", args(0, &[Table])),
    ("sc1_sess_rate", args(0, &[Table])),
    ("sc1_tracked", args(0, &[Table])),
    ("sc1_trackers", args(0, &[Table])),
    ("sc2_bytes_in_rate", args(0, &[Table])),
    ("sc2_bytes_out_rate", args(0, &[Table])),
    ("sc2_clr_gpc0", args(0, &[Table])),
    ("sc2_clr_gpc1", args(0, &[Table])),
    ("sc2_conn_cnt", args(0, &[Table])),
    ("sc2_conn_cur", args(0, &[Table])),
    ("sc2_conn_rate", args(0, &[Table])),
    ("sc2_get_gpc0", args(0, &[Table])),
    ("sc2_get_gpc1", args(0, &[Table])),
    ("sc2_get_gpt0", args(0, &[Table])),
    ("sc2_gpc0_rate", args(0, &[Table])),
    ("sc2_gpc1_rate", args(0, &[Table])),
    ("sc2_http_err_cnt", args(0, &[Table])),
    ("sc2_http_err_rate", args(0, &[Table])),
    ("sc2_http_fail_cnt", args(0, &[Table])),
    ("sc2_http_fail_rate", args(0, &[Table])),
    ("sc2_http_req_cnt", args(0, &[Table])),
    ("sc2_http_req_rate", args(0, &[Table])),
    ("sc2_inc_gpc0", args(0, &[Table])),
    ("sc2_inc_gpc1", args(0, &[Table])),
    ("sc2_kbytes_in", args(0, &[Table])),
    ("sc2_kbytes_out", args(0, &[Table])),
    ("sc2_sess_cnt", args(0, &[Table])),
    ("sc2_sess_rate", args(0, &[Table])),
    ("sc2_tracked", args(0, &[Table])),
    ("sc2_trackers", args(0, &[Table])),
    ("sc_bytes_in_rate", args(1, &[Integer, Table])),
    ("sc_bytes_out_rate", args(1, &[Integer, Table])),
    ("sc_clr_gpc", args(2, &[Integer, Integer, Table])),
    ("sc_clr_gpc0", args(1, &[Integer, Table])),
    ("sc_clr_gpc1", args(1, &[Integer, Table])),
    ("sc_conn_cnt", args(1, &[Integer, Table])),
    ("sc_conn_cur", args(1, &[Integer, Table])),
    ("sc_conn_rate", args(1, &[Integer, Table])),
    ("sc_get_gpc", args(2, &[Integer, Integer, Table])),
    ("sc_get_gpc0", args(1, &[Integer, Table])),
    ("sc_get_gpc1", args(1, &[Integer, Table])),
    ("sc_get_gpt", args(2, &[Integer, Integer, Table])),
    ("sc_get_gpt0", args(1, &[Integer, Table])),
    ("sc_gpc0_rate", args(1, &[Integer, Table])),
    ("sc_gpc1_rate", args(1, &[Integer, Table])),
    ("sc_gpc_rate", args(2, &[Integer, Integer, Table])),
    ("sc_http_err_cnt", args(1, &[Integer, Table])),
    ("sc_http_err_rate", args(1, &[Integer, Table])),
    ("sc_http_fail_cnt", args(1, &[Integer, Table])),
    ("sc_http_fail_rate", args(1, &[Integer, Table])),
    ("sc_http_req_cnt", args(1, &[Integer, Table])),
    ("sc_http_req_rate", args(1, &[Integer, Table])),
    ("sc_inc_gpc", args(2, &[Integer, Integer, Table])),
    ("sc_inc_gpc0", args(1, &[Integer, Table])),
    ("sc_inc_gpc1", args(1, &[Integer, Table])),
    ("sc_kbytes_in", args(1, &[Integer, Table])),
    ("sc_kbytes_out", args(1, &[Integer, Table])),
    ("sc_sess_cnt", args(1, &[Integer, Table])),
    ("sc_sess_rate", args(1, &[Integer, Table])),
    ("sc_tracked", args(1, &[Integer, Table])),
    ("sc_trackers", args(1, &[Integer, Table])),
    ("scook", args(0, &[Text])),
    ("scook_cnt", args(0, &[Text])),
    ("scook_val", args(0, &[Text])),
    ("shdr", args(0, &[Text, Integer])),
    ("shdr_cnt", args(0, &[Text])),
    ("shdr_ip", args(0, &[Text, Integer])),
    ("shdr_val", args(0, &[Text, Integer])),
    ("so_id", NO_ARGS),
    ("so_name", NO_ARGS),
    ("src", NO_ARGS),
    ("src_bytes_in_rate", args(1, &[Table])),
    ("src_bytes_out_rate", args(1, &[Table])),
    ("src_clr_gpc", args(2, &[Integer, Table])),
    ("src_clr_gpc0", args(1, &[Table])),
    ("src_clr_gpc1", args(1, &[Table])),
    ("src_conn_cnt", args(1, &[Table])),
    ("src_conn_cur", args(1, &[Table])),
    ("src_conn_rate", args(1, &[Table])),
    ("src_get_gpc", args(2, &[Integer, Table])),
    ("src_get_gpc0", args(1, &[Table])),
    ("src_get_gpc1", args(1, &[Table])),
    ("src_get_gpt", args(2, &[Integer, Table])),
    ("src_get_gpt0", args(1, &[Table])),
    ("src_gpc0_rate", args(1, &[Table])),
    ("src_gpc1_rate", args(1, &[Table])),
    ("src_gpc_rate", args(2, &[Integer, Table])),
    ("src_http_err_cnt", args(1, &[Table])),
    ("src_http_err_rate", args(1, &[Table])),
    ("src_http_fail_cnt", args(1, &[Table])),
    ("src_http_fail_rate", args(1, &[Table])),
    ("src_http_req_cnt", args(1, &[Table])),
    ("src_http_req_rate", args(1, &[Table])),
    ("src_inc_gpc", args(2, &[Integer, Table])),
    ("src_inc_gpc0", args(1, &[Table])),
    ("src_inc_gpc1", args(1, &[Table])),
    ("src_is_local", NO_ARGS),
    ("src_kbytes_in", args(1, &[Table])),
    ("src_kbytes_out", args(1, &[Table])),
    ("src_port", NO_ARGS),
    ("src_sess_cnt", args(1, &[Table])),
    ("src_sess_rate", args(1, &[Table])),
    ("src_updt_conn_cnt", args(1, &[Table])),
    ("srv_conn", args(1, &[Server])),
    ("srv_conn_free", args(1, &[Server])),
    ("srv_id", NO_ARGS),
    ("srv_is_up", args(1, &[Server])),
    ("srv_iweight", args(1, &[Server])),
    ("srv_name", NO_ARGS),
    ("srv_queue", args(1, &[Server])),
    ("srv_sess_rate", args(1, &[Server])),
    ("srv_uweight", args(1, &[Server])),
    ("srv_weight", args(1, &[Server])),
    ("ssl_bc", NO_ARGS),
    ("ssl_bc_alg_keysize", NO_ARGS),
    ("ssl_bc_alpn", NO_ARGS),
    ("ssl_bc_cipher", NO_ARGS),
    ("ssl_bc_client_random", NO_ARGS),
    ("ssl_bc_err", NO_ARGS),
    ("ssl_bc_err_str", NO_ARGS),
    ("ssl_bc_is_resumed", NO_ARGS),
    ("ssl_bc_npn", NO_ARGS),
    ("ssl_bc_protocol", NO_ARGS),
    ("ssl_bc_server_random", NO_ARGS),
    ("ssl_bc_session_id", NO_ARGS),
    ("ssl_bc_session_key", NO_ARGS),
    ("ssl_bc_unique_id", NO_ARGS),
    ("ssl_bc_use_keysize", NO_ARGS),
    ("ssl_c_ca_err", NO_ARGS),
    ("ssl_c_ca_err_depth", NO_ARGS),
    ("ssl_c_chain_der", NO_ARGS),
    ("ssl_c_der", NO_ARGS),
    ("ssl_c_err", NO_ARGS),
    ("ssl_c_i_dn", args(0, &[Text, Integer, Text])),
    ("ssl_c_key_alg", NO_ARGS),
    ("ssl_c_notafter", NO_ARGS),
    ("ssl_c_notbefore", NO_ARGS),
    ("ssl_c_s_dn", args(0, &[Text, Integer, Text])),
    ("ssl_c_serial", NO_ARGS),
    ("ssl_c_sha1", NO_ARGS),
    ("ssl_c_sig_alg", NO_ARGS),
    ("ssl_c_used", NO_ARGS),
    ("ssl_c_verify", NO_ARGS),
    ("ssl_c_version", NO_ARGS),
    ("ssl_f_der", NO_ARGS),
    ("ssl_f_i_dn", args(0, &[Text, Integer, Text])),
    ("ssl_f_key_alg", NO_ARGS),
    ("ssl_f_notafter", NO_ARGS),
    ("ssl_f_notbefore", NO_ARGS),
    ("ssl_f_s_dn", args(0, &[Text, Integer, Text])),
    ("ssl_f_serial", NO_ARGS),
    ("ssl_f_sha1", NO_ARGS),
    ("ssl_f_sig_alg", NO_ARGS),
    ("ssl_f_version", NO_ARGS),
    ("ssl_fc", NO_ARGS),
    ("ssl_fc_alg_keysize", NO_ARGS),
    ("ssl_fc_alpn", NO_ARGS),
    ("ssl_fc_cipher", NO_ARGS),
    ("ssl_fc_cipherlist_bin", args(0, &[Integer])),
    ("ssl_fc_cipherlist_hex", args(0, &[Integer])),
    ("ssl_fc_cipherlist_str", args(0, &[Integer])),
    ("ssl_fc_cipherlist_xxh", NO_ARGS),
    ("ssl_fc_client_early_traffic_secret", NO_ARGS),
    ("ssl_fc_client_handshake_traffic_secret", NO_ARGS),
    ("ssl_fc_client_random", NO_ARGS),
    ("ssl_fc_client_traffic_secret_0", NO_ARGS),
    ("ssl_fc_early_exporter_secret", NO_ARGS),
    ("ssl_fc_ecformats_bin", NO_ARGS),
    ("ssl_fc_eclist_bin", args(0, &[Integer])),
    ("ssl_fc_err", NO_ARGS),
    ("ssl_fc_err_str", NO_ARGS),
    ("ssl_fc_exporter_secret", NO_ARGS),
    ("ssl_fc_extlist_bin", args(0, &[Integer])),
    ("ssl_fc_has_crt", NO_ARGS),
    ("ssl_fc_has_early", NO_ARGS),
    ("ssl_fc_has_sni", NO_ARGS),
    ("ssl_fc_is_resumed", NO_ARGS),
    ("ssl_fc_npn", NO_ARGS),
    ("ssl_fc_protocol", NO_ARGS),
    ("ssl_fc_protocol_hello_id", NO_ARGS),
    ("ssl_fc_server_handshake_traffic_secret", NO_ARGS),
    ("ssl_fc_server_random", NO_ARGS),
    ("ssl_fc_server_traffic_secret_0", NO_ARGS),
    ("ssl_fc_session_id", NO_ARGS),
    ("ssl_fc_session_key", NO_ARGS),
    ("ssl_fc_sni", NO_ARGS),
    ("ssl_fc_unique_id", NO_ARGS),
    ("ssl_fc_use_keysize", NO_ARGS),
    ("ssl_s_chain_der", NO_ARGS),
    ("ssl_s_der", NO_ARGS),
    ("ssl_s_i_dn", args(0, &[Text, Integer, Text])),
    ("ssl_s_key_alg", NO_ARGS),
    ("ssl_s_notafter", NO_ARGS),
    ("ssl_s_notbefore", NO_ARGS),
    ("ssl_s_s_dn", args(0, &[Text, Integer, Text])),
    ("ssl_s_serial", NO_ARGS),
    ("ssl_s_sha1", NO_ARGS),
    ("ssl_s_sig_alg", NO_ARGS),
    ("ssl_s_version", NO_ARGS),
    ("status", NO_ARGS),
    ("stopping", NO_ARGS),
    ("str", args(1, &[Text])),
    ("table_avl", args(1, &[Table])),
    ("table_cnt", args(1, &[Table])),
    ("thread", NO_ARGS),
    ("unique-id", NO_ARGS),
    ("url", NO_ARGS),
    ("url32", NO_ARGS),
    ("url32+src", NO_ARGS),
    ("url_ip", NO_ARGS),
    ("url_param", args(0, &[Text, Text])),
    ("url_port", NO_ARGS),
    ("urlp", args(0, &[Text, Text])),
    ("urlp_val", args(0, &[Text, Text])),
    ("uuid", args(0, &[Integer])),
    ("var", args(1, &[Text, Text])),
    ("wait_end", NO_ARGS),
];

/// Converters of HAProxy 2.6.12 (manual 7.3.1), sorted.
const SAMPLE_CONVERTERS: &[(&str, SampleSignature)] = &[
    ("add", args(1, &[Text])),
    ("add_item", args(2, &[Text, Text, Text])),
    ("aes_gcm_dec", args(4, &[Integer, Text, Text, Text])),
    ("and", args(1, &[Text])),
    ("b64dec", NO_ARGS),
    ("base64", NO_ARGS),
    ("be2dec", args(1, &[Text, Integer, Integer])),
    ("be2hex", args(1, &[Text, Integer, Integer])),
    ("bool", NO_ARGS),
    ("bytes", args(1, &[Integer, Integer])),
    ("capture-req", args(1, &[Integer])),
    ("capture-res", args(1, &[Integer])),
    ("concat", args(1, &[Text, Text, Text])),
    ("cpl", NO_ARGS),
    ("crc32", args(0, &[Integer])),
    ("crc32c", args(0, &[Integer])),
    ("cut_crlf", NO_ARGS),
    ("debug", args(0, &[Text, Text])),
    ("digest", args(1, &[Text])),
    ("div", args(1, &[Text])),
    ("djb2", args(0, &[Integer])),
    ("even", NO_ARGS),
    ("field", args(2, &[Integer, Text, Integer])),
    ("fix_is_valid", NO_ARGS),
    ("fix_tag_value", args(1, &[Text])),
    ("hex", NO_ARGS),
    ("hex2i", NO_ARGS),
    ("hmac", args(2, &[Text, Text])),
    ("host_only", NO_ARGS),
    ("htonl", NO_ARGS),
    ("http_date", args(0, &[Integer, Text])),
    ("iif", args(2, &[Text, Text])),
    ("in_table", args(1, &[Table])),
    ("ipmask", args(1, &[Ipv4Mask, Ipv6Mask])),
    ("json", args(1, &[Text])),
    ("json_query", args(1, &[Text, Text])),
    ("jwt_header_query", args(0, &[Text, Text])),
    ("jwt_payload_query", args(0, &[Text, Text])),
    ("jwt_verify", args(2, &[Text, Text])),
    ("language", args(1, &[Text, Text])),
    ("length", NO_ARGS),
    ("lower", NO_ARGS),
    ("ltime", args(1, &[Text, Integer])),
    ("ltrim", args(1, &[Text])),
    ("map", args(1, &[Text, Text])),
    ("map_beg", args(1, &[Text, Text])),
    ("map_beg_int", args(1, &[Text, Integer])),
    ("map_beg_ip", args(1, &[Text, Text])),
    ("map_dir", args(1, &[Text, Text])),
    ("map_dir_int", args(1, &[Text, Integer])),
    ("map_dir_ip", args(1, &[Text, Text])),
    ("map_dom", args(1, &[Text, Text])),
    ("map_dom_int", args(1, &[Text, Integer])),
    ("map_dom_ip", args(1, &[Text, Text])),
    ("map_end", args(1, &[Text, Text])),
    ("map_end_int", args(1, &[Text, Integer])),
    ("map_end_ip", args(1, &[Text, Text])),
    ("map_int", args(1, &[Text, Text])),
    ("map_int_int", args(1, &[Text, Integer])),
    ("map_int_ip", args(1, &[Text, Text])),
    ("map_ip", args(1, &[Text, Text])),
    ("map_ip_int", args(1, &[Text, Integer])),
    ("map_ip_ip", args(1, &[Text, Text])),
    ("map_reg", args(1, &[Text, Text])),
    ("map_reg_int", args(1, &[Text, Integer])),
    ("map_reg_ip", args(1, &[Text, Text])),
    ("map_regm", args(1, &[Text, Text])),
    ("map_str", args(1, &[Text, Text])),
    ("map_str_int", args(1, &[Text, Integer])),
    ("map_str_ip", args(1, &[Text, Text])),
    ("map_sub", args(1, &[Text, Text])),
    ("map_sub_int", args(1, &[Text, Integer])),
    ("map_sub_ip", args(1, &[Text, Text])),
    ("mod", args(1, &[Text])),
    ("mqtt_field_value", args(2, &[Text, Text])),
    ("mqtt_is_valid", NO_ARGS),
    ("mul", args(1, &[Text])),
    ("nbsrv", NO_ARGS),
    ("neg", NO_ARGS),
    ("not", NO_ARGS),
    ("odd", NO_ARGS),
    ("or", args(1, &[Text])),
    ("port_only", NO_ARGS),
    ("protobuf", args(1, &[ProtobufField, Text])),
    ("regsub", args(2, &[Regex, Text, Text])),
    ("rtrim", args(1, &[Text])),
    ("sdbm", args(0, &[Integer])),
    ("secure_memcmp", args(1, &[Text])),
    ("set-var", args(1, &[Text, Text, Text, Text, Text])),
    ("sha1", NO_ARGS),
    ("sha2", args(0, &[Integer])),
    ("srv_queue", NO_ARGS),
    ("strcmp", args(1, &[Text])),
    ("sub", args(1, &[Text])),
    ("table_bytes_in_rate", args(1, &[Table])),
    ("table_bytes_out_rate", args(1, &[Table])),
    ("table_conn_cnt", args(1, &[Table])),
    ("table_conn_cur", args(1, &[Table])),
    ("table_conn_rate", args(1, &[Table])),
    ("table_expire", args(1, &[Table, Integer])),
    ("table_gpc", args(2, &[Integer, Table])),
    ("table_gpc0", args(1, &[Table])),
    ("table_gpc0_rate", args(1, &[Table])),
    ("table_gpc1", args(1, &[Table])),
    ("table_gpc1_rate", args(1, &[Table])),
    ("table_gpc_rate", args(2, &[Integer, Table])),
    ("table_gpt", args(2, &[Integer, Table])),
    ("table_gpt0", args(1, &[Table])),
    ("table_http_err_cnt", args(1, &[Table])),
    ("table_http_err_rate", args(1, &[Table])),
    ("table_http_fail_cnt", args(1, &[Table])),
    ("table_http_fail_rate", args(1, &[Table])),
    ("table_http_req_cnt", args(1, &[Table])),
    ("table_http_req_rate", args(1, &[Table])),
    ("table_idle", args(1, &[Table, Integer])),
    ("table_kbytes_in", args(1, &[Table])),
    ("table_kbytes_out", args(1, &[Table])),
    ("table_server_id", args(1, &[Table])),
    ("table_sess_cnt", args(1, &[Table])),
    ("table_sess_rate", args(1, &[Table])),
    ("table_trackers", args(1, &[Table])),
    ("ub64dec", NO_ARGS),
    ("ub64enc", NO_ARGS),
    ("ungrpc", args(1, &[ProtobufField, Text])),
    ("unset-var", args(1, &[Text])),
    ("upper", NO_ARGS),
    ("url_dec", args(0, &[Integer])),
    ("url_enc", args(1, &[Text])),
    ("utime", args(1, &[Text, Integer])),
    ("word", args(2, &[Integer, Text, Integer])),
    ("wt6", args(0, &[Integer])),
    ("xor", args(1, &[Text])),
    ("xxh3", args(0, &[Integer])),
    ("xxh32", args(0, &[Integer])),
    ("xxh64", args(0, &[Integer])),
];

/// What the sample fetches of 3.0 and 3.2 changed since the line before: added or with new
/// arguments (`Some`), or gone (`None`). Sorted by name, then line.
const LATER_FETCHES: &[(&str, HaproxyVersion, Option<SampleSignature>)] = &[
    ("accept_date", HaproxyVersion::V3_0, Some(args(0, &[Text]))),
    (
        "acl",
        HaproxyVersion::V3_0,
        Some(args(
            1,
            &[
                Text, Text, Text, Text, Text, Text, Text, Text, Text, Text, Text, Text,
            ],
        )),
    ),
    ("act_conn", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bc.timer.connect", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bc_be_queue", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bc_err_name", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bc_glitches", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bc_nb_streams", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bc_reused", HaproxyVersion::V3_2, Some(NO_ARGS)),
    ("bc_rtt", HaproxyVersion::V3_0, Some(args(0, &[Text]))),
    ("bc_rttvar", HaproxyVersion::V3_0, Some(args(0, &[Text]))),
    (
        "bc_setting_streams_limit",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    ("bc_setting_streams_limit", HaproxyVersion::V3_2, None),
    (
        "bc_settings_streams_limit",
        HaproxyVersion::V3_2,
        Some(NO_ARGS),
    ),
    ("bc_srv_queue", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bs.aborted", HaproxyVersion::V3_0, Some(NO_ARGS)),
    (
        "bs.debug_str",
        HaproxyVersion::V3_0,
        Some(args(0, &[Integer])),
    ),
    ("bs.id", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bs.rst_code", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bytes_in", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("bytes_out", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("cur_client_timeout", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("fc.timer.handshake", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("fc.timer.total", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("fc_err_name", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("fc_glitches", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("fc_nb_streams", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("fc_pp_tlv", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    (
        "fc_settings_streams_limit",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    ("fs.aborted", HaproxyVersion::V3_0, Some(NO_ARGS)),
    (
        "fs.debug_str",
        HaproxyVersion::V3_0,
        Some(args(0, &[Integer])),
    ),
    ("fs.id", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("fs.rst_code", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("last_entity", HaproxyVersion::V3_2, Some(NO_ARGS)),
    ("pid", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("query", HaproxyVersion::V3_2, Some(args(0, &[Text]))),
    ("quic_enabled", HaproxyVersion::V3_0, Some(NO_ARGS)),
    (
        "req.body_param",
        HaproxyVersion::V3_0,
        Some(args(0, &[Text, Text])),
    ),
    (
        "req.cook_names",
        HaproxyVersion::V3_0,
        Some(args(0, &[Text])),
    ),
    ("req.ssl_cipherlist", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "req.ssl_keyshare_groups",
        HaproxyVersion::V3_2,
        Some(NO_ARGS),
    ),
    ("req.ssl_sigalgs", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "req.ssl_supported_groups",
        HaproxyVersion::V3_2,
        Some(NO_ARGS),
    ),
    ("req.timer.hdr", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("req.timer.idle", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("req.timer.queue", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("req.timer.tq", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("request_date", HaproxyVersion::V3_0, Some(args(0, &[Text]))),
    (
        "res.cook_names",
        HaproxyVersion::V3_0,
        Some(args(0, &[Text])),
    ),
    ("res.timer.data", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("res.timer.hdr", HaproxyVersion::V3_0, Some(NO_ARGS)),
    (
        "sc0_glitch_cnt",
        HaproxyVersion::V3_0,
        Some(args(0, &[Table])),
    ),
    (
        "sc0_glitch_rate",
        HaproxyVersion::V3_0,
        Some(args(0, &[Table])),
    ),
    ("sc0_key", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "sc1_glitch_cnt",
        HaproxyVersion::V3_0,
        Some(args(0, &[Table])),
    ),
    (
        "sc1_glitch_rate",
        HaproxyVersion::V3_0,
        Some(args(0, &[Table])),
    ),
    ("sc1_key", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "sc2_glitch_cnt",
        HaproxyVersion::V3_0,
        Some(args(0, &[Table])),
    ),
    (
        "sc2_glitch_rate",
        HaproxyVersion::V3_0,
        Some(args(0, &[Table])),
    ),
    ("sc2_key", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "sc_glitch_cnt",
        HaproxyVersion::V3_0,
        Some(args(1, &[Integer, Table])),
    ),
    (
        "sc_glitch_rate",
        HaproxyVersion::V3_0,
        Some(args(1, &[Integer, Table])),
    ),
    ("sc_key", HaproxyVersion::V3_2, Some(args(1, &[Integer]))),
    ("server_status", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("spoe.engine-id", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "src_glitch_cnt",
        HaproxyVersion::V3_0,
        Some(args(1, &[Table])),
    ),
    (
        "src_glitch_rate",
        HaproxyVersion::V3_0,
        Some(args(1, &[Table])),
    ),
    (
        "ssl_bc_client_early_traffic_secret",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    (
        "ssl_bc_client_handshake_traffic_secret",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    (
        "ssl_bc_client_traffic_secret_0",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    ("ssl_bc_curve", HaproxyVersion::V3_0, Some(NO_ARGS)),
    (
        "ssl_bc_early_exporter_secret",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    (
        "ssl_bc_exporter_secret",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    (
        "ssl_bc_server_handshake_traffic_secret",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    (
        "ssl_bc_server_traffic_secret_0",
        HaproxyVersion::V3_0,
        Some(NO_ARGS),
    ),
    ("ssl_bc_sni", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "ssl_c_r_dn",
        HaproxyVersion::V3_0,
        Some(args(0, &[Text, Integer, Text])),
    ),
    ("ssl_c_san", HaproxyVersion::V3_2, Some(NO_ARGS)),
    ("ssl_fc_curve", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("ssl_fc_early_rcvd", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "ssl_fc_sigalgs_bin",
        HaproxyVersion::V3_2,
        Some(args(0, &[Integer])),
    ),
    (
        "ssl_fc_supported_versions_bin",
        HaproxyVersion::V3_2,
        Some(args(0, &[Integer])),
    ),
    ("term_events", HaproxyVersion::V3_2, Some(NO_ARGS)),
    ("txn.conn_retries", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("txn.id32", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("txn.redispatched", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("txn.sess_term_state", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("txn.status", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("txn.timer.total", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("txn.timer.user", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("uptime", HaproxyVersion::V3_0, Some(NO_ARGS)),
    (
        "url_param",
        HaproxyVersion::V3_0,
        Some(args(0, &[Text, Text, Text])),
    ),
    (
        "urlp",
        HaproxyVersion::V3_0,
        Some(args(0, &[Text, Text, Text])),
    ),
    (
        "urlp_val",
        HaproxyVersion::V3_0,
        Some(args(0, &[Text, Text, Text])),
    ),
    ("waiting_entity", HaproxyVersion::V3_2, Some(NO_ARGS)),
];

/// The same for converters.
const LATER_CONVERTERS: &[(&str, HaproxyVersion, Option<SampleSignature>)] = &[
    (
        "aes_gcm_enc",
        HaproxyVersion::V3_0,
        Some(args(4, &[Integer, Text, Text, Text])),
    ),
    ("base2", HaproxyVersion::V3_2, Some(NO_ARGS)),
    ("bytes", HaproxyVersion::V3_0, Some(args(1, &[Text, Text]))),
    ("date", HaproxyVersion::V3_2, Some(NO_ARGS)),
    ("has_ctl", HaproxyVersion::V3_2, Some(args(0, &[Text]))),
    (
        "le2dec",
        HaproxyVersion::V3_2,
        Some(args(1, &[Text, Integer, Integer])),
    ),
    ("map_beg_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    ("map_dir_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    ("map_dom_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    ("map_end_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    ("map_int_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    ("map_ip_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    ("map_reg_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    ("map_str_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    ("map_sub_key", HaproxyVersion::V3_0, Some(args(1, &[Text]))),
    (
        "ms_ltime",
        HaproxyVersion::V3_0,
        Some(args(1, &[Text, Integer])),
    ),
    (
        "ms_utime",
        HaproxyVersion::V3_0,
        Some(args(1, &[Text, Integer])),
    ),
    ("param", HaproxyVersion::V3_0, Some(args(1, &[Text, Text]))),
    (
        "rfc7239_field",
        HaproxyVersion::V3_0,
        Some(args(1, &[Text])),
    ),
    ("rfc7239_is_valid", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("rfc7239_n2nn", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("rfc7239_n2np", HaproxyVersion::V3_0, Some(NO_ARGS)),
    ("rfc7239_nn", HaproxyVersion::V3_2, Some(NO_ARGS)),
    ("rfc7239_np", HaproxyVersion::V3_2, Some(NO_ARGS)),
    ("srv_is_up", HaproxyVersion::V3_2, Some(NO_ARGS)),
    (
        "table_clr_gpc",
        HaproxyVersion::V3_2,
        Some(args(2, &[Integer, Table])),
    ),
    (
        "table_clr_gpc0",
        HaproxyVersion::V3_2,
        Some(args(1, &[Table])),
    ),
    (
        "table_clr_gpc1",
        HaproxyVersion::V3_2,
        Some(args(1, &[Table])),
    ),
    (
        "table_glitch_cnt",
        HaproxyVersion::V3_0,
        Some(args(1, &[Table])),
    ),
    (
        "table_glitch_rate",
        HaproxyVersion::V3_0,
        Some(args(1, &[Table])),
    ),
    (
        "table_inc_gpc",
        HaproxyVersion::V3_2,
        Some(args(2, &[Integer, Table])),
    ),
    (
        "table_inc_gpc0",
        HaproxyVersion::V3_2,
        Some(args(1, &[Table])),
    ),
    (
        "table_inc_gpc1",
        HaproxyVersion::V3_2,
        Some(args(1, &[Table])),
    ),
    (
        "us_ltime",
        HaproxyVersion::V3_0,
        Some(args(1, &[Text, Integer])),
    ),
    (
        "us_utime",
        HaproxyVersion::V3_0,
        Some(args(1, &[Text, Integer])),
    ),
    (
        "when",
        HaproxyVersion::V3_0,
        Some(args(1, &[Text, Text, Text])),
    ),
    ("x509_v_err_str", HaproxyVersion::V3_0, Some(NO_ARGS)),
];

/// ACL keywords of HAProxy 2.6.12 (manual 7.3 "ACL name" columns) that are not fetch names of
/// their own or that stand for another fetch, with the fetch whose arguments they take.
const ACL_KEYWORDS: &[(&str, &str)] = &[
    ("base", "base"),
    ("base_beg", "base"),
    ("base_dir", "base"),
    ("base_dom", "base"),
    ("base_end", "base"),
    ("base_len", "base"),
    ("base_reg", "base"),
    ("base_sub", "base"),
    ("cook", "req.cook"),
    ("cook_beg", "req.cook"),
    ("cook_dir", "req.cook"),
    ("cook_dom", "req.cook"),
    ("cook_end", "req.cook"),
    ("cook_len", "req.cook"),
    ("cook_reg", "req.cook"),
    ("cook_sub", "req.cook"),
    ("hdr", "req.hdr"),
    ("hdr_beg", "req.hdr"),
    ("hdr_dir", "req.hdr"),
    ("hdr_dom", "req.hdr"),
    ("hdr_end", "req.hdr"),
    ("hdr_len", "req.hdr"),
    ("hdr_reg", "req.hdr"),
    ("hdr_sub", "req.hdr"),
    ("http_auth_group", "http_auth_group"),
    ("method", "method"),
    ("path", "path"),
    ("path_beg", "path"),
    ("path_dir", "path"),
    ("path_dom", "path"),
    ("path_end", "path"),
    ("path_len", "path"),
    ("path_reg", "path"),
    ("path_sub", "path"),
    ("payload", "req.payload"),
    ("payload_lv", "req.payload_lv"),
    ("req.ssl_ver", "req.ssl_ver"),
    ("req_rdp_cookie", "req.rdp_cookie"),
    ("req_rdp_cookie_cnt", "req.rdp_cookie_cnt"),
    ("req_ssl_sni", "req.ssl_sni"),
    ("req_ssl_ver", "req.ssl_ver"),
    ("req_ver", "req.ver"),
    ("resp_ver", "res.ver"),
    ("scook", "res.cook"),
    ("scook_beg", "res.cook"),
    ("scook_dir", "res.cook"),
    ("scook_dom", "res.cook"),
    ("scook_end", "res.cook"),
    ("scook_len", "res.cook"),
    ("scook_reg", "res.cook"),
    ("scook_sub", "res.cook"),
    ("shdr", "res.hdr"),
    ("shdr_beg", "res.hdr"),
    ("shdr_dir", "res.hdr"),
    ("shdr_dom", "res.hdr"),
    ("shdr_end", "res.hdr"),
    ("shdr_len", "res.hdr"),
    ("shdr_reg", "res.hdr"),
    ("shdr_sub", "res.hdr"),
    ("ssl_fc_sni_end", "ssl_fc_sni"),
    ("ssl_fc_sni_reg", "ssl_fc_sni"),
    ("url", "url"),
    ("url_beg", "url"),
    ("url_dir", "url"),
    ("url_dom", "url"),
    ("url_end", "url"),
    ("url_len", "url"),
    ("url_reg", "url"),
    ("url_sub", "url"),
    ("urlp", "urlp"),
    ("urlp_beg", "urlp"),
    ("urlp_dir", "urlp"),
    ("urlp_dom", "urlp"),
    ("urlp_end", "urlp"),
    ("urlp_len", "urlp"),
    ("urlp_reg", "urlp"),
    ("urlp_sub", "urlp"),
];

// ---------------------------------------------------------------------------------------------
// Lookups.

/// The value paired with `key` in a table sorted by key.
fn lookup<T: Copy>(table: &[(&str, T)], key: &str) -> Option<T> {
    table
        .binary_search_by(|(candidate, _)| (*candidate).cmp(key))
        .ok()
        .and_then(|index| table.get(index))
        .map(|(_, value)| *value)
}

/// Names that HAProxy registers at run time or in modules Debian leaves out: Lua's
/// `core.register_fetches` and `core.register_converters` (`lua.<name>`), 51Degrees,
/// DeviceAtlas and WURFL. Their arguments are not checked.
fn registered_elsewhere(name: &str) -> bool {
    name.starts_with("lua.")
        || matches!(
            name,
            "51d.all"
                | "51d.single"
                | "da-csv-conv"
                | "da-csv-fetch"
                | "wurfl-get"
                | "wurfl-get-all"
        )
}

/// Lookup result for a fetch or converter name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// In the tables, with these arguments.
    Signature(SampleSignature),
    /// Registered elsewhere; arguments unchecked.
    Unchecked,
}

/// How the tables of `target` know a sample fetch: `None` when that line has none of that
/// name.
pub fn known_fetch(name: &str, target: HaproxyVersion) -> Option<Known> {
    if registered_elsewhere(name) {
        return Some(Known::Unchecked);
    }
    known_at(SAMPLE_FETCHES, LATER_FETCHES, name, target)
}

/// How the tables of `target` know a converter: `None` when that line has none of that name.
pub fn known_converter(name: &str, target: HaproxyVersion) -> Option<Known> {
    if registered_elsewhere(name) {
        return Some(Known::Unchecked);
    }
    known_at(SAMPLE_CONVERTERS, LATER_CONVERTERS, name, target)
}

/// A name in 2.6's table with the changes of every documented line up to `target` applied.
/// A change of a later documented line that `target` may already have (it lies between the
/// two lines) leaves the name's arguments unchecked.
fn known_at(
    base: &[(&str, SampleSignature)],
    later: &[(&str, HaproxyVersion, Option<SampleSignature>)],
    name: &str,
    target: HaproxyVersion,
) -> Option<Known> {
    let mut current = lookup(base, name);
    let first = later.partition_point(|(candidate, _, _)| *candidate < name);
    let changes = later[first..]
        .iter()
        .take_while(|(candidate, _, _)| *candidate == name);
    for (_, line, change) in changes {
        if *line <= target {
            current = *change;
        } else if !certainly_before(target, *line) {
            return Some(Known::Unchecked);
        }
    }
    current.map(Known::Signature)
}

// ---------------------------------------------------------------------------------------------
// Expressions.

/// Where an expression is written, which decides how HAProxy finds its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpressionPlace {
    /// A whole word of a rule (`set-var`, `track-sc0`, `stick on`, ...): anything after the
    /// fetch and its converters that is not a comma is an error.
    Word,
    /// The first word of an ACL (an `acl` line or `{ ... }` in a condition): like `Word`,
    /// and ACL keywords such as `hdr_beg(host)` are allowed too.
    Acl,
    /// After `%[` in a log-format string: the expression ends at the first character that is
    /// not part of it, which the caller expects to be `]`.
    LogFormat,
}

/// An argument HAProxy resolves after parsing: a backend, frontend, server, table or user
/// list name, or a regex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedArgument {
    /// The fetch or converter it belongs to.
    pub keyword: String,
    pub arg_type: SampleArgType,
    /// The argument text, unquoted.
    pub value: String,
}

/// A parsed sample expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleExpression {
    /// Byte offset of the first character after the expression.
    pub end: usize,
    /// The arguments that HAProxy resolves later, in order.
    pub resolved: Vec<ResolvedArgument>,
}

/// Whether HAProxy 2.6 counts `byte` as part of a fetch or converter name.
fn is_name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b'+')
}

/// The length of the name at the start of `text`.
fn name_length(text: &str) -> usize {
    text.bytes().take_while(|byte| is_name_byte(*byte)).count()
}

/// What one argument list parsed into: where it ended and its arguments.
struct ArgumentList {
    end: usize,
    values: Vec<(SampleArgType, String)>,
}

/// Parses the argument list at the start of `text` (an opening parenthesis, or nothing)
/// the way HAProxy 2.6's `make_arg_list` does, against `signature`. The error is HAProxy's
/// own wording.
fn parse_arguments(text: &str, signature: SampleSignature) -> Result<ArgumentList, String> {
    let bytes = text.as_bytes();
    let types = signature.types;
    let mut values = Vec::new();
    let Some(b'(') = bytes.first() else {
        // Without parentheses, a mandatory first argument is taken as empty.
        if signature.mandatory == 0 {
            return Ok(ArgumentList { end: 0, values });
        }
        let first = types[0];
        if !first.is_text() {
            return Err(format!(
                "expected type '{}' at position 1, but got nothing",
                first.haproxy_name()
            ));
        }
        if signature.mandatory > 1 {
            return Err(format!(
                "missing arguments (got 1/{}), type '{}' expected",
                signature.mandatory,
                types[1].haproxy_name()
            ));
        }
        values.push((first, String::new()));
        return Ok(ArgumentList { end: 0, values });
    };
    let mut at = 1;
    let empty_list = bytes.get(at) == Some(&b')');
    if !types.is_empty() && (!empty_list || signature.mandatory > 0) {
        while values.len() < types.len() {
            let arg_type = types[values.len()];
            let mut value = Vec::new();
            let (mut single, mut double) = (false, false);
            while let Some(&byte) = bytes.get(at) {
                match byte {
                    b'"' if !single => double = !double,
                    b'\'' if !double => single = !single,
                    b'\\' if !single => {
                        match bytes.get(at + 1) {
                            Some(escaped @ (b'\\' | b' ' | b'"' | b'\'')) => {
                                value.push(*escaped);
                                at += 1;
                            }
                            // Other escapes (\r, \n, \t, \xHH) stand for one byte; which one
                            // does not matter here.
                            Some(b'r' | b'n' | b't') => {
                                value.push(b'?');
                                at += 1;
                            }
                            _ => value.push(byte),
                        }
                    }
                    b',' | b')' if !single && !double => break,
                    _ => value.push(byte),
                }
                at += 1;
            }
            let value = String::from_utf8_lossy(&value).into_owned();
            let position = values.len() + 1;
            if value.is_empty() && !arg_type.is_text() {
                return Err(format!(
                    "expected type '{}' at position {position}, but got nothing",
                    arg_type.haproxy_name()
                ));
            }
            if !arg_type.accepts(&value) {
                return Err(format!(
                    "failed to parse '{value}' as type '{}' at position {position}",
                    arg_type.haproxy_name()
                ));
            }
            values.push((arg_type, value));
            match bytes.get(at) {
                Some(b',') if values.len() < types.len() => at += 1,
                _ => break,
            }
        }
    }
    if values.len() < signature.mandatory {
        return Err(format!(
            "missing arguments (got {}/{}), type '{}' expected",
            values.len(),
            signature.mandatory,
            types[values.len()].haproxy_name()
        ));
    }
    match bytes.get(at) {
        Some(b')') => Ok(ArgumentList {
            end: at + 1,
            values,
        }),
        Some(_) => Err(format!("expected ')' before '{}'", &text[at..])),
        None => Err("expected ')'".to_owned()),
    }
}

/// The scopes a variable name starts with (manual 2.8, `set-var`).
pub const VARIABLE_SCOPES: &[&str] = &["check", "proc", "req", "res", "sess", "txn"];

/// What HAProxy 2.6 refuses in the variable name `name` (`txn.user`): it must start with a
/// scope and a dot, and hold only letters, digits, '_' and '.'.
pub fn variable_name_problem(name: &str) -> Option<String> {
    let valid_scope = name
        .split_once('.')
        .is_some_and(|(scope, rest)| VARIABLE_SCOPES.contains(&scope) && !rest.is_empty());
    if !valid_scope {
        return Some(format!(
            "invalid variable name '{name}'. A variable name must be start by its scope. The scope can be 'proc', 'sess', 'txn', 'req', 'res' or 'check'"
        ));
    }
    let bad_at = name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))?;
    Some(format!("invalid syntax at char '{}'", &name[bad_at..]))
}

/// Converters whose argument is an integer or a variable name (manual 7.3.1, `add`).
const INTEGER_OR_VARIABLE_CONVERTERS: &[&str] =
    &["add", "and", "div", "mod", "mul", "or", "sub", "xor"];

/// The checks HAProxy 2.6 makes on the arguments of some keywords once they are parsed:
/// variable names of `var`, `set-var` and `unset-var`, and the integer-or-variable argument
/// of the arithmetic converters.
fn validate_arguments(
    keyword: &str,
    converter: bool,
    values: &[(SampleArgType, String)],
) -> Result<(), String> {
    let Some((_, first)) = values.first() else {
        return Ok(());
    };
    let names_variable = if converter {
        matches!(keyword, "set-var" | "unset-var")
    } else {
        keyword == "var"
    };
    let problem = if names_variable {
        variable_name_problem(first)
    } else if converter && keyword == "bytes" && values[0].0 == Text {
        // From 3.0 `bytes` takes numbers or variable names, and no negative number.
        values
            .iter()
            .map(|(_, value)| value)
            .find(|value| {
                !value.bytes().all(|b| b.is_ascii_digit()) && variable_name_problem(value).is_some()
            })
            .map(|value| format!("'{value}' is neither a non-negative number nor a variable name"))
    } else if converter && keyword == "param" {
        values
            .get(1)
            .filter(|(_, delimiter)| delimiter.chars().count() != 1)
            .map(|_| "Delimiter must be exactly 1 character".to_owned())
    } else if converter && INTEGER_OR_VARIABLE_CONVERTERS.contains(&keyword) {
        // An empty argument counts as 0.
        (!first.is_empty() && !Integer.accepts(first) && variable_name_problem(first).is_some())
            .then(|| "expects an integer or a variable name".to_owned())
    } else {
        None
    };
    match problem {
        Some(problem) => Err(format!(
            "invalid args in {} '{keyword}' : {problem}",
            if converter {
                "converter"
            } else {
                "fetch method"
            }
        )),
        None => Ok(()),
    }
}

/// Every fetch and converter name some documented line has (the ones registered elsewhere,
/// such as `lua.*`, aside): fetches, then converters. For the test that holds the tables
/// against each line's real haproxy (`keyword_tables`); the schema check looks names up.
pub fn table_names() -> (Vec<&'static str>, Vec<&'static str>) {
    let names =
        |base: &[(&'static str, SampleSignature)],
         later: &[(&'static str, HaproxyVersion, Option<SampleSignature>)]| {
            let mut names: Vec<&'static str> = base
                .iter()
                .map(|(name, _)| *name)
                .chain(later.iter().map(|(name, _, _)| *name))
                .collect();
            names.sort_unstable();
            names.dedup();
            names
        };
    (
        names(SAMPLE_FETCHES, LATER_FETCHES),
        names(SAMPLE_CONVERTERS, LATER_CONVERTERS),
    )
}

/// The ACL keywords and the fetch each stands for, the same on every documented line. For
/// the test that holds them against each line's real haproxy (`keyword_tables`).
pub fn acl_keywords() -> &'static [(&'static str, &'static str)] {
    ACL_KEYWORDS
}

/// The fetch an ACL keyword stands for (`hdr_beg` → `hdr`), the same on every documented
/// line.
pub fn acl_keyword_fetch(name: &str) -> Option<&'static str> {
    lookup(ACL_KEYWORDS, name)
}

/// Parses the sample expression at the start of `text`, written at `place`, as HAProxy 2.6
/// does, and returns where it ends and the arguments HAProxy resolves later. The error
/// message is HAProxy's own wording (`unknown fetch method 'x'`, `unknown converter 'y'`,
/// `fetch method 'z' : missing arguments ...`).
pub fn parse_sample_expression(
    text: &str,
    place: ExpressionPlace,
    target: HaproxyVersion,
) -> Result<SampleExpression, String> {
    let mut resolved = Vec::new();
    let name_end = name_length(text);
    let name = &text[..name_end];
    if name.is_empty() {
        return Err("missing fetch method".to_owned());
    }
    let acl_fetch = (place == ExpressionPlace::Acl)
        .then(|| acl_keyword_fetch(name))
        .flatten();
    let (label, known) = match acl_fetch {
        Some(fetch) => (format!("ACL keyword '{name}'"), known_fetch(fetch, target)),
        None => (format!("fetch method '{name}'"), known_fetch(name, target)),
    };
    let mut at = name_end;
    match known {
        None => return Err(format!("unknown fetch method '{name}'")),
        Some(Known::Unchecked) => at += unchecked_arguments_length(&text[at..]),
        Some(Known::Signature(signature)) => {
            let list = parse_arguments(&text[at..], signature)
                .map_err(|message| format!("{label} : {message}"))?;
            at += list.end;
            validate_arguments(acl_fetch.unwrap_or(name), false, &list.values)?;
            collect_resolved(name, list.values, &mut resolved);
        }
    }
    let mut converter: Option<&str> = None;
    loop {
        let rest = &text[at..];
        if !rest.is_empty() && !rest.starts_with(',') {
            if place == ExpressionPlace::LogFormat {
                break;
            }
            return Err(match converter {
                Some(converter) => format!("missing comma after converter '{converter}'"),
                None => format!("missing comma after fetch keyword '{name}'"),
            });
        }
        at += rest.bytes().take_while(|byte| *byte == b',').count();
        let rest = &text[at..];
        if rest.is_empty() {
            // A word ending in a comma may continue in the next word: not judged here.
            break;
        }
        let converter_name = &rest[..name_length(rest)];
        at += converter_name.len();
        match known_converter(converter_name, target) {
            None => return Err(format!("unknown converter '{converter_name}'")),
            Some(Known::Unchecked) => at += unchecked_arguments_length(&text[at..]),
            Some(Known::Signature(signature)) => {
                let list = parse_arguments(&text[at..], signature)
                    .map_err(|message| format!("converter '{converter_name}' : {message}"))?;
                at += list.end;
                validate_arguments(converter_name, true, &list.values)?;
                collect_resolved(converter_name, list.values, &mut resolved);
            }
        }
        converter = Some(converter_name);
    }
    Ok(SampleExpression { end: at, resolved })
}

/// The length of a parenthesised argument list at the start of `text` whose arguments are
/// not checked (up to the first `)`), or 0 when there is none.
fn unchecked_arguments_length(text: &str) -> usize {
    if !text.starts_with('(') {
        return 0;
    }
    text.find(')').map_or(text.len(), |close| close + 1)
}

fn collect_resolved(
    keyword: &str,
    values: Vec<(SampleArgType, String)>,
    resolved: &mut Vec<ResolvedArgument>,
) {
    for (arg_type, value) in values {
        if arg_type.is_text() && arg_type != Text {
            resolved.push(ResolvedArgument {
                keyword: keyword.to_owned(),
                arg_type,
                value,
            });
        }
    }
}

/// Parses every `%[...]` expression of the log-format string `text` (also `%{flags}[...]`;
/// `%%` is a literal percent sign) and returns them, or the first error HAProxy 2.6 reports.
pub fn parse_log_format_expressions(
    text: &str,
    target: HaproxyVersion,
) -> Result<Vec<SampleExpression>, String> {
    let bytes = text.as_bytes();
    let mut expressions = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'%' {
            at += 1;
            continue;
        }
        at += 1;
        match bytes.get(at) {
            Some(b'%') => {
                at += 1;
                continue;
            }
            Some(b'{') => match text[at..].find('}') {
                Some(close) => at += close + 1,
                None => break,
            },
            _ => {}
        }
        if bytes.get(at) != Some(&b'[') {
            continue;
        }
        let start = at + 1;
        let expression =
            parse_sample_expression(&text[start..], ExpressionPlace::LogFormat, target).map_err(
                |message| {
                    format!(
                        "failed to parse sample expression <{}> : {message}",
                        &text[start..]
                    )
                },
            )?;
        let end = start + expression.end;
        let parsed = &text[start..end];
        match text[end..].chars().next() {
            Some(']') => at = end + 1,
            Some(found) => {
                return Err(format!(
                    "expected ']' after '{parsed}', but found '{found}'"
                ));
            }
            None => return Err(format!("missing ']' after '{parsed}'")),
        }
        expressions.push(expression);
    }
    Ok(expressions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_sorted(name: &str, keys: Vec<&str>) {
        for pair in keys.windows(2) {
            assert!(
                pair[0] < pair[1],
                "{name}: {:?} before {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn the_fetch_converter_and_acl_tables_are_sorted_so_binary_search_finds_every_entry() {
        assert_sorted(
            "SAMPLE_FETCHES",
            SAMPLE_FETCHES.iter().map(|(k, _)| *k).collect(),
        );
        assert_sorted(
            "SAMPLE_CONVERTERS",
            SAMPLE_CONVERTERS.iter().map(|(k, _)| *k).collect(),
        );
        assert_sorted(
            "ACL_KEYWORDS",
            ACL_KEYWORDS.iter().map(|(k, _)| *k).collect(),
        );
        for (name, fetch) in ACL_KEYWORDS {
            assert!(
                known_fetch(fetch, HaproxyVersion::V2_6).is_some(),
                "ACL keyword {name} stands for unknown {fetch}"
            );
        }
        for (name, signature) in SAMPLE_FETCHES.iter().chain(SAMPLE_CONVERTERS) {
            assert!(signature.mandatory <= signature.types.len(), "{name}");
        }
    }

    fn word(text: &str) -> Result<SampleExpression, String> {
        parse_sample_expression(text, ExpressionPlace::Word, HaproxyVersion::V2_6)
    }

    #[test]
    fn fetches_and_converters_of_2_6_parse_and_later_ones_are_unknown() {
        assert!(word("req.hdr(host),lower,map_str(hosts.map,default)").is_ok());
        assert!(word("base32+src").is_ok());
        assert!(
            word("str").is_ok(),
            "a missing text argument is taken as empty"
        );
        assert!(word("lua.my_fetch(1),lua.my_conv").is_ok());
        assert_eq!(
            word("req.cook_names"),
            Err("unknown fetch method 'req.cook_names'".into())
        );
        assert_eq!(
            word("var(txn.in),has_ctl"),
            Err("unknown converter 'has_ctl'".into())
        );
        assert_eq!(word("(arg)"), Err("missing fetch method".into()));
        assert_eq!(word("STR(a)"), Err("unknown fetch method 'STR'".into()));
    }

    #[test]
    fn argument_counts_and_integer_arguments_are_those_haproxy_2_6_parses() {
        assert!(word("str(a),field(-1,y)").is_ok());
        assert!(word("rand()").is_ok());
        assert!(word("str('a)')").is_ok());
        assert_eq!(
            word("url_param(QS_arg,,i)"),
            Err("fetch method 'url_param' : expected ')' before ',i)'".into())
        );
        assert_eq!(
            word("var(txn.input),bytes(txn.var_start)"),
            Err("converter 'bytes' : failed to parse 'txn.var_start' as type 'integer' at position 1".into())
        );
        assert_eq!(
            word("str(a),field(1)"),
            Err("converter 'field' : missing arguments (got 1/2), type 'string' expected".into())
        );
        assert_eq!(
            word("int()"),
            Err(
                "fetch method 'int' : expected type 'integer' at position 1, but got nothing"
                    .into()
            )
        );
        assert_eq!(
            word("src(x)"),
            Err("fetch method 'src' : expected ')' before 'x)'".into())
        );
        assert_eq!(
            word("req.hdr(host)x"),
            Err("missing comma after fetch keyword 'req.hdr'".into())
        );
        let expression = word("srv_conn(be/www),add(1)").expect("parses");
        assert_eq!(expression.resolved.len(), 1);
        assert_eq!(expression.resolved[0].arg_type, SampleArgType::Server);
        assert_eq!(expression.resolved[0].value, "be/www");
    }

    #[test]
    fn variable_names_start_with_their_scope() {
        assert!(word("var(txn.a.b_9),add(txn.n),sub(-2),set-var(req.x)").is_ok());
        assert_eq!(
            word("var(foo)"),
            Err("invalid args in fetch method 'var' : invalid variable name 'foo'. A variable name must be start by its scope. The scope can be 'proc', 'sess', 'txn', 'req', 'res' or 'check'".into())
        );
        assert_eq!(
            word("str(1),set-var(txn.x-y)"),
            Err("invalid args in converter 'set-var' : invalid syntax at char '-y'".into())
        );
        assert_eq!(
            word("str(1),add(foo)"),
            Err("invalid args in converter 'add' : expects an integer or a variable name".into())
        );
        assert!(
            word("str(1),add()").is_ok(),
            "an empty argument counts as 0"
        );
        assert_eq!(variable_name_problem("check.x"), None);
        assert!(variable_name_problem("txn.").is_some());
    }

    #[test]
    fn acl_keywords_are_expressions_only_in_acls() {
        let acl = |text| parse_sample_expression(text, ExpressionPlace::Acl, HaproxyVersion::V2_6);
        assert!(acl("hdr_beg(host),lower").is_ok());
        assert!(acl("hdr_beg,lower").is_ok());
        assert!(word("hdr_beg(host)").is_err());
        assert_eq!(
            acl("path_beg(x)"),
            Err("ACL keyword 'path_beg' : expected ')' before 'x)'".into())
        );
    }

    #[test]
    fn log_format_expressions_end_at_a_closing_bracket() {
        let parsed = parse_log_format_expressions(
            "%[src] %{+Q}[req.hdr(host)] 100%% %t",
            HaproxyVersion::V2_6,
        );
        assert_eq!(parsed.map(|expressions| expressions.len()), Ok(2));
        assert_eq!(
            parse_log_format_expressions("%%[not-an-expression", HaproxyVersion::V2_6),
            Ok(vec![])
        );
        assert_eq!(
            parse_log_format_expressions("x %[hdr(arg))]", HaproxyVersion::V2_6),
            Err("expected ']' after 'hdr(arg)', but found ')'".into())
        );
        let error = parse_log_format_expressions("%[str(a),]", HaproxyVersion::V2_6)
            .expect_err("an empty converter");
        assert!(error.contains("unknown converter ''"), "{error}");
        let error = parse_log_format_expressions("%[fc_glitches]", HaproxyVersion::V2_6)
            .expect_err("a later fetch");
        assert!(
            error.contains("unknown fetch method 'fc_glitches'"),
            "{error}"
        );
    }

    #[test]
    fn each_line_knows_the_fetches_and_converters_its_own_build_registers() {
        use HaproxyVersion as V;
        let judge =
            |text: &str, target: V| parse_sample_expression(text, ExpressionPlace::Word, target);
        // Added in 3.0: unknown to 2.6, known to 3.0 and 3.2, unchecked for 2.8 (between).
        assert!(judge("fc_glitches", V::V2_6).is_err());
        assert!(judge("fc_glitches", V::V3_0).is_ok());
        assert!(judge("fc_glitches", V::V3_2).is_ok());
        assert!(judge("fc_glitches(1,2,3)", V::new(2, 8)).is_ok());
        // Dropped in 3.2.
        assert!(judge("bc_setting_streams_limit", V::V3_0).is_ok());
        let gone = judge("bc_setting_streams_limit", V::V3_2).expect_err("dropped in 3.2");
        assert!(
            gone.contains("unknown fetch method 'bc_setting_streams_limit'"),
            "{gone}"
        );
        // An argument 3.2 added to query.
        assert!(judge("query(x)", V::V3_0).is_err());
        assert!(judge("query(x)", V::V3_2).is_ok());
        // Converters too; a misspelled one stays unknown on every line.
        assert!(judge("req.hdr(forwarded),rfc7239_is_valid", V::V2_6).is_err());
        assert!(judge("req.hdr(forwarded),rfc7239_is_valid", V::V3_0).is_ok());
        assert!(judge("str(b/s),srv_is_up", V::V3_0).is_err());
        assert!(judge("str(b/s),srv_is_up", V::V3_2).is_ok());
        for target in [V::V2_6, V::V3_0, V::V3_2, V::new(3, 1)] {
            let error = judge("src,lowr", target).expect_err("a misspelled converter");
            assert!(
                error.contains("unknown converter 'lowr'"),
                "{target}: {error}"
            );
        }
    }

    #[test]
    fn bytes_takes_numbers_or_variables_from_3_0_and_param_a_one_character_delimiter() {
        use HaproxyVersion as V;
        let judge =
            |text: &str, target: V| parse_sample_expression(text, ExpressionPlace::Word, target);
        assert!(judge("var(txn.input),bytes(2,txn.len)", V::V3_0).is_ok());
        let negative = judge("var(txn.input),bytes(-1)", V::V3_0).expect_err("negative");
        assert!(
            negative.contains("invalid args in converter 'bytes'"),
            "{negative}"
        );
        // 2.6 reads both as integers and takes a negative one.
        assert!(judge("var(txn.input),bytes(-1)", V::V2_6).is_ok());
        assert!(judge("query,param(test,;)", V::V3_0).is_ok());
        let long = judge("query,param(test,0x26)", V::V3_2).expect_err("a long delimiter");
        assert!(
            long.contains("Delimiter must be exactly 1 character"),
            "{long}"
        );
    }
}
