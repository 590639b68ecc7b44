//! Talking to HAProxy over its Unix sockets: the master CLI (`reload`, `show proc`) and the
//! runtime API (`set server`, maps). One command per connection: haptor sends it, closes its
//! sending side, and reads the reply until HAProxy closes the connection. Also the parsers for the
//! replies the local target acts on, as HAProxy 2.6 gives them (the `Success=` reload reply
//! of 2.7 and later is understood too, and the refusal of 3.1 and later to reload while an
//! earlier reload is still in progress, which is asked again).

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::LocalTargetError;

/// Sends one command (or a command with its payload) and returns the whole reply.
pub(crate) async fn exchange(
    socket: &Path,
    request: &str,
    timeout: Duration,
) -> Result<String, LocalTargetError> {
    let command = request.lines().next().unwrap_or_default().to_string();
    let conversation = async {
        let mut stream =
            UnixStream::connect(socket)
                .await
                .map_err(|source| LocalTargetError::Unreachable {
                    socket: socket.to_path_buf(),
                    source,
                })?;
        let io_failure = |source| LocalTargetError::SocketIo {
            socket: socket.to_path_buf(),
            command: command.clone(),
            source,
        };
        let mut bytes = request.as_bytes().to_vec();
        if !request.ends_with('\n') {
            bytes.push(b'\n');
        }
        stream.write_all(&bytes).await.map_err(io_failure)?;
        // The master CLI answers only once the client stops sending (the runtime API does
        // either way).
        stream.shutdown().await.map_err(io_failure)?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.map_err(io_failure)?;
        Ok(String::from_utf8_lossy(&reply).into_owned())
    };
    match tokio::time::timeout(timeout, conversation).await {
        Ok(result) => result,
        Err(_) => Err(LocalTargetError::CommandTimeout {
            socket: socket.to_path_buf(),
            command,
            timeout,
        }),
    }
}

/// Escapes a word of a runtime API command line: the CLI splits words on spaces and commands
/// on `;`, and a backslash makes the next character literal.
pub(crate) fn cli_word(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        if matches!(c, ' ' | '\t' | ';' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The master process and its workers, from the master CLI's `show proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    pub master_pid: u32,
    /// Reloads the master went through, failed ones included.
    pub reloads: u32,
    /// Failed reloads since the last successful one (HAProxy resets it on success).
    pub failed: u32,
    /// Every worker pid, the current one and any older ones still finishing connections.
    pub workers: Vec<u32>,
    /// The newest worker (the one that has seen the fewest reloads).
    pub current_worker: Option<u32>,
}

/// Parses `show proc`:
///
/// ```text
/// #<PID>          <type>          <reloads>       <uptime>        <version>
/// 7421            master          4 [failed: 1]   0d00h00m17s     2.6.12-1+deb12u4
/// # workers
/// 7864            worker          1               0d00h00m07s     2.6.12-1+deb12u4
/// ```
pub fn parse_show_proc(text: &str) -> Option<ProcInfo> {
    let mut master: Option<(u32, u32, u32)> = None;
    let mut workers: Vec<(u32, u32)> = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(pid), Some(kind), Some(reloads)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        let (Ok(pid), Ok(reloads)) = (pid.parse::<u32>(), reloads.parse::<u32>()) else {
            continue;
        };
        match kind {
            "master" => {
                let failed = line
                    .split_once("[failed:")
                    .and_then(|(_, rest)| rest.split(']').next())
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                master = Some((pid, reloads, failed));
            }
            "worker" => workers.push((pid, reloads)),
            _ => {}
        }
    }
    let (master_pid, reloads, failed) = master?;
    let current_worker = workers
        .iter()
        .min_by_key(|(pid, reloads)| (*reloads, std::cmp::Reverse(*pid)))
        .map(|(pid, _)| *pid);
    Some(ProcInfo {
        master_pid,
        reloads,
        failed,
        workers: workers.into_iter().map(|(pid, _)| pid).collect(),
        current_worker,
    })
}

/// What the master CLI answered to `reload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReloadReply {
    /// Nothing (HAProxy 2.6): the outcome is read from `show proc`.
    Silent,
    /// `Success=1` (2.7 and later).
    Succeeded,
    /// `Success=0` (2.7 and later), with the startup log's alert lines.
    Failed(String),
    /// `Success=0` because the previous reload (or the start) has not finished yet: 3.1 and
    /// later refuse a reload until the new worker has told the master it is ready ("Another
    /// reload is still in progress."). Nothing was tried; the reload can be asked again.
    Busy,
}

pub(crate) fn parse_reload_reply(text: &str) -> ReloadReply {
    let status = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Success="));
    match status.map(str::trim) {
        Some("1") => ReloadReply::Succeeded,
        Some(_) if text.contains("Another reload is still in progress") => ReloadReply::Busy,
        Some(_) => ReloadReply::Failed(alert_lines(text)),
        None => ReloadReply::Silent,
    }
}

/// The `[ALERT]` lines of HAProxy output, joined; the last lines when there are none.
pub(crate) fn alert_lines(text: &str) -> String {
    let alerts: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("[ALERT]"))
        .map(str::trim)
        .collect();
    if !alerts.is_empty() {
        return alerts.join("; ");
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(3)..].join("; ")
}

/// One loaded map, from the runtime API's `show map`:
/// `0 (maps/hosts.map) pattern loaded from file 'maps/hosts.map' ... entry_cnt=2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadedMap {
    /// The name HAProxy registered the map under: the path as the configuration wrote it.
    pub reference: String,
    pub entry_count: Option<usize>,
}

pub(crate) fn parse_show_map(text: &str) -> Vec<LoadedMap> {
    text.lines()
        .filter_map(|line| {
            let (id, rest) = line.split_once(" (")?;
            id.trim().parse::<u64>().ok()?;
            let (reference, description) = rest.split_once(") ")?;
            let entry_count = description
                .split_whitespace()
                .find_map(|word| word.strip_prefix("entry_cnt="))
                .and_then(|n| n.parse().ok());
            Some(LoadedMap {
                reference: reference.to_string(),
                entry_count,
            })
        })
        .collect()
}

/// The loaded map whose file is `relative` under `base`: HAProxy names a map by the path the
/// configuration used, relative (`maps/hosts.map`, resolved with `default-path`) or absolute.
pub(crate) fn find_map<'a>(
    maps: &'a [LoadedMap],
    relative: &str,
    base: &Path,
) -> Option<&'a LoadedMap> {
    let absolute = base.join(relative);
    maps.iter().find(|map| {
        map.reference == relative
            || Path::new(&map.reference) == absolute
            || map.reference.strip_prefix("./") == Some(relative)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOW_PROC_AFTER_A_FAILED_RELOAD: &str = "\
#<PID>          <type>          <reloads>       <uptime>        <version>      
10477           master          2 [failed: 1]   0d00h00m16s     2.6.12-1+deb12u4
# workers
10513           worker          1               0d00h00m12s     2.6.12-1+deb12u4
10600           worker          0               0d00h00m01s     2.6.12-1+deb12u4
# programs

";

    #[test]
    fn show_proc_gives_the_master_its_counters_and_the_newest_worker() {
        let info = parse_show_proc(SHOW_PROC_AFTER_A_FAILED_RELOAD).expect("parses");
        assert_eq!(
            info,
            ProcInfo {
                master_pid: 10477,
                reloads: 2,
                failed: 1,
                workers: vec![10513, 10600],
                current_worker: Some(10600),
            }
        );
    }

    #[test]
    fn show_proc_without_a_master_line_is_not_understood() {
        assert_eq!(parse_show_proc(""), None);
        assert_eq!(parse_show_proc("Unknown command.\n"), None);
    }

    #[test]
    fn reload_replies_of_every_version_are_understood() {
        assert_eq!(parse_reload_reply(""), ReloadReply::Silent);
        assert_eq!(
            parse_reload_reply("Success=1\n--\n[NOTICE] loaded\n"),
            ReloadReply::Succeeded
        );
        assert_eq!(
            parse_reload_reply(
                "Success=0\n--\n[NOTICE] x\n[ALERT]    (1) : config : unknown keyword 'bogus'.\n[WARNING] Loading failure!\n"
            ),
            ReloadReply::Failed("[ALERT]    (1) : config : unknown keyword 'bogus'.".into())
        );
        // 3.2, asked again before the previous reload's worker was ready.
        assert_eq!(
            parse_reload_reply("Success=0\n--\nAnother reload is still in progress.\n"),
            ReloadReply::Busy
        );
    }

    #[test]
    fn show_map_names_each_map_as_the_configuration_wrote_it() {
        let text = "# id (file) description\n0 (maps/hosts.map) pattern loaded from file 'maps/hosts.map' used by map at file '/w/haproxy.cfg' line 11. curr_ver=0 next_ver=0 entry_cnt=2\n1 (/w/maps/b.map) pattern loaded from file '/w/maps/b.map' used by map at file '/w/haproxy.cfg' line 12. curr_ver=0 next_ver=0 entry_cnt=0\n\n";
        let maps = parse_show_map(text);
        assert_eq!(maps.len(), 2);
        let base = Path::new("/w");
        assert_eq!(
            find_map(&maps, "maps/hosts.map", base).map(|m| m.entry_count),
            Some(Some(2))
        );
        assert_eq!(
            find_map(&maps, "maps/b.map", base).map(|m| m.reference.as_str()),
            Some("/w/maps/b.map")
        );
        assert_eq!(find_map(&maps, "maps/c.map", base), None);
    }

    #[test]
    fn cli_words_escape_separators() {
        assert_eq!(cli_word("be_a"), "be_a");
        assert_eq!(cli_word("a b;c\\"), "a\\ b\\;c\\\\");
    }
}
