#!/usr/bin/env python3
"""The churn, the load and the sampling of `scripts/soak` (which sets up the folder, the
backends and haptor, then runs this; see its header). Standard library only.

Churn (each writer replaces its file atomically: a hidden temporary file, then a rename):
- endpoints: every 100 ms one of the churned EndpointSlices (churn/eps-app-I.yaml, I < K)
  gets one or two new addresses in 127.2.I.0/24 and one of the backend ports; every such
  address answers (the backend listens on 0.0.0.0), so the route must keep answering;
- Ingresses: every 30 s an Ingress (with its own Service and EndpointSlice, in
  churn/ing-extra-J.yaml) is added or the oldest one removed, alternately (structural);
- certificate: every 60 s the TLS Secret of the Ingress `secure` is re-issued with openssl
  (structural: a reload today).
Churn with --churn counts (CHURN=counts in scripts/soak): fixed counts instead of rates, each
kind spread evenly over the first 90 % of the measured minutes (the last 10 % lets the last
changes settle) and a few more of each kind, at most a quarter of its count, spread over the
warm-up (counted apart):
- endpoint changes (1 000): as above, one churned EndpointSlice rewritten per change;
- map edits (100), changes that only touch map entries: in turn a path `/v2` added to or
  removed from an Ingress app-M (M in the map-edited range, each in its own file
  churn/ing-app-M.yaml; the path points at the rule's own Service; checked with `get map` on
  the runtime socket), a new Ingress alias-K for a new host alias-K.example pointing at the
  existing Service app-M (checked by requests), and an alias-K's host changed (requests to
  the old host are counted apart from then on);
- certificate rotations (100): the TLS Secret of `secure` re-issued with openssl; checked by
  TLS handshakes to secure.example until the new certificate is served;
- new Services (20): a Service + EndpointSlice + Ingress for a new host (extra-J, never
  removed); checked by requests, then part of the load.
Every check runs in its own thread, so a slow one does not delay the schedule. Each reload
haptor's log reports is put down to a kind of change: by the names its reasons give
(extra-J / pool_N: new Service; secure, crt, ssl, .pem: certificate; alias-K, app-M of the
map-edited range, .map: map edit; app-N of the churned range: endpoint), else by the object
whose change triggered that deployment (the commentator's "after the ... change NS/NAME that
triggered it"), else "unattributed". The verdict wants 0 reloads (the master's counter, from
the first deployment on, warm-up included), 0 failed requests, every count done and every
check passed, and haptor's RSS flat within 10 % (judged as in the default mode: the peak of
the last minute against the peak of the first minute after the warm-up, since single
readings swing by about 10 % with the deployments; the summary also gives start and end).
Load: THREADS threads at RATE requests/s in all, half on keep-alive connections, half on a
new connection per request, to: the stable routes app-K..app-N-1 (HTTP), the churned
endpoint routes app-0..app-K-1, the added Ingresses once they answered, secure.example over
HTTPS. A response counts as good when it is a 200 from the backend expected for the route
(the backend echoes the Host and the address HAProxy connected to). Requests to an Ingress
from the moment its removal is decided are counted apart (`removed`), not as failures. A
request on a reused keep-alive connection that the server closed before answering (an old
worker stopping) is retried once on a new connection, as HTTP clients do for idempotent
requests, and counted as `ka-retries`; if the retry fails too, the request failed.
Sampling every 10 s: haptor's VmRSS, haproxy's processes and old workers (master CLI
`show proc`), deployments and errors (/metrics), /debug/vars/errors, reloads (the master's
reload counter, and haptor's log lines "with a reload"), requests.
"""
import argparse
import base64
import collections
import hashlib
import http.client
import json
import os
import random
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

STOP = threading.Event()
LOCK = threading.Lock()


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write_atomic(path, text):
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class State:
    """What the churn did and what the load saw (guarded by LOCK)."""

    def __init__(self):
        self.ok = 0
        self.failed = 0
        self.removed = 0  # requests to routes whose removal was decided (excluded)
        self.removed_failed = 0
        self.ka_retries = 0
        self.by_kind = collections.Counter()  # kind -> ok
        self.fail_by_kind = collections.Counter()
        self.examples = []  # first failures
        self.endpoint_changes = 0
        self.ingress_adds = 0
        self.ingress_removes = 0
        self.cert_rotations = 0
        self.extra_live = {}  # host -> expected dst
        self.extra_removed = set()
        self.add_latency = []  # seconds from file written to route answering
        self.remove_latency = []  # seconds from file deleted to 404
        self.cert_latency = []  # seconds from Secret written to the new cert served
        self.cert_pending = None  # (fingerprint, written_at)
        self.cert_fp = None
        self.first_fp = None
        self.known_fps = set()  # secure.example's certificates: the first and every rotation
        self.https_fps = collections.Counter()  # "first", "rotated" -> good HTTPS responses
        self.churn_errors = []
        # --churn counts
        self.done = {"warmup": collections.Counter(), "measured": collections.Counter()}
        self.map_variants = {"warmup": collections.Counter(), "measured": collections.Counter()}
        self.map_live = {}  # host -> expected dst (alias Ingresses that answered)
        self.v2 = set()  # M whose Ingress app-M has the path /v2 now
        self.check_latency = collections.defaultdict(list)  # kind -> seconds to effective
        self.checks_superseded = collections.Counter()
        self.cert_fps = []  # fingerprints of the rotations, in order
        self.late = collections.Counter()  # kind -> changes made > 1 s after their slot


S = State()


def fail(kind, target, why):
    with LOCK:
        S.failed += 1
        S.fail_by_kind[kind] += 1
        if len(S.examples) < 20:
            S.examples.append(f"{time.strftime('%H:%M:%S')} {kind} {target}: {why}")


# ---------------------------------------------------------------- churn


def slice_yaml(name, ns, service, addresses, port):
    addrs = ", ".join(f'"{a}"' for a in addresses)
    return (
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n"
        f"  name: {name}\n  namespace: {ns}\n  labels: {{kubernetes.io/service-name: {service}}}\n"
        f"ports: [{{name: http, port: {port}}}]\nendpoints:\n  - addresses: [{addrs}]\n"
    )


def endpoint_churn(args):
    ports = args.backend_ports
    i = 0
    next_at = time.monotonic()
    while not STOP.is_set():
        next_at += 0.1
        n = i % args.churned
        i += 1
        addresses = random.sample(range(1, 251), random.choice((1, 2)))
        text = slice_yaml(
            f"app-{n}-1", f"ns-{n}", f"app-{n}",
            [f"127.2.{n}.{a}" for a in addresses], random.choice(ports),
        )
        try:
            write_atomic(os.path.join(args.dir, "churn", f"eps-app-{n}.yaml"), text)
            with LOCK:
                S.endpoint_changes += 1
        except OSError as e:
            with LOCK:
                S.churn_errors.append(f"endpoint write: {e}")
        STOP.wait(max(0.0, next_at - time.monotonic()))


def extra_dst(j):
    return f"127.3.{j // 250 % 250}.{j % 250 + 1}"


def extra_yaml(j, port):
    name = f"extra-{j}"
    return (
        "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\n"
        f"metadata: {{name: {name}, namespace: {name}}}\nspec:\n  ingressClassName: haptor\n"
        f"  rules:\n    - host: {name}.example\n      http:\n        paths:\n"
        f"          - {{path: /, pathType: Prefix, backend: {{service: {{name: {name}, port: {{number: 80}}}}}}}}\n"
        "---\napiVersion: v1\nkind: Service\n"
        f"metadata: {{name: {name}, namespace: {name}}}\nspec:\n"
        f"  ports: [{{name: http, port: 80, targetPort: {port}}}]\n"
        "---\n" + slice_yaml(f"{name}-1", name, name, [extra_dst(j)], port)
    )


def probe(args, host, want_status, deadline):
    """Polls the route every 50 ms until it answers want_status; returns the time or None."""
    while time.monotonic() < deadline and not STOP.is_set():
        try:
            c = http.client.HTTPConnection(args.http_host, args.http_port, timeout=5)
            c.request("GET", "/", headers={"Host": host})
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == want_status:
                return time.monotonic()
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    return None


def ingress_churn(args):
    live = collections.deque(args.initial_extras)  # j of the Ingresses that exist
    j = max(args.initial_extras) + 1 if args.initial_extras else 0
    tick = 0
    while not STOP.wait(args.ingress_every):
        tick += 1
        if tick % 2 == 1 or not live:
            path = os.path.join(args.dir, "churn", f"ing-extra-{j}.yaml")
            write_atomic(path, extra_yaml(j, args.backend_ports[0]))
            written = time.monotonic()
            with LOCK:
                S.ingress_adds += 1
            host = f"extra-{j}.example"
            got = probe(args, host, 200, written + 300)
            if got is None and STOP.is_set():
                return
            if got is None:
                with LOCK:
                    S.churn_errors.append(f"{host} added but not answering 200 within 300 s")
            else:
                with LOCK:
                    S.add_latency.append(got - written)
                    S.extra_live[host] = extra_dst(j)
            live.append(j)
            j += 1
        else:
            old = live.popleft()
            host = f"extra-{old}.example"
            with LOCK:  # decided: from now on its requests are counted apart
                S.extra_live.pop(host, None)
                S.extra_removed.add(host)
                S.ingress_removes += 1
            os.remove(os.path.join(args.dir, "churn", f"ing-extra-{old}.yaml"))
            removed = time.monotonic()
            got = probe(args, host, 404, removed + 300)
            if got is None and STOP.is_set():
                return
            if got is None:
                with LOCK:
                    S.churn_errors.append(f"{host} removed but not 404 within 300 s")
            else:
                with LOCK:
                    S.remove_latency.append(got - removed)


def new_cert(workdir):
    key, crt = os.path.join(workdir, "tls.key"), os.path.join(workdir, "tls.crt")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=secure.example",
         "-addext", "subjectAltName=DNS:secure.example", "-keyout", key, "-out", crt],
        check=True, capture_output=True,
    )
    crt_pem, key_pem = open(crt, "rb").read(), open(key, "rb").read()
    der = ssl.PEM_cert_to_DER_cert(crt_pem.decode())
    return crt_pem, key_pem, hashlib.sha256(der).hexdigest()


def secret_yaml(crt_pem, key_pem):
    return (
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\n"
        "metadata: {name: secure-tls, namespace: tls}\ndata:\n"
        f"  tls.crt: {base64.b64encode(crt_pem).decode()}\n"
        f"  tls.key: {base64.b64encode(key_pem).decode()}\n"
    )


def cert_churn(args):
    while not STOP.wait(args.cert_every):
        try:
            crt, key, fp = new_cert(args.workdir)
        except (OSError, subprocess.CalledProcessError) as e:
            with LOCK:
                S.churn_errors.append(f"openssl: {e}")
            continue
        with LOCK:
            S.known_fps.add(fp)
        write_atomic(os.path.join(args.dir, "churn", "secret-secure-tls.yaml"), secret_yaml(crt, key))
        with LOCK:
            S.cert_rotations += 1
            if S.cert_pending:
                S.churn_errors.append("a rotation was not served before the next one")
            S.cert_pending = (fp, time.monotonic())


# ---------------------------------------------------------------- churn by counts

KINDS = ("endpoint", "map", "cert", "new-service")
KIND_LABELS = {"endpoint": "endpoint changes", "map": "map edits",
               "cert": "certificate rotations", "new-service": "new Services"}
ALIASES = []  # [K, M, version] of the alias Ingresses (the map-edit thread's own)


def ingress_yaml(name, ns, host, service, paths=("/",)):
    rules = "".join(
        f"          - {{path: {p}, pathType: Prefix, backend: {{service: {{name: {service}, port: {{number: 80}}}}}}}}\n"
        for p in paths)
    return ("---\napiVersion: networking.k8s.io/v1\nkind: Ingress\n"
            f"metadata: {{name: {name}, namespace: {ns}}}\nspec:\n  ingressClassName: haptor\n"
            f"  rules:\n    - host: {host}\n      http:\n        paths:\n{rules}")


def count_schedule(args, total, offset):
    """(monotonic time, phase) of each change of a kind: `total` spread evenly over the first
    90 % of the measured minutes, and up to total / 4 over the warm-up at about that rate."""
    if not total:
        return []
    interval = args.minutes * 60 * 0.9 / total
    warm = min(int(args.warmup / interval), total // 4) if args.warmup > 0 else 0
    out = [(args.t0 + (i + offset) * args.warmup / warm, "warmup") for i in range(warm)]
    out += [(args.t0 + args.warmup + (i + offset) * interval, "measured") for i in range(total)]
    return out


def run_counts(args, kind, total, offset, action):
    for i, (at, phase) in enumerate(count_schedule(args, total, offset)):
        if STOP.wait(max(0.0, at - time.monotonic())):
            return
        if time.monotonic() - at > 1.0:
            with LOCK:
                S.late[kind] += 1
        try:
            action(args, i, phase)
        except (OSError, subprocess.CalledProcessError) as e:
            with LOCK:
                S.churn_errors.append(f"{KIND_LABELS[kind]} #{i}: {e}")
            continue
        with LOCK:
            S.done[phase][kind] += 1


def check_async(kind, what, fn, timeout=60.0):
    """Runs fn(deadline) in a thread of its own: "ok" when the change took effect,
    "superseded" when a later change of the same thing was seen first, None on timeout."""
    started = time.monotonic()

    def run():
        got = fn(started + timeout)
        if got is None and STOP.is_set():
            return
        with LOCK:
            if got == "ok":
                S.check_latency[kind].append(time.monotonic() - started)
            elif got == "superseded":
                S.checks_superseded[kind] += 1
            else:
                S.churn_errors.append(f"{what}: not in effect within {timeout:.0f} s")
    threading.Thread(target=run, daemon=True).start()


def http_until(args, host, path, want, deadline):
    """Polls GET host+path every 50 ms until want(status, body); True, or False at the deadline."""
    while time.monotonic() < deadline and not STOP.is_set():
        try:
            c = http.client.HTTPConnection(args.http_host, args.http_port, timeout=5)
            c.request("GET", path, headers={"Host": host})
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            c.close()
            if want(r.status, body):
                return True
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    return False


def answers_from(host, dst):
    return lambda status, body: status == 200 and body.split() == [host, dst]


def runtime_cmd(sock_path, cmd):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(sock_path)
        s.sendall(cmd.encode() + b"\n")
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
        s.close()
        return out.decode(errors="replace")
    except OSError:
        return None


def tls_fingerprint(args, host):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((args.http_host, args.https_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as t:
                return hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest()
    except (OSError, ssl.SSLError):
        return None


def count_endpoint(args, i, phase):
    n = i % args.churned
    addresses = random.sample(range(1, 251), random.choice((1, 2)))
    write_atomic(os.path.join(args.dir, "churn", f"eps-app-{n}.yaml"), slice_yaml(
        f"app-{n}-1", f"ns-{n}", f"app-{n}",
        [f"127.2.{n}.{a}" for a in addresses], random.choice(args.backend_ports)))
    with LOCK:
        S.endpoint_changes += 1


def count_cert(args, i, phase):
    crt, key, fp = new_cert(args.workdir)
    with LOCK:
        S.cert_fps.append(fp)
        S.known_fps.add(fp)
        idx = len(S.cert_fps) - 1
    write_atomic(os.path.join(args.dir, "churn", "secret-secure-tls.yaml"), secret_yaml(crt, key))
    with LOCK:
        S.cert_rotations += 1

    def served(deadline):
        while time.monotonic() < deadline and not STOP.is_set():
            got = tls_fingerprint(args, "secure.example")
            with LOCK:
                seen = S.cert_fps.index(got) if got in S.cert_fps else -1
            if seen == idx:
                return "ok"
            if seen > idx:
                return "superseded"
            time.sleep(0.05)
        return None
    check_async("cert", f"certificate rotation #{i}", served)


def count_new_service(args, i, phase):
    j = args.first_new + i
    host, dst = f"extra-{j}.example", extra_dst(j)
    write_atomic(os.path.join(args.dir, "churn", f"ing-extra-{j}.yaml"), extra_yaml(j, args.backend_ports[0]))
    with LOCK:
        S.ingress_adds += 1

    def answers(deadline):
        if http_until(args, host, "/", answers_from(host, f"{dst}:{args.backend_ports[0]}"), deadline):
            with LOCK:
                S.extra_live[host] = dst
            return "ok"
        return None
    check_async("new-service", f"new Service extra-{j}", answers)


def alias_host(k, version):
    return f"alias-{k}.example" if version == 0 else f"alias-{k}-v{version}.example"


def count_map_edit(args, i, phase):
    variant = ("path", "alias", "path", "host")[i % 4]
    if variant == "host" and not ALIASES:
        variant = "alias"
    port = args.backend_ports[0]
    if variant == "path":
        m = args.map_first + (i // 2) % args.map_edited
        with LOCK:
            add = m not in S.v2
        paths = ("/", "/v2") if add else ("/",)
        write_atomic(os.path.join(args.dir, "churn", f"ing-app-{m}.yaml"),
                     ingress_yaml(f"app-{m}", f"ns-{m}", f"app-{m}.example", f"app-{m}", paths))
        with LOCK:
            (S.v2.add if add else S.v2.discard)(m)
        key = f"app-{m}.example/v2/"

        def mapped(deadline):
            # `get map` looks the key up as the map is used (map_beg): the longest key
            # starting it is app-M.example/v2/ once the path is there, app-M.example/ without.
            while time.monotonic() < deadline and not STOP.is_set():
                out = runtime_cmd(args.runtime_sock, f"get map maps/routes.map {key}") or ""
                got = re.search(r'key="([^"]*)"', out)
                if got and (got.group(1) == key) == add:
                    return "ok"
                time.sleep(0.05)
            return None
        check_async("map", f"path /v2 {'added to' if add else 'removed from'} app-{m}", mapped)
    elif variant == "alias":
        k = len(ALIASES)
        m = args.map_first + (k * 7) % args.map_edited
        ALIASES.append([k, m, 0])
        host = alias_host(k, 0)
        write_atomic(os.path.join(args.dir, "churn", f"ing-alias-{k}.yaml"),
                     ingress_yaml(f"alias-{k}", f"ns-{m}", host, f"app-{m}"))
    else:
        a = ALIASES[(i // 4) % len(ALIASES)]
        k, m, version = a
        old, host = alias_host(k, version), alias_host(k, version + 1)
        a[2] = version + 1
        with LOCK:  # decided: requests to the old host are counted apart from now on
            S.map_live.pop(old, None)
            S.extra_removed.add(old)
        write_atomic(os.path.join(args.dir, "churn", f"ing-alias-{k}.yaml"),
                     ingress_yaml(f"alias-{k}", f"ns-{m}", host, f"app-{m}"))
    if variant in ("alias", "host"):
        dst = app_dst(m)

        def answers(deadline):
            if http_until(args, host, "/", answers_from(host, f"{dst}:{port}"), deadline):
                with LOCK:
                    if host not in S.extra_removed:
                        S.map_live[host] = dst
                return "ok"
            return None
        what = f"new host {host} for app-{m}" if variant == "alias" else f"alias-{k} host changed to {host}"
        check_async("map", what, answers)
    with LOCK:
        S.map_variants[phase][variant] += 1


def counts_threads(args):
    e, m, c, n = args.counts
    return [threading.Thread(target=run_counts, args=(args, kind, total, offset, action), daemon=True)
            for kind, total, offset, action in (
                ("endpoint", e, 0.5, count_endpoint), ("map", m, 0.2, count_map_edit),
                ("cert", c, 0.7, count_cert), ("new-service", n, 0.4, count_new_service))]


def log_reload_events(path):
    """(reasons, trigger) of each deployment haptor's log says was made with a reload, in order:
    the k-th "deployed with a reload" line of the local driver paired with the k-th commentator
    line about a deployment "with a reload" (the trigger: "endpointslices change ns/name", or
    None when the commentator names no object)."""
    reasons, triggers = [], []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if "drivers::local: deployed with a reload" in line:
                    m = re.search(r"reasons=(\[.*\])\s*$", line)
                    reasons.append(m.group(1) if m else "?")
                elif "commentator: deployment to " in line and "(with a reload" in line:
                    m = re.search(r" after the (.+?) that triggered it", line)
                    triggers.append(m.group(1) if m else None)
    except OSError:
        pass
    return [(r, triggers[k] if k < len(triggers) else None) for k, r in enumerate(reasons)]


def reload_kind(args, reasons, trigger):
    """The kind of change a reload is put down to (see the module comment)."""
    for text in (reasons, trigger or ""):
        if re.search(r"extra[-_]\d+|pool_\d+", text):
            return "new-service"
        if re.search(r"secure|crt|ssl|certif|\.pem", text, re.I):
            return "cert"
        if re.search(r"alias-\d+|\.map\b", text):
            return "map"
        apps = [int(x) for x in re.findall(r"app-(\d+)", text)]
        if any(args.map_first <= a < args.map_first + args.map_edited for a in apps):
            return "map"
        if any(a < args.churned for a in apps):
            return "endpoint"
    return "unattributed"


# ---------------------------------------------------------------- load


def app_dst(n):
    return f"127.1.{n // 250 % 250}.{n % 250 + 1}"


class SNIConnection(http.client.HTTPSConnection):
    """HTTPS to an address with the SNI of the route's host: http.client would send the
    address (an IP: no SNI at all), and HAProxy would answer with its default certificate."""

    def __init__(self, address, port, sni, **kw):
        super().__init__(address, port, **kw)
        self.sni = sni

    def connect(self):
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.sni)


class Worker(threading.Thread):
    def __init__(self, args, idx, keepalive, rate):
        super().__init__(daemon=True)
        self.args, self.idx, self.keepalive, self.interval = args, idx, keepalive, 1.0 / rate
        self.conns = {}
        self.rng = random.Random(idx)
        self.tls = ssl.create_default_context()
        self.tls.check_hostname = False
        self.tls.verify_mode = ssl.CERT_NONE

    def target(self):
        """(kind, host, path, https, check(dst) -> bool)"""
        a, r = self.args, self.rng.random()
        if a.churn == "counts":
            return self.target_counts(r)
        if r < 0.05:
            return "https", "secure.example", "/", True, lambda d: d.startswith("127.4.0.1:")
        if r < 0.15:
            with LOCK:
                hosts = list(S.extra_live.items())
            if hosts:
                host, dst = self.rng.choice(hosts)
                return "ingress-churn", host, "/", False, lambda d: d == f"{dst}:{a.backend_ports[0]}"
        if r < 0.30:
            n = self.rng.randrange(a.churned)
            return "endpoint-churn", f"app-{n}.example", "/", False, lambda d: d.startswith(f"127.2.{n}.")
        n = self.rng.randrange(a.churned, a.count)
        return "stable", f"app-{n}.example", "/", False, lambda d: d == f"{app_dst(n)}:{a.backend_ports[0]}"

    def target_counts(self, r):
        """--churn counts: 10 % HTTPS, 10 % new Services that answered, 10 % map-edited routes
        (alias hosts that answered, app-M/v2), 15 % endpoint-churned routes, the rest stable."""
        a, port = self.args, self.args.backend_ports[0]
        if r < 0.10:
            return "https", "secure.example", "/", True, lambda d: d.startswith("127.4.0.1:")
        if r < 0.20:
            with LOCK:
                hosts = list(S.extra_live.items())
            if hosts:
                host, dst = self.rng.choice(hosts)
                return "new-service", host, "/", False, lambda d: d == f"{dst}:{port}"
        if r < 0.30:
            with LOCK:
                hosts = list(S.map_live.items())
            if hosts and self.rng.random() < 0.5:
                host, dst = self.rng.choice(hosts)
                return "map-alias", host, "/", False, lambda d: d == f"{dst}:{port}"
            m = a.map_first + self.rng.randrange(a.map_edited)
            return "map-v2", f"app-{m}.example", "/v2", False, lambda d: d == f"{app_dst(m)}:{port}"
        if r < 0.45:
            n = self.rng.randrange(a.churned)
            return "endpoint-churn", f"app-{n}.example", "/", False, lambda d: d.startswith(f"127.2.{n}.")
        n = self.rng.randrange(a.churned, a.count)
        return "stable", f"app-{n}.example", "/", False, lambda d: d == f"{app_dst(n)}:{port}"

    def conn(self, https, fresh, sni):
        key = "https" if https else "http"
        c = None if fresh or not self.keepalive else self.conns.get(key)
        reused = c is not None
        if c is None:
            if https:
                c = SNIConnection(self.args.http_host, self.args.https_port, sni,
                                  timeout=10, context=self.tls)
            else:
                c = http.client.HTTPConnection(self.args.http_host, self.args.http_port, timeout=10)
            if self.keepalive:
                self.conns[key] = c
        return c, reused

    def drop(self, https):
        c = self.conns.pop("https" if https else "http", None)
        if c:
            c.close()

    def once(self, host, path, https, fresh):
        c, reused = self.conn(https, fresh, sni=host)
        headers = {"Host": host}
        if not self.keepalive:
            headers["Connection"] = "close"
        try:
            c.request("GET", path, headers=headers)
            # The certificate before getresponse(), which drops c.sock of a response that
            # closes the connection (each request of the new-connection threads).
            fp = None
            if https and c.sock is not None:
                fp = hashlib.sha256(c.sock.getpeercert(binary_form=True)).hexdigest()
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            if not self.keepalive or r.will_close:
                c.close()
                self.drop(https)
            return r.status, body, fp, None, reused
        except (OSError, http.client.HTTPException) as e:
            c.close()
            self.drop(https)
            return None, None, None, e, reused

    def run(self):
        next_at = time.monotonic() + self.rng.random() * self.interval
        while not STOP.is_set():
            kind, host, path, https, check = self.target()
            status, body, fp, err, reused = self.once(host, path, https, fresh=False)
            if err is not None and reused and isinstance(
                    err, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
                with LOCK:
                    S.ka_retries += 1
                status, body, fp, err, _ = self.once(host, path, https, fresh=True)
            with LOCK:
                removed = host in S.extra_removed
            if removed:
                with LOCK:
                    S.removed += 1
                    if status != 200:
                        S.removed_failed += 1
            elif err is not None:
                fail(kind, host, f"{type(err).__name__}: {err}")
            else:
                words = (body or "").split()
                if status != 200:
                    fail(kind, host, f"HTTP {status}: {(body or '')[:80]!r}")
                elif len(words) != 2 or words[0] != host or not check(words[1]):
                    fail(kind, host, f"wrong backend: {(body or '')[:80]!r}")
                elif https and fp and S.known_fps and fp not in S.known_fps:
                    fail(kind, host, f"served a certificate that is not {host}'s (sha256 {fp[:16]}...)")
                else:
                    with LOCK:
                        S.ok += 1
                        S.by_kind[kind] += 1
                        if fp:
                            S.https_fps["first" if fp == S.first_fp else "rotated"] += 1
                            if S.cert_pending and fp == S.cert_pending[0]:
                                S.cert_latency.append(time.monotonic() - S.cert_pending[1])
                                S.cert_pending = None
                            S.cert_fp = fp
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay > 0:
                STOP.wait(delay)
            else:
                next_at = time.monotonic()


# ---------------------------------------------------------------- sampling


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def show_proc(sock_path):
    """(master pid, master reload counter, failed, worker pids) or None."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(sock_path)
        s.sendall(b"show proc\n")
        s.shutdown(socket.SHUT_WR)  # the master CLI answers once the client stops sending
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
        s.close()
    except OSError:
        return None
    master, workers = None, []
    for line in out.decode(errors="replace").splitlines():
        w = line.split()
        if len(w) < 3 or line.lstrip().startswith("#") or not w[0].isdigit():
            continue
        if w[1] == "master":
            m = re.search(r"\[failed:\s*(\d+)\]", line)
            master = (int(w[0]), int(w[2]), int(m.group(1)) if m else 0)
        elif w[1] == "worker":
            workers.append(int(w[0]))
    if master is None:
        return None
    return master[0], master[1], master[2], workers


def metrics(addr):
    out = {}
    try:
        text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0]
        try:
            out[base] = out.get(base, 0.0) + float(value)
        except ValueError:
            pass
    return out


def debug_errors(addr):
    try:
        return json.loads(urllib.request.urlopen(f"http://{addr}/debug/vars/errors", timeout=5).read())
    except (OSError, ValueError):
        return None


def log_reloads(path):
    """The reasons of the deployments haptor's log says were made with a reload, in order."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if "drivers::local: deployed with a reload" in line:
                    m = re.search(r"reasons=(\[.*\])\s*$", line)
                    out.append(m.group(1) if m else "?")
    except OSError:
        pass
    return out


OLD_WORKERS = {"max": 0, "samples": 0, "nonzero": 0}


def old_worker_poller(args):
    """show proc every second: the most old workers seen alive at once."""
    while not STOP.wait(1.0):
        p = show_proc(args.master_sock)
        if p:
            old = max(0, len(p[3]) - 1)
            with LOCK:
                OLD_WORKERS["samples"] += 1
                OLD_WORKERS["nonzero"] += old > 0
                OLD_WORKERS["max"] = max(OLD_WORKERS["max"], old)


def sample(args):
    m = metrics(args.metrics) or {}
    p = show_proc(args.master_sock)
    errs = debug_errors(args.debug)
    with LOCK:
        snap = dict(ok=S.ok, failed=S.failed, removed=S.removed, ka=S.ka_retries,
                    structural=S.ingress_adds + S.ingress_removes + S.cert_rotations
                    + sum(sum(c.values()) for c in S.map_variants.values()),
                    eps=S.endpoint_changes)
    return dict(
        t=time.monotonic(), rss=rss_kb(args.haptor_pid),
        haproxy_rss=sum(rss_kb(pid) or 0 for pid in ([p[0]] + p[3] if p else [])),
        master=p[0] if p else None, master_reloads=p[1] if p else None,
        failed_reloads=p[2] if p else None, workers=len(p[3]) if p else None,
        deployments=m.get("haptor_deployments_total"),
        deploy_errors=m.get("haptor_deployment_errors_total", 0.0),
        render_errors=m.get("haptor_reconciliation_errors_total", 0.0),
        validation_errors=m.get("haptor_validation_errors_total", 0.0),
        validations=m.get("haptor_validations_total", 0.0),
        skipped=m.get("haptor_validations_skipped_total", 0.0),
        c2d_sum=m.get("haptor_change_to_deploy_seconds_sum", 0.0),
        c2d_count=m.get("haptor_change_to_deploy_seconds_count", 0.0),
        errors=len(errs) if isinstance(errs, list) else None, errors_list=errs,
        log_reloads=len(log_reloads(args.haptor_log)), **snap,
    )


HEADER = (f"{'time':>6} {'phase':>6} {'RSS MB':>7} {'hap MB':>7} {'workers':>7} {'old':>4} "
          f"{'deploys':>8} {'reloads':>7} {'struct':>6} {'ep chg':>7} {'errors':>6} "
          f"{'req ok':>8} {'failed':>6} {'removed':>7} {'ka-rt':>5} {'req/s':>6}")


def row(s, base, prev, phase):
    def d(key):
        a, b = s.get(key), base.get(key)
        return "?" if a is None or b is None else f"{a - b:.0f}"
    dt = s["t"] - prev["t"]
    rate = (s["ok"] + s["failed"] + s["removed"] - prev["ok"] - prev["failed"] - prev["removed"]) / dt if dt > 0 else 0
    old = "?" if s["workers"] is None else str(max(0, s["workers"] - 1))
    return (f"{s['t'] - base['t']:>5.0f}s {phase:>6} {(s['rss'] or 0) / 1024:>7.1f} "
            f"{s['haproxy_rss'] / 1024:>7.1f} {s['workers'] if s['workers'] is not None else '?':>7} {old:>4} "
            f"{d('deployments'):>8} {d('master_reloads'):>7} {s['structural']:>6} {s['eps']:>7} "
            f"{s['errors'] if s['errors'] is not None else '?':>6} {s['ok']:>8} {s['failed']:>6} "
            f"{s['removed']:>7} {s['ka']:>5} {rate:>6.1f}")


def stats(xs):
    if not xs:
        return "none"
    xs = sorted(xs)
    return f"n={len(xs)} min {xs[0]:.2f}s median {xs[len(xs) // 2]:.2f}s max {xs[-1]:.2f}s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--warmup", type=float, default=80)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--churned", type=int, required=True)
    ap.add_argument("--initial-extras", type=lambda s: [int(x) for x in s.split(",") if x], default=[])
    ap.add_argument("--haptor-pid", type=int, required=True)
    ap.add_argument("--haptor-log", required=True)
    ap.add_argument("--master-sock", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--debug", required=True)
    ap.add_argument("--http", default="127.0.0.1:47180")
    ap.add_argument("--https-port", type=int, default=47543)
    ap.add_argument("--backend-ports", type=lambda s: [int(x) for x in s.split(",")], default=[47080, 47081])
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--ingress-every", type=float, default=30)
    ap.add_argument("--cert-every", type=float, default=60)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--churn", choices=("rates", "counts"), default="rates")
    ap.add_argument("--counts", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 100, 100, 20],
                    help="endpoint changes, map edits, certificate rotations, new Services (--churn counts)")
    ap.add_argument("--map-first", type=int, default=20, help="the first Ingress app-M of the map-edited range")
    ap.add_argument("--map-edited", type=int, default=50, help="how many Ingresses app-M are map-edited")
    ap.add_argument("--first-new", type=int, default=2, help="J of the first new Service extra-J")
    ap.add_argument("--runtime-sock")
    args = ap.parse_args()
    if len(args.counts) != 4:
        ap.error("--counts takes four numbers")
    args.http_host, port = args.http.rsplit(":", 1)
    args.http_port = int(port)

    for j in args.initial_extras:
        S.extra_live[f"extra-{j}.example"] = extra_dst(j)
    try:  # the certificate scripts/soak issued for secure.example
        pem = open(os.path.join(args.workdir, "tls.crt")).read()
        S.first_fp = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()
        S.known_fps.add(S.first_fp)
    except (OSError, ValueError):
        S.first_fp = None
    base = sample(args)
    for _ in range(60):
        if base["master"] is not None:
            break
        time.sleep(0.5)
        base = sample(args)
    log(f"churn and load start: {args.rate:.0f} req/s on {args.threads} threads; warm-up "
        f"{args.warmup:.0f} s, then {args.minutes:g} min measured")
    args.t0 = base["t"]
    if args.churn == "counts":
        plan = []
        for kind, total in zip(KINDS, args.counts):
            sched = count_schedule(args, total, 0.5)
            warm = sum(1 for _, phase in sched if phase == "warmup")
            every = args.minutes * 60 * 0.9 / total if total else 0
            plan.append(f"{total} {KIND_LABELS[kind]} (every {every:.2f} s; +{warm} in the warm-up)")
        log("churn by counts over the first 90 % of the measured minutes: " + ", ".join(plan))
        threads = counts_threads(args) + [threading.Thread(target=old_worker_poller, args=(args,), daemon=True)]
    else:
        threads = [threading.Thread(target=f, args=(args,), daemon=True)
                   for f in (endpoint_churn, ingress_churn, cert_churn, old_worker_poller)]
    threads += [Worker(args, i, keepalive=(i % 2 == 0), rate=args.rate / args.threads)
                for i in range(args.threads)]
    for t in threads:
        t.start()

    print(HEADER, flush=True)
    samples, prev, start_rss_sample = [base], base, None
    end_at = base["t"] + args.warmup + args.minutes * 60
    next_at = base["t"]
    status = 0
    try:
        while True:
            next_at += args.interval
            time.sleep(max(0.0, next_at - time.monotonic()))
            s = sample(args)
            warm = s["t"] - base["t"] < args.warmup - 0.5
            if not warm and start_rss_sample is None:
                start_rss_sample = s
            print(row(s, base, prev, "warmup" if warm else "soak"), flush=True)
            if s["rss"] is None:
                print("haptor is gone", flush=True)
                status = 1
                break
            samples.append(s)
            prev = s
            if s["t"] >= end_at - 0.5:
                break
    except KeyboardInterrupt:
        status = 1
    STOP.set()
    time.sleep(1.5)  # let the workers finish their requests
    end = sample(args)
    for _ in range(60):  # the master does not answer while it re-executes for a reload
        if end["master"] is not None:
            break
        time.sleep(0.5)
        end = sample(args)
    if start_rss_sample is None:
        start_rss_sample = end

    with LOCK:
        structural = S.ingress_adds + S.ingress_removes + S.cert_rotations
        summary = {k: (v.copy() if hasattr(v, "copy") else v) for k, v in S.__dict__.items()}
        summary["done"] = {p: c.copy() for p, c in S.done.items()}
        summary["map_variants"] = {p: c.copy() for p, c in S.map_variants.items()}
        summary["check_latency"] = {k: list(v) for k, v in S.check_latency.items()}
    counts = args.churn == "counts"
    def delta(key):
        a, b = end.get(key), base.get(key)
        return None if a is None or b is None else a - b
    reloads = delta("master_reloads")
    log_rl = end["log_reloads"] - base["log_reloads"]
    rss0, rss1 = start_rss_sample["rss"], end["rss"] or samples[-1]["rss"]
    ratio = rss1 / rss0 if rss0 else float("inf")
    # RSS swings with each structural deployment: judge growth by the peaks of the first and
    # the last minute of the soak (six samples each), not by two single readings.
    soak = [x for x in samples if x["t"] >= start_rss_sample["t"] and x["rss"]]
    early_peak = max((x["rss"] for x in soak[:6]), default=0)
    late_peak = max((x["rss"] for x in soak[-6:]), default=0)
    peak_ratio = late_peak / early_peak if early_peak else float("inf")
    max_old = max((x["workers"] - 1 for x in samples + [end] if x["workers"]), default=0)
    max_rss = max(x["rss"] or 0 for x in samples + [end])
    restarted = base["master"] != end["master"]
    sent = summary["ok"] + summary["failed"] + summary["removed"]
    print()
    print("summary")
    print(f"  duration: {end['t'] - base['t']:.0f} s ({args.warmup:.0f} s warm-up + {args.minutes:g} min)")
    print(f"  haptor RSS: start {rss0 / 1024:.1f} MB (after the first deployment and {args.warmup:.0f} s of "
          f"churn and load), end {rss1 / 1024:.1f} MB, end/start {ratio:.3f}, max {max_rss / 1024:.1f} MB; "
          f"at the first deployment {(base['rss'] or 0) / 1024:.1f} MB")
    print(f"  haptor RSS peaks: first minute {early_peak / 1024:.1f} MB, last minute {late_peak / 1024:.1f} MB, "
          f"last/first {peak_ratio:.3f} (the growth judged)")
    print(f"  haproxy RSS (master + workers): start {base['haproxy_rss'] / 1024:.1f} MB, end {end['haproxy_rss'] / 1024:.1f} MB")
    print(f"  deployments: {delta('deployments'):.0f} (deployment errors {delta('deploy_errors'):.0f}); "
          f"validations {delta('validations'):.0f}, haproxy -c skipped {delta('skipped'):.0f}")
    c2d_n = delta("c2d_count")
    if c2d_n:
        print(f"  change to deployed (haptor_change_to_deploy_seconds): mean {delta('c2d_sum') / c2d_n:.2f} s over {c2d_n:.0f}")
    short = []  # kinds of change whose count was not reached
    by_kind_reloads = collections.Counter()
    if counts:
        print("  changes made (measured, of the counts asked; + warm-up), in effect after (checks):")
        for kind, want in zip(KINDS, args.counts):
            got, warm = summary["done"]["measured"][kind], summary["done"]["warmup"][kind]
            if got < want:
                short.append(f"{got} of {want} {KIND_LABELS[kind]}")
            extra = ""
            if summary["checks_superseded"][kind]:
                extra += f"; {summary['checks_superseded'][kind]} superseded by the next before seen"
            if summary["late"][kind]:
                extra += f"; {summary['late'][kind]} made > 1 s after their slot"
            lat = stats(summary["check_latency"].get(kind, [])) if kind != "endpoint" else "(checked by the load)"
            print(f"    {KIND_LABELS[kind]}: {got} of {want} (+ {warm}); {lat}{extra}")
        mv = summary["map_variants"]
        print(f"    map edits by variant: measured {dict(mv['measured'])}, warm-up {dict(mv['warmup'])} "
              f"(path: /v2 added to or removed from app-M; alias: a new host for an existing Service; "
              f"host: an alias's host changed)")
    else:
        print(f"  changes made: {summary['endpoint_changes']} endpoint changes; structural {structural} = "
              f"{summary['ingress_adds']} Ingress adds + {summary['ingress_removes']} removes + "
              f"{summary['cert_rotations']} certificate rotations")
    print(f"  reloads: {reloads} (the master's counter; haptor's log says {log_rl} deployments "
          f"with a reload); failed reloads {end['failed_reloads']}; haproxy master restarted: {restarted}")
    with LOCK:
        ow = dict(OLD_WORKERS)
    if counts:
        events = log_reload_events(args.haptor_log)[base["log_reloads"]:]
        warm_n = start_rss_sample["log_reloads"] - base["log_reloads"]
        by_phase = {"warmup": collections.Counter(), "measured": collections.Counter()}
        reasons_by_kind = collections.defaultdict(collections.Counter)
        for k, (reason, trigger) in enumerate(events):
            kind = reload_kind(args, reason, trigger)
            by_kind_reloads[kind] += 1
            by_phase["warmup" if k < warm_n else "measured"][kind] += 1
            norm = re.sub(r"(extra|alias|app|ns)-\d+", r"\1-N", reason)
            norm = re.sub(r"pool_\d+", "pool_N", norm)
            reasons_by_kind[kind][f"{norm[:200]} (trigger: {re.sub(r'-[0-9]+', '-N', trigger or '?')})"] += 1
        print(f"    reloads by kind of change (haptor's log): {dict(by_kind_reloads) or 'none'}; "
              f"measured {dict(by_phase['measured']) or 'none'}, warm-up {dict(by_phase['warmup']) or 'none'}")
        for kind, reasons in reasons_by_kind.items():
            for reason, n in reasons.most_common(5):
                print(f"    {kind} reload x{n}: {reason}")
    else:
        reasons = log_reloads(args.haptor_log)[base["log_reloads"]:]
        for reason, n in collections.Counter(re.sub(r"extra-\d+", "extra-J", r) for r in reasons).most_common():
            print(f"    reload reason x{n}: {reason[:200]}")
    print(f"  old workers alive: max {max(max_old, ow['max'])} (show proc every second: "
          f"{ow['nonzero']} of {ow['samples']} samples had one or more), at the end {(end['workers'] or 1) - 1}")
    print(f"  errors: /debug/vars/errors {end['errors']} (at the start {base['errors']}); render errors "
          f"{delta('render_errors'):.0f}, validation errors {delta('validation_errors'):.0f}")
    if end["errors"]:
        for e in (end["errors_list"] or [])[-5:]:
            print(f"    {json.dumps(e)[:300]}")
    print(f"  requests: {sent} sent, {summary['ok']} good, {summary['failed']} failed; "
          f"{summary['removed']} to removed routes (excluded; {summary['removed_failed']} of them not 200); "
          f"{summary['ka_retries']} keep-alive retries")
    print(f"    good by kind: {dict(summary['by_kind'])}; failed by kind: {dict(summary['fail_by_kind'])}")
    print(f"    good HTTPS responses by secure.example's certificate: the first {summary['https_fps']['first']}, "
          f"a rotated one {summary['https_fps']['rotated']} (SNI secure.example; any other certificate "
          f"fails the request)")
    for e in summary["examples"]:
        print(f"    failed: {e}")
    if not counts:
        print(f"  added Ingress answering after: {stats(summary['add_latency'])}")
        print(f"  removed Ingress 404 after: {stats(summary['remove_latency'])}")
        print(f"  rotated certificate served after: {stats(summary['cert_latency'])}")
    for e in summary["churn_errors"]:
        print(f"  churn problem: {e}")

    verdict = []
    if summary["failed"] > 0:
        verdict.append(f"{summary['failed']} failed requests")
    if peak_ratio > 1.10:
        verdict.append(f"RSS peaks grew {100 * (peak_ratio - 1):.1f} % (> 10 %)")
    if counts:
        if reloads is None or reloads > 0 or log_rl > 0:
            caused = ", ".join(f"{k} {n}" for k, n in by_kind_reloads.most_common())
            verdict.append(f"{reloads} reloads (by kind of change: {caused or 'none in the log'})")
        if short:
            verdict.append("counts not reached: " + ", ".join(short))
    elif reloads is None or reloads > structural:
        verdict.append(f"{reloads} reloads for {structural} structural changes")
    if summary["churn_errors"]:
        verdict.append("churn problems")
    if end["errors"] and end["errors"] != base["errors"]:
        verdict.append("errors in /debug/vars/errors")
    if status:
        verdict.append("interrupted or haptor gone")
    print(f"result: {'PASS' if not verdict else 'FAIL: ' + '; '.join(verdict)}")
    sys.exit(1 if verdict else 0)


if __name__ == "__main__":
    main()
