# The haproxy container's command: haproxy in master-worker mode (-W) with its master CLI
# (-S, for reload.sh and the tests) and its pid file (-p, for reload.sh and prestop.sh), on
# /etc/haproxy/haproxy.cfg. Argument: the haproxy binary.
#
# haproxy's stderr goes to the container's log and to /etc/haproxy/haproxy.stderr too: a
# reload that fails (a listener that cannot bind, say) is told only there, on the master's
# stderr, and reload.sh, in the Data Plane API's container, reads it there to report
# HAProxy's own message (reload.sh also keeps the file small). `tee` reads a FIFO so that
# haproxy itself, not a pipeline, is what this shell execs.

set -eu

cd /etc/haproxy
rm -f haproxy.stderr.fifo
mkfifo haproxy.stderr.fifo
tee -a haproxy.stderr <haproxy.stderr.fifo >&2 &
exec "$1" -W -S /etc/haproxy/master.sock -p /etc/haproxy/haproxy.pid -f /etc/haproxy/haproxy.cfg 2>haproxy.stderr.fifo
