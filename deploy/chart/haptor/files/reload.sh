# The HAProxy pods' reload command (the Data Plane API's reload_cmd and restart_cmd): reloads
# haproxy, which runs in master-worker mode, and exits 0 only once the new worker serves the
# new configuration. Otherwise it exits 1 with the reason on stderr, HAProxy's own messages
# when haproxy refused the configuration: the API then reports the reload `failed` with that
# text as its response, and restores the previous haproxy.cfg.
#
# The API waits for this script, so "succeeded" means what it says only if the script waits
# too: SIGUSR2 makes the master re-execute itself, and whether the new configuration loads
# (a listener may fail to bind) and when its worker takes the traffic are known later. Works
# from HAProxy 2.6 on, through the master CLI, which tells all of it:
#
#   show proc          the master's line counts reloads and failed ones ("3 [failed: 1]");
#                      one line per worker, current and old, first field its pid. While the
#                      master re-executes itself its socket refuses connections.
#   @!PID show info    a worker's "Stopping: 1" once it soft-stops: its listeners are closed,
#                      so new connections go to the new worker only.
#
# 1. reads the master's pid, its failed-reload count and its workers;
# 2. sends SIGUSR2 to the master;
# 3. polls `show proc` until a worker that was not there appears (the new configuration
#    loaded) or the failed-reload count rises (it did not: HAProxy's messages, see below);
# 4. waits until the new worker answers `show info` and every old worker still running
#    reports Stopping: 1, then exits 0 (a new worker that leaves the list meanwhile did not
#    load: 3.1 and later list it before it reads the configuration).
# All within HAPTOR_RELOAD_TIMEOUT seconds (30 by default); past it, it fails naming what it
# waited for.
#
# HAProxy's messages: the master prints them on stderr only, and the 2.6 master CLI has no
# `show startup-logs`. The haproxy container (start-haproxy.sh) therefore copies haproxy's
# stderr to /etc/haproxy/haproxy.stderr as well as to the container's log; this script
# prints what was appended to it since the signal ([ALERT] lines when there are some), and
# truncates it when it grows past 1 MiB. Without that file it asks the master's
# `show startup-logs` (HAProxy 2.7 and later).
#
# POSIX sh (plus `sleep` fractions), talking to the master socket with socat when the image
# has it, else with perl's IO::Socket::UNIX (perl-base). The API runs this script with `sh`
# in its own container, which shares /etc/haproxy and the process namespace with haproxy's.

set -u

dir=/etc/haproxy
master_socket=$dir/master.sock
pid_file=$dir/haproxy.pid
messages=$dir/haproxy.stderr
timeout=${HAPTOR_RELOAD_TIMEOUT:-30}

deadline=$(($(date +%s) + timeout))

# Fails the reload: the reason on stderr (the API's reload response).
fail() {
  printf 'reload.sh: %s\n' "$*" >&2
  exit 1
}

# One master CLI command; its answer on stdout. Fails when the socket refuses (the master
# is re-executing itself) or the answer takes more than 5 s.
mcli() {
  if command -v socat >/dev/null 2>&1; then
    printf '%s\n' "$1" | socat -t 5 -T 5 - "UNIX-CONNECT:$master_socket" 2>/dev/null
  else
    perl -MIO::Socket::UNIX -e '
      my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or exit 1;
      $SIG{ALRM} = sub { exit 1 };
      alarm 5;
      print $s "$ARGV[1]\n";
      shutdown($s, 1);
      print while <$s>;' "$master_socket" "$1"
  fi
}

# The master's failed-reload count in a `show proc` answer ($1); nothing if the answer has
# no master line (a cut answer).
failed_reloads() {
  printf '%s\n' "$1" | while read -r _ type _ _ count _; do
    if [ "$type" = master ]; then
      count=${count%]}
      printf '%s\n' "$count"
      break
    fi
  done
}

# The pids of the workers, current and old, in a `show proc` answer ($1), space-separated.
workers() {
  printf '%s\n' "$1" | while read -r pid type _; do
    if [ "$type" = worker ]; then printf '%s ' "$pid"; fi
  done
}

# Whether pid $1 is in the space-separated list $2.
listed() {
  case " $2 " in *" $1 "*) return 0 ;; esac
  return 1
}

# Stops with a failure once the deadline has passed; $1 says what was awaited.
check_deadline() {
  if [ "$(date +%s)" -ge "$deadline" ]; then
    fail "timed out after ${timeout}s waiting for $1"
  fi
}

# HAProxy's messages since the signal: the [ALERT] lines of what its stderr copy gained past
# byte $1 (all of it when none), once the copy stops growing; else the master's
# `show startup-logs` (2.7 and later).
haproxy_messages() {
  if [ -f "$messages" ]; then
    size=$(wc -c <"$messages")
    n=0
    while [ "$n" -lt 10 ]; do
      sleep 0.1
      now=$(wc -c <"$messages")
      [ "$now" = "$size" ] && break
      size=$now
      n=$((n + 1))
    done
    text=$(tail -c +"$(($1 + 1))" "$messages")
    alerts=$(printf '%s\n' "$text" | grep -F '[ALERT]')
    if [ -n "$alerts" ]; then
      printf '%s\n' "$alerts"
      return
    fi
    if [ -n "$text" ]; then
      printf '%s\n' "$text"
      return
    fi
  fi
  logs=$(mcli 'show startup-logs') || logs=
  case "$logs" in
    *'Unknown command'* | '') echo "(HAProxy's messages are in the haproxy container's log)" ;;
    *) printf '%s\n' "$logs" ;;
  esac
}

pid=$(cat "$pid_file" 2>/dev/null) || fail "no master pid in $pid_file"
[ -n "$pid" ] || fail "no master pid in $pid_file"

# 1. Before: the failed-reload count and the workers (the socket may still be coming up
#    after an earlier reload).
while :; do
  if before=$(mcli 'show proc'); then
    failed_before=$(failed_reloads "$before")
    [ -n "$failed_before" ] && break
  fi
  kill -0 "$pid" 2>/dev/null || fail "haproxy's master (pid $pid) is not running"
  check_deadline "the master CLI on $master_socket to answer show proc"
  sleep 0.05
done
old_workers=$(workers "$before")

# Where this reload's messages start in haproxy's stderr copy.
offset=0
if [ -f "$messages" ]; then
  offset=$(wc -c <"$messages")
  if [ "$offset" -gt 1048576 ]; then
    : >"$messages"
    offset=0
  fi
fi

# 2. The reload.
kill -USR2 "$pid" || fail "cannot signal haproxy's master (pid $pid)"

# 3. A new worker, or one more failed reload.
new=
while [ -z "$new" ]; do
  if proc=$(mcli 'show proc'); then
    failed=$(failed_reloads "$proc")
    if [ -n "$failed" ] && [ "$failed" -gt "$failed_before" ]; then
      fail "haproxy refused the new configuration (failed reloads: $failed_before -> $failed); the previous one keeps serving:
$(haproxy_messages "$offset")"
    fi
    for worker in $(workers "$proc"); do
      if ! listed "$worker" "$old_workers"; then
        new=$worker
        break
      fi
    done
  fi
  if [ -z "$new" ]; then
    kill -0 "$pid" 2>/dev/null || fail "haproxy's master (pid $pid) exited:
$(haproxy_messages "$offset")"
    check_deadline "a new worker (or a failed reload) in the master's show proc"
    sleep 0.05
  fi
done

# 4. The new worker serves, and no old worker listens any more. From HAProxy 3.1 on the
#    master starts the new worker before it reads the configuration, so the worker is listed
#    before it has loaded: one that leaves the list, or a failed count that rises, means it
#    did not load (a listener that cannot bind, say) and the old worker serves on.
waiting="new worker $new to answer show info"
while :; do
  if proc=$(mcli 'show proc'); then
    failed=$(failed_reloads "$proc")
    if { [ -n "$failed" ] && [ "$failed" -gt "$failed_before" ]; } ||
      { [ -n "$failed" ] && ! listed "$new" "$(workers "$proc")"; }; then
      fail "haproxy refused the new configuration (its new worker $new exited; failed reloads: $failed_before -> ${failed:-?}); the previous one keeps serving:
$(haproxy_messages "$offset")"
    fi
  fi
  if info=$(mcli "@!$new show info") && printf '%s\n' "$info" | grep -qx "Pid: $new"; then
    waiting=
    if proc=$(mcli 'show proc'); then
      for worker in $(workers "$proc"); do
        if listed "$worker" "$old_workers"; then
          case "$(mcli "@!$worker show info")" in
            *'Stopping: 1'*) ;;
            *) waiting="old worker $worker to stop listening (Stopping: 1 in its show info)" ;;
          esac
        fi
      done
    else
      waiting="the master CLI to answer show proc"
    fi
    [ -z "$waiting" ] && break
  fi
  check_deadline "$waiting"
  sleep 0.05
done

echo "haproxy reloaded: worker $new serves the new configuration; old workers stopping or gone: ${old_workers:-none}"
