#!/usr/bin/env python3
"""A randomized, bounded soak of a larder cluster, checking invariants after every operation.

    LARDER_BIN=build-asan/gateway/larder python3 tests/soak/soak.py [--seed N] [--ops N]
        [--workers N] [--nodes N] [--ci] [--keep DIR]

What runs: the integration harness's moto upstream (signatures enforced; multipart part minimum
lowered to 64 KiB), one redis-server and --nodes larders (3 by default) with NVMe tiers, 64 KiB
chunks (objects of up to ~330 KB span up to six), a 3 s metadata TTL and a 10 s list cache on the
bucket. --workers threads (at most 8; 6 by default) each draw --ops operations from their own
random.Random(seed, worker), a chaos thread draws node SIGTERM/SIGKILL restarts and Redis restarts
from random.Random(seed, "chaos"), so the operation sequences reproduce (their interleaving is the
machine's). Operations: whole and ranged GETs (a-b, a-, suffix -n, -0, past the end), HEADs,
conditional GETs (If-Match / If-None-Match with the current or a wrong ETag), PUTs (empty, small,
multi-chunk), DELETEs, ListObjectsV2 with a prefix, multipart uploads (completed or aborted),
admin warm (with and without a pin), purge and unpin, GETs cut by the client after some body
bytes, PUTs cut by the client mid-body.

Invariants (each break is printed and counted; the exit status is 1 when any broke):
- bytes: every byte served (whole, ranged or a cut answer's prefix) is the bytes of the version
  its ETag names, and that version may have been current at the origin during the request: it
  was written (started) before the answer ended and no later version's write was acknowledged
  before the request started. Writes of a key are serialized by the script, so the versions are
  ordered. Acknowledged writes must be seen through every node at once, except a write made
  while Redis was down or restarting (docs/cluster.md: staleness then ends when Redis is back or
  the TTL runs out), which is allowed REDIS_GRACE_S more.
- statuses and error codes are S3's: 404 NoSuchKey, 412 PreconditionFailed, 304, 416
  InvalidRange, 206 with a right Content-Range, 204 for DELETE; no 5xx; a refused connection only
  while the node was down; PUT and multipart ETags are the MD5s S3 gives.
- a PUT the client cut mid-body never becomes visible.
- listings: each listed key's ETag and size are of a version allowed for the listing's window,
  and an unlisted key may have been absent then.
- no request lasts SLOW_REQUEST_S (the nodes' access logs), no SIGTERM takes SLOW_STOP_S.
- processes: no node dies unasked; SIGTERM exits 0; no ASan/UBSan/LSan report; RSS stays under
  --max-rss-mib; open fds of each node after the run, once idle, are within FD_SLACK of what the
  same process had after its warm-up.
- at the end, once quiet, every node serves exactly what the origin has, and the origin holds the
  model's last acknowledged version of every key.

--origin fault: the upstream is tests/integration/doubles/fault_origin.py instead of moto (no
listings, no multipart), and a thread from random.Random(seed, "faults") arms one of its faults
every 0.2-1 s (errors, delays, dropped or slow bodies, cut headers, late answers, writes stored
but answered with an error or not at all, refusals); a 5xx carrying the origin's own error code
is then allowed.

--sanity: workers also write straight to the origin (taken as acknowledged at once), which
larder is allowed to miss for up to its TTL: a run must then fail with stale reads, showing that
the checks can fail.

--ci: 4 workers of 60 operations and fewer chaos events, aiming at about a minute.

--previous-bin PATH: the last node runs that larder (an older build of the same cluster
protocol, scripts/build.sh previous) and the others LARDER_BIN, as in a rolling upgrade; every
invariant holds across the versions.

It prints each violation as it happens (VIOLATION <kind> <details>, with the node's request id
where there is one), then the operation counts, each process's peak RSS and each node's fds, and
last `1 passed, 0 failed` or `0 passed, 1 failed`. LARDER_TEST_PORTS=LO-HI picks its ports from
a range, as for the integration tests; --keep DIR keeps the nodes' logs, access logs and the
list of writes and chaos events with their times.
"""
import argparse
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
INTEG = os.path.join(os.path.dirname(HERE), "integration")
sys.path[:0] = [INTEG] + [os.path.join(INTEG, d) for d in ("cluster", "cache", "doubles")]

import harness  # noqa: E402
from test_cluster import Redis, SECRET, TOKEN  # noqa: E402
import fault_origin  # noqa: E402
from admin_calls import AdminCalls  # noqa: E402

BUCKET = "soak"
KiB = 1024
CHUNK = 64 * KiB
METADATA_TTL_S = 3
REDIS_GRACE_S = 2 * METADATA_TTL_S + 12  # a write while Redis is away: stale for up to this
FD_SLACK = 24
SLOW_STOP_S = 10  # a SIGTERM's drain: the soak's requests all end well before
SLOW_REQUEST_S = 20  # no request, the client's or a peer's, lasts longer (access logs)
# With --origin fault: what a 5xx passing on the origin's faults may say.
ORIGIN_FAULT_CODES = ("SlowDown", "InternalError", "ServiceUnavailable")


def etag_of(body):
    return '"%s"' % hashlib.md5(body).hexdigest()


def mpu_etag(parts):
    d = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    return '"%s-%d"' % (d, len(parts))


class AdminClient(AdminCalls):
    ADMIN_TOKEN = TOKEN

    def __init__(self, url):
        self.admin = url

    def fail(self, msg):
        raise AssertionError(msg)


class Version:
    __slots__ = ("body", "etag", "s", "a", "relax", "what")

    def __init__(self, body, etag, s, what):
        self.body, self.etag, self.s, self.a, self.relax, self.what = body, etag, s, None, 0, what

    def superseded_by_before(self, t):
        return self.a is not None and self.a + self.relax < t


class Model:
    """Per key, the versions in write order (writes of a key are serialized)."""

    def __init__(self, keys):
        self.lock = threading.Lock()
        self.versions = {k: [Version(None, None, float("-inf"), "absent")] for k in keys}
        self.versions_by_etag = {}
        self.key_locks = {k: threading.Lock() for k in keys}
        self.forbidden = {}  # ETag -> key of bodies cut mid-PUT: never to be served

    def begin(self, key, body, etag, what):
        v = Version(body, etag, time.monotonic(), what)
        with self.lock:
            self.versions[key].append(v)
            if etag:
                self.versions_by_etag[etag] = v
        return v

    def allowed(self, key, t0, t1):
        with self.lock:
            vs = list(self.versions[key])
        out = []
        for i, v in enumerate(vs):
            if v.s >= t1:
                continue
            if any(w.superseded_by_before(t0) for w in vs[i + 1:]):
                continue
            out.append(v)
        return out

    def last_acked(self, key):
        with self.lock:
            vs = list(self.versions[key])
        for i in range(len(vs) - 1, -1, -1):
            if vs[i].a is not None or i == 0:
                return vs[i:]  # that one, and any of unknown outcome after it
        return vs


class Soak:
    def __init__(self, args):
        self.args = args
        self.seed = args.seed
        self.keys = ["d%d/k%d" % (i % 3, i) for i in range(args.keys)]
        self.model = Model(self.keys)
        self.lock = threading.Lock()
        self.bad = []
        self.counts = {}
        self.events = []
        self.down = {}  # node index -> [(t_from, t_to or None)]
        self.redis_down = []  # [(t_from, t_to or None)]
        self.restarting = set()
        self.local = threading.local()
        self.stop_chaos = threading.Event()
        self.jobs = []  # (node index, pid, job id)
        self.baselines = {}  # pid -> fds after warm-up
        self.rss_peak = {}  # pid -> VmRSS peak seen (bytes)

    # ------------------------------------------------------------ bookkeeping
    def note(self, what, n=1):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n

    def fail(self, what, **detail):
        with self.lock:
            self.bad.append(dict(what=what, t=round(time.monotonic() - self.t_start, 3), **detail))
        print("VIOLATION %s %s" % (what, json.dumps(detail, default=str)[:1500]), flush=True)

    def event(self, **e):
        with self.lock:
            self.events.append(dict(t=round(time.monotonic() - self.t_start, 4), **e))

    def node_was_down(self, ni, t0, t1):
        for a, b in self.down.get(ni, []):
            if a <= t1 and (b is None or b >= t0):
                return True
        return False

    def redis_was_down(self, t0, t1):
        for a, b in self.redis_down:
            if a <= t1 and (b is None or b + REDIS_GRACE_S >= t0):
                return True
        return False

    # ------------------------------------------------------------ cluster
    def start(self):
        os.environ["S3_UPLOAD_PART_MIN_SIZE"] = str(CHUNK)  # moto's multipart minimum
        self.redis = Redis().start()
        if self.args.origin == "fault":
            self.origin = fault_origin.FaultOrigin().start()
            self.origin.create_bucket(BUCKET)
            self.upstream = None
        else:
            self.origin = None
            self.upstream = harness.Upstream().start()
            self.direct = self.upstream.client()
            self.direct.create_bucket(Bucket=BUCKET)
        self.cache_dirs = [tempfile.mkdtemp(prefix="larder-soak-nvme-%d-" % i)
                           for i in range(self.args.nodes)]
        self.nodes = [self.make_node(i) for i in range(self.args.nodes)]
        for n in self.nodes:
            n.start()
        self.wait_members(len(self.nodes))

    def make_node(self, i):
        conf = "[bucket %s]\nlist_cache_ttl = 10\n" % BUCKET
        env = {
            "LARDER_REDIS_URL": self.redis.url, "LARDER_NODE_ID": "node-%d" % i,
            "LARDER_CLUSTER_SECRET": SECRET, "LARDER_ADMIN_TOKEN": TOKEN,
            "LARDER_CHUNK_SIZE": "64KiB", "LARDER_METADATA_TTL": str(METADATA_TTL_S),
            "LARDER_RAM_CACHE_SIZE": "4MiB", "LARDER_CACHE_DIR": self.cache_dirs[i],
            "LARDER_DISK_CACHE_SIZE": "64MiB", "LARDER_LOG_LEVEL": "warn",
        }
        if self.origin is not None:  # S3 semantics, faults on demand; it lists nothing
            env.update({"LARDER_UPSTREAM_URL": self.origin.url,
                        "AWS_ACCESS_KEY_ID": fault_origin.ORIGIN_KEY,
                        "AWS_SECRET_ACCESS_KEY": fault_origin.ORIGIN_SECRET,
                        "LARDER_UPSTREAM_REGION": fault_origin.ORIGIN_REGION,
                        "LARDER_UPSTREAM_TIMEOUT": "5", "LARDER_UPSTREAM_RETRIES": "3"})
            conf = None
        n = harness.Larder(self.upstream, env=env, config_text=conf)
        if self.args.previous_bin and i == self.args.nodes - 1:
            n.binary = self.args.previous_bin  # the older side of a rolling upgrade
        n.admin_port = harness.free_port()
        n.env["LARDER_ADVERTISE"] = "127.0.0.1:%d" % n.port
        n.env["LARDER_ADMIN_LISTEN"] = "127.0.0.1:%d" % n.admin_port
        n.san_seen = ""
        return n

    def admin(self, ni, method, path, body=None):
        """(status, JSON answer) of an admin request to node ni."""
        return AdminClient("http://127.0.0.1:%d" % self.nodes[ni].admin_port).call(
            method, path, body)

    def wait_members(self, want, timeout=30):
        deadline = time.monotonic() + timeout
        views = None
        while time.monotonic() < deadline:
            try:
                views = [self.admin(i, "GET", "/admin/cluster")[1]
                         for i, n in enumerate(self.nodes) if n.alive()]
                if all(v["redis_up"] and len(v["members"]) == want and v["subscribed"]
                       for v in views):
                    return True
            except OSError as e:
                views = repr(e)
            time.sleep(0.2)
        self.fail("cluster did not form", want=want, views=str(views)[:2000])
        return False

    def check_sanitizers(self, ni, when):
        n = self.nodes[ni]
        text = n.sanitizer_text()
        if text and text != n.san_seen:
            n.san_seen = text
            self.fail("sanitizer", node=ni, when=when, report=text[:6000])

    def proc_fds(self, pid):
        try:
            return len(os.listdir("/proc/%d/fd" % pid))
        except OSError:
            return None

    def sample_rss(self):
        for n in self.nodes:
            if not n.alive():
                continue
            try:
                rss = n.status_bytes("VmRSS")
            except (OSError, RuntimeError):
                continue
            with self.lock:
                self.rss_peak[n.pid] = max(self.rss_peak.get(n.pid, 0), rss)
            if rss > self.args.max_rss_mib * 1024 * 1024:
                self.fail("rss", node=self.nodes.index(n), rss_mib=rss >> 20)

    # ------------------------------------------------------------ chaos
    def chaos(self):
        rnd = random.Random("%d-chaos" % self.seed)
        while not self.stop_chaos.wait(rnd.uniform(*self.args.chaos_every)):
            what = rnd.choices(["term", "kill", "redis"], [4, 4, 2])[0]
            if what == "redis":
                t = time.monotonic()
                self.redis_down.append((t, None))
                self.event(op="chaos", what="redis-stop")
                self.redis.stop()
                time.sleep(rnd.uniform(0.2, 2.5))
                self.redis.start()
                self.redis_down[-1] = (t, time.monotonic())
                self.event(op="chaos", what="redis-start")
                self.note("chaos_redis")
                self.wait_members(len(self.nodes))
                continue
            ni = rnd.randrange(len(self.nodes))
            n = self.nodes[ni]
            self.restarting.add(ni)
            t = time.monotonic()
            self.down.setdefault(ni, []).append((t, None))
            self.event(op="chaos", what=what, node=ni)
            if what == "term":
                code = n.stop(timeout=40)
                took = time.monotonic() - t
                if code != 0:
                    self.fail("sigterm exit", node=ni, code=code, log=n.log()[-3000:])
                elif took > SLOW_STOP_S:
                    self.fail("slow sigterm", node=ni, seconds=round(took, 1),
                              log=n.log()[-2000:])
            else:
                n.signal(signal.SIGKILL)
                n.proc.wait()
            self.check_sanitizers(ni, "before restart (%s)" % what)
            time.sleep(rnd.uniform(0, 1.5))
            try:
                n.start()
            except Exception as e:
                self.fail("restart", node=ni, error=str(e)[:3000])
                return
            self.down[ni][-1] = (t, time.monotonic())
            self.restarting.discard(ni)
            self.event(op="chaos", what="started", node=ni, pid=n.pid)
            self.note("chaos_" + what)
            self.wait_members(len(self.nodes))

    def faults(self):
        """--origin fault: every so often one fault for the origin's next matching requests."""
        rnd = random.Random("%d-faults" % self.seed)
        o = self.origin
        while not self.stop_chaos.wait(rnd.uniform(0.2, 1.0)):
            key = rnd.choice(self.keys + [None])
            kind = rnd.choice(["fail", "fail-put", "delay", "delay-put", "drop", "slow",
                               "cut-headers", "late", "lose-answer", "error-after",
                               "answer-after", "refuse"])
            if kind == "fail":
                o.fail_next(rnd.randrange(1, 4), status=rnd.choice([500, 503]),
                            code=rnd.choice(["InternalError", "SlowDown"]),
                            methods=("GET", "HEAD"), bucket=BUCKET, key=key)
            elif kind == "fail-put":
                o.fail_next(1, status=503, code="SlowDown", methods=("PUT", "DELETE"),
                            bucket=BUCKET, key=key)
            elif kind == "delay":
                o.delay_next(rnd.randrange(50, 1500), bucket=BUCKET, key=key,
                             methods=("GET", "HEAD"))
            elif kind == "delay-put":
                o.delay_next(rnd.randrange(50, 1500), bucket=BUCKET, key=key,
                             methods=("PUT", "DELETE"))
            elif kind == "drop":
                o.drop_next(rnd.randrange(0, 3 * CHUNK), reset=rnd.random() < 0.5,
                            bucket=BUCKET, key=key)
            elif kind == "slow":
                o.slow_next(rnd.choice([4096, 65536]), rnd.randrange(5, 60), bucket=BUCKET,
                            key=key)
            elif kind == "cut-headers":
                o.cut_headers_next(bucket=BUCKET, key=key)
            elif kind == "late":
                o.late_next(rnd.randrange(50, 800), bucket=BUCKET, key=key)
            elif kind == "lose-answer":
                o.lose_answer_next(bucket=BUCKET, key=key, methods=("PUT", "DELETE"))
            elif kind == "error-after":
                o.error_after_next(bucket=BUCKET, key=key, methods=("PUT", "DELETE"))
            elif kind == "answer-after":
                o.answer_after_next(rnd.randrange(50, 1500), bucket=BUCKET, key=key)
            else:
                o.refuse_next(1, bucket=BUCKET, key=key)
            self.note("fault/" + kind)

    def watch(self):
        while not self.stop_chaos.wait(1.0):
            self.sample_rss()
            for i, n in enumerate(self.nodes):
                if i not in self.restarting and n.proc is not None and n.proc.poll() is not None:
                    self.fail("node died", node=i, code=n.proc.returncode,
                              log=n.log()[-3000:])
                    self.restarting.add(i)  # once

    # ------------------------------------------------------------ requests
    def pick_node(self, rnd):
        live = [i for i in range(len(self.nodes)) if i not in self.restarting]
        return rnd.choice(live) if live else 0

    def raw(self, ni, method, path, headers=None, body=b"", timeout=60):
        """A signed request; returns (status or None, headers, body, complete, t0, t1)."""
        base = self.nodes[ni].url
        h = harness.sign_headers(method, base + path, harness.CLIENT_KEY, harness.CLIENT_SECRET,
                                 headers, body=body)
        t0 = time.monotonic()
        c = http.client.HTTPConnection("127.0.0.1", self.nodes[ni].port, timeout=timeout)
        status, hdrs, data, complete = None, {}, b"", False
        try:
            c.request(method, path, body=body or None, headers=h)
            r = c.getresponse()
            status, hdrs = r.status, {k.lower(): v for k, v in r.getheaders()}
            try:
                data, complete = r.read(), True
            except http.client.IncompleteRead as e:
                data = e.partial
            except (OSError, http.client.HTTPException):
                pass
        except (OSError, http.client.HTTPException):
            pass
        finally:
            c.close()
        return status, hdrs, data, complete, t0, time.monotonic()

    def s3(self, ni):
        cl = getattr(self.local, "clients", None)
        if cl is None:
            cl = self.local.clients = {}
        if ni not in cl:
            cl[ni] = self.nodes[ni].client(read_timeout=60)
        return cl[ni]

    def path(self, key):
        return harness.key_path(BUCKET, key)

    def body_for(self, rnd, key):
        kind = rnd.choices(["empty", "small", "chunks", "edge"], [1, 4, 4, 2])[0]
        n = {"empty": 0, "small": rnd.randrange(1, 3000),
             "chunks": rnd.randrange(CHUNK, 5 * CHUNK + 7000),
             "edge": rnd.choice([CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK - 1])}[kind]
        tag = ("%s|%d|%f|" % (key, rnd.getrandbits(64), time.monotonic())).encode()
        return (tag * (n // len(tag) + 1))[:n] if n else b""

    # ------------------------------------------------------------ checks
    def expect_refused(self, ni, t0, t1, op, **d):
        if self.node_was_down(ni, t0, t1):
            self.note("refused_while_down")
        else:
            self.fail("no answer", op=op, node=ni, **d)

    def check_5xx(self, status, hdrs, body, ni, t0, t1, op, **d):
        if status is not None and status >= 500:
            code = self.s3_code(body) if body else None
            if self.node_was_down(ni, t0, t1):
                self.note("5xx_while_down")
            elif self.origin is not None and (code in ORIGIN_FAULT_CODES or
                                              body == b"" and op == "head"):
                self.note("5xx_origin_fault/%s" % code)  # the origin's own, passed on
            else:
                self.fail("5xx", op=op, node=ni, status=status, body=body[:300],
                          rid=hdrs.get("x-larder-request-id"), **d)
            return True
        return False

    def version_of(self, key, etag, allowed, ni, t0, t1, op, **d):
        v = next((x for x in allowed if x.etag == etag), None)
        if v is None:
            with self.model.lock:
                old = self.model.versions_by_etag.get(etag)
                forb = etag in self.model.forbidden
            if forb:
                self.fail("served a PUT the client cut", op=op, node=ni, key=key, etag=etag, **d)
            elif old is not None:
                self.fail("stale or early version", op=op, node=ni, key=key, etag=etag,
                          served=old.what, served_s=old.s - self.t_start,
                          allowed=[(x.etag, x.what) for x in allowed],
                          window=(t0 - self.t_start, t1 - self.t_start), **d)
            else:
                self.fail("unknown etag", op=op, node=ni, key=key, etag=etag, **d)
        return v

    def expect_absent_ok(self, key, allowed, ni, t0, t1, op, **d):
        if not any(v.body is None for v in allowed):
            self.fail("404 while the key existed", op=op, node=ni, key=key,
                      allowed=[(x.etag, x.what) for x in allowed],
                      window=(t0 - self.t_start, t1 - self.t_start), **d)

    def s3_code(self, body):
        return harness.s3_error(body)[0]

    # ------------------------------------------------------------ operations
    def op_get(self, rnd, ni, key, cut=False):
        h = {}
        rk = None
        if not cut and rnd.random() < 0.6:
            rk = rnd.choice(["ab", "a-", "suffix", "suffix0", "past", "ab-past"])
            a = rnd.randrange(0, 6 * CHUNK)
            rng = {"ab": "bytes=%d-%d" % (a, a + rnd.randrange(0, 3 * CHUNK)),
                   "a-": "bytes=%d-" % a, "suffix": "bytes=-%d" % rnd.randrange(1, 6 * CHUNK),
                   "suffix0": "bytes=-0", "past": "bytes=%d-" % (6 * CHUNK + 8000 + a),
                   "ab-past": "bytes=%d-%d" % (a, 9 * CHUNK)}[rk]
            h["Range"] = rng
        if cut:
            return self.op_cut_get(rnd, ni, key)
        st, hd, body, complete, t0, t1 = self.raw(ni, "GET", self.path(key), h)
        op = "get" + ("/" + rk if rk else "")
        self.note(op)
        if st is None:
            return self.expect_refused(ni, t0, t1, op, key=key)
        if self.check_5xx(st, hd, body, ni, t0, t1, op, key=key, range=h.get("Range")):
            return
        allowed = self.model.allowed(key, t0, t1)
        rid = hd.get("x-larder-request-id")
        if st == 404:
            if self.s3_code(body) != "NoSuchKey":
                self.fail("404 code", op=op, key=key, body=body[:300], rid=rid)
            return self.expect_absent_ok(key, allowed, ni, t0, t1, op, rid=rid)
        if st == 416:
            if self.s3_code(body) != "InvalidRange":
                self.fail("416 code", op=op, key=key, body=body[:300], rid=rid)
            sizes = [len(v.body) for v in allowed if v.body is not None]
            if not any(self.unsatisfiable(h["Range"], n) for n in sizes):
                self.fail("416 for a satisfiable range", op=op, node=ni, key=key,
                          range=h["Range"], sizes=sizes, rid=rid)
            return
        if st not in (200, 206):
            return self.fail("status", op=op, node=ni, key=key, status=st, body=body[:300],
                             range=h.get("Range"), rid=rid)
        v = self.version_of(key, hd.get("etag"), allowed, ni, t0, t1, op, rid=rid,
                            cache=hd.get("x-larder-cache"), range=h.get("Range"))
        if v is None:
            return
        want, want_status = v.body, 200
        if "Range" in h:
            span = self.satisfy(h["Range"], len(v.body))
            if span is None:
                if len(v.body) == 0 and st == 200:
                    span = None  # an empty object: S3 ignores the range
                else:
                    return self.fail("answered an unsatisfiable range", op=op, node=ni, key=key,
                                     status=st, range=h["Range"], size=len(v.body), rid=rid)
            if span is not None:
                want, want_status = v.body[span[0]:span[1] + 1], 206
                cr = "bytes %d-%d/%d" % (span[0], span[1], len(v.body))
                if hd.get("content-range") != cr:
                    self.fail("content-range", op=op, node=ni, key=key, got=hd.get(
                        "content-range"), want=cr, rid=rid)
        if st != want_status:
            self.fail("status", op=op, node=ni, key=key, status=st, want=want_status,
                      range=h.get("Range"), rid=rid)
        if complete and body != want or not complete and not want.startswith(body):
            self.fail("bytes", op=op, node=ni, key=key, complete=complete, got=len(body),
                      want=len(want), range=h.get("Range"), rid=rid,
                      cache=hd.get("x-larder-cache"))
        elif not complete:
            if self.node_was_down(ni, t0, t1):
                self.note("cut_while_down")
            else:
                # a version change mid-answer may cut it (docs/cache.md): only if one happened
                later = [x for x in self.model.allowed(key, t0, t1) if x.s > v.s]
                if later:
                    self.note("cut_by_write")
                else:
                    self.fail("answer cut short", op=op, node=ni, key=key, got=len(body),
                              want=len(want), rid=rid)

    @staticmethod
    def satisfy(rng, n):
        """(first, last) S3 serves for rng on n bytes, or None (416)."""
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng)
        a, b = m.group(1), m.group(2)
        if a == "":
            k = int(b)
            if k == 0 or n == 0:
                return None
            return max(0, n - k), n - 1
        a = int(a)
        if a >= n:
            return None
        last = n - 1 if b == "" else min(int(b), n - 1)
        return a, last

    def unsatisfiable(self, rng, n):
        return self.satisfy(rng, n) is None

    def op_cut_get(self, rnd, ni, key):
        """A GET the client hangs up on after some body bytes."""
        self.note("get/cut")
        keep = rnd.choice([0, 1, 100, CHUNK // 2, CHUNK + 5, 3 * CHUNK])
        path = self.path(key)
        t0 = time.monotonic()
        try:
            s = harness.signed_socket(self.nodes[ni], "GET", path, timeout=20)
        except OSError:
            return self.expect_refused(ni, t0, time.monotonic(), "get/cut", key=key)
        got = b""
        try:
            while True:
                head_end = got.find(b"\r\n\r\n")
                if head_end >= 0 and len(got) - head_end - 4 >= keep:
                    break
                b = s.recv(65536)
                if not b:
                    break
                got += b
        except OSError:
            pass
        finally:
            if rnd.random() < 0.5:  # a reset rather than a FIN
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        t1 = time.monotonic()
        head_end = got.find(b"\r\n\r\n")
        if head_end < 0:
            if not self.node_was_down(ni, t0, t1):
                self.fail("cut get: no headers", node=ni, key=key, got=got[:200])
            return
        lines = got[:head_end].decode("latin-1").split("\r\n")
        st = int(lines[0].split()[1])
        hd = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip() for ln in lines[1:]}
        body = got[head_end + 4:]
        if hd.get("transfer-encoding") == "chunked" or st not in (200,):
            if st == 404:
                return self.expect_absent_ok(key, self.model.allowed(key, t0, t1), ni, t0, t1,
                                             "get/cut")
            if not self.check_5xx(st, hd, body, ni, t0, t1, "get/cut", key=key):
                self.fail("cut get status", node=ni, key=key, status=st, head=lines[:12])
            return
        v = self.version_of(key, hd.get("etag"), self.model.allowed(key, t0, t1), ni, t0, t1,
                            "get/cut")
        if v is not None and not v.body.startswith(body[:len(v.body)]):
            self.fail("cut get bytes", node=ni, key=key, got=len(body))

    def op_head(self, rnd, ni, key):
        self.note("head")
        st, hd, body, complete, t0, t1 = self.raw(ni, "HEAD", self.path(key))
        if st is None:
            return self.expect_refused(ni, t0, t1, "head", key=key)
        if self.check_5xx(st, hd, body, ni, t0, t1, "head", key=key):
            return
        allowed = self.model.allowed(key, t0, t1)
        if st == 404:
            return self.expect_absent_ok(key, allowed, ni, t0, t1, "head")
        if st != 200:
            return self.fail("status", op="head", node=ni, key=key, status=st)
        v = self.version_of(key, hd.get("etag"), allowed, ni, t0, t1, "head",
                            rid=hd.get("x-larder-request-id"))
        if v is not None and hd.get("content-length") != str(len(v.body)):
            self.fail("head length", node=ni, key=key, got=hd.get("content-length"),
                      want=len(v.body))

    def op_cond(self, rnd, ni, key):
        with self.model.lock:
            cur = [v for v in self.model.versions[key] if v.etag][-1:]
        right = cur[0].etag if cur else etag_of(b"nothing")
        etag = right if rnd.random() < 0.6 else etag_of(b"wrong %d" % rnd.getrandbits(32))
        kind = rnd.choice(["If-Match", "If-None-Match"])
        op = "cond/%s/%s" % (kind, "right" if etag == right else "wrong")
        self.note(op)
        st, hd, body, complete, t0, t1 = self.raw(ni, "GET", self.path(key), {kind: etag})
        if st is None:
            return self.expect_refused(ni, t0, t1, op, key=key)
        if self.check_5xx(st, hd, body, ni, t0, t1, op, key=key):
            return
        allowed = self.model.allowed(key, t0, t1)
        rid = hd.get("x-larder-request-id")
        if st == 404:
            return self.expect_absent_ok(key, allowed, ni, t0, t1, op, rid=rid)
        if st == 412:
            if self.s3_code(body) != "PreconditionFailed":
                self.fail("412 code", op=op, key=key, body=body[:300], rid=rid)
            if kind != "If-Match" or not any(v.body is not None and v.etag != etag
                                             for v in allowed):
                self.fail("412 wrongly", op=op, node=ni, key=key, etag=etag, rid=rid,
                          allowed=[(x.etag, x.what) for x in allowed])
            return
        if st == 304:
            if body:
                self.fail("304 with a body", op=op, key=key, rid=rid)
            if kind != "If-None-Match" or etag not in [v.etag for v in allowed]:
                self.fail("304 wrongly", op=op, node=ni, key=key, etag=etag, rid=rid,
                          allowed=[(x.etag, x.what) for x in allowed])
            return
        if st != 200:
            return self.fail("status", op=op, node=ni, key=key, status=st, rid=rid)
        v = self.version_of(key, hd.get("etag"), allowed, ni, t0, t1, op, rid=rid)
        if v is None:
            return
        if (kind == "If-Match") != (v.etag == etag):
            self.fail("condition not honoured", op=op, node=ni, key=key, sent=etag,
                      served=v.etag, rid=rid)
        if complete and body != v.body:
            self.fail("bytes", op=op, node=ni, key=key, rid=rid)

    def op_put(self, rnd, ni, key):
        body = self.body_for(rnd, key)
        et = etag_of(body)
        with self.model.key_locks[key]:
            v = self.model.begin(key, body, et, "put %d" % len(body))
            st, hd, rb, complete, t0, t1 = self.raw(ni, "PUT", self.path(key), body=body)
            self.note("put")
            self.finish_write(v, st, hd, rb, ni, t0, t1, "put", key, et, ok=(200,))

    def finish_write(self, v, st, hd, rb, ni, t0, t1, op, key, et, ok):
        if st in ok and (et is None or hd.get("etag") == et):
            v.a = time.monotonic()
            if self.redis_was_down(v.s, v.a):
                v.relax = REDIS_GRACE_S
            self.event(op=op, key=key, node=ni, etag=et, s=v.s - self.t_start,
                       a=v.a - self.t_start)
            return
        if st in ok:
            self.fail("write etag", op=op, node=ni, key=key, got=hd.get("etag"), want=et)
            v.a = time.monotonic()
            return
        if st == 403 and self.origin is not None and self.s3_code(rb) == "AccessDenied":
            v.s = float("inf")  # the origin's refuse_next: never applied
            self.note("write_refused_by_origin")
            return
        # Outcome unknown (or refused): it stays possible until a later write is acknowledged.
        self.event(op=op + "-unknown", key=key, node=ni, status=st)
        if st is None:
            self.expect_refused(ni, t0, t1, op, key=key)
        elif not self.check_5xx(st, hd, rb, ni, t0, t1, op, key=key):
            self.fail("write status", op=op, node=ni, key=key, status=st, body=rb[:300])
        time.sleep(1.0)  # an orphaned upstream request lands before the next write

    def op_delete(self, rnd, ni, key):
        with self.model.key_locks[key]:
            v = self.model.begin(key, None, None, "delete")
            st, hd, rb, complete, t0, t1 = self.raw(ni, "DELETE", self.path(key))
            self.note("delete")
            self.finish_write(v, st, hd, rb, ni, t0, t1, "delete", key, None, ok=(204,))

    def op_cut_put(self, rnd, ni, key):
        body = self.body_for(rnd, key) + b"cut"
        et = etag_of(body)
        with self.model.lock:
            self.model.forbidden[et] = key
        self.note("put/cut")
        t0 = time.monotonic()
        try:
            s = harness.signed_socket(self.nodes[ni], "PUT", self.path(key), body=body,
                                      sent=rnd.randrange(0, len(body)))
        except OSError:
            return self.expect_refused(ni, t0, time.monotonic(), "put/cut", key=key)
        try:
            time.sleep(rnd.choice([0, 0.05, 0.3]))
        finally:
            s.close()

    def op_mpu(self, rnd, ni, key):
        c = self.s3(ni)
        nparts = rnd.randrange(1, 4)
        parts = []
        for i in range(nparts):
            n = rnd.randrange(CHUNK, 2 * CHUNK + 100) if i < nparts - 1 else rnd.randrange(1, CHUNK)
            tag = ("%s|mpu|%d|%d|" % (key, i, rnd.getrandbits(64))).encode()
            parts.append((tag * (n // len(tag) + 1))[:n])
        abort = rnd.random() < 0.2
        self.note("mpu/abort" if abort else "mpu")
        t0 = time.monotonic()
        try:
            up = c.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
            done = []
            for i, p in enumerate(parts):
                r = c.upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=i + 1, Body=p)
                if r["ETag"] != etag_of(p):
                    self.fail("part etag", node=ni, key=key, got=r["ETag"])
                done.append({"ETag": r["ETag"], "PartNumber": i + 1})
        except Exception as e:
            if not self.node_was_down(ni, t0, time.monotonic()):
                self.fail("mpu parts", node=ni, key=key, error=repr(e)[:500])
            return
        if abort:
            try:
                c.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up)
            except Exception as e:
                if not self.node_was_down(ni, t0, time.monotonic()):
                    self.fail("mpu abort", node=ni, key=key, error=repr(e)[:500])
            return
        body, et = b"".join(parts), mpu_etag(parts)
        with self.model.key_locks[key]:
            v = self.model.begin(key, body, et, "mpu %d" % len(body))
            t1 = time.monotonic()
            try:
                r = c.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up,
                                                MultipartUpload={"Parts": done})
                st, hd = 200, {"etag": r["ETag"]}
            except Exception as e:
                st, hd = getattr(e, "response", {}).get("ResponseMetadata", {}).get(
                    "HTTPStatusCode"), {}
            self.finish_write(v, st, hd, b"", ni, t1, time.monotonic(), "mpu", key, et,
                              ok=(200,))

    def op_list(self, rnd, ni, key):
        prefix = rnd.choice(["", "d0/", "d1/", "d2/", "d1/k"])
        self.note("list")
        t0 = time.monotonic()
        try:
            r = self.s3(ni).list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        except Exception as e:
            st = getattr(e, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
            if not self.node_was_down(ni, t0, time.monotonic()):
                self.fail("list", node=ni, prefix=prefix, status=st, error=repr(e)[:500])
            return
        t1 = time.monotonic()
        listed = {o["Key"]: (o["ETag"], o["Size"]) for o in r.get("Contents", [])}
        hit = r["ResponseMetadata"]["HTTPHeaders"].get("x-larder-cache")
        for k in self.keys:
            if not k.startswith(prefix):
                continue
            allowed = self.model.allowed(k, t0, t1)
            if k in listed:
                et, size = listed[k]
                if not any(v.etag == et and len(v.body) == size for v in allowed
                           if v.body is not None):
                    with self.model.lock:
                        old = self.model.versions_by_etag.get(et)
                    self.fail("listing: stale or unknown entry", node=ni, key=k, etag=et,
                              size=size, cache=hit, served=old and old.what,
                              allowed=[(x.etag, x.what) for x in allowed],
                              window=(t0 - self.t_start, t1 - self.t_start))
            elif not any(v.body is None for v in allowed):
                self.fail("listing: key missing", node=ni, key=k, cache=hit, prefix=prefix,
                          allowed=[(x.etag, x.what) for x in allowed],
                          window=(t0 - self.t_start, t1 - self.t_start))
        extra = set(listed) - set(self.keys)
        if extra:
            self.fail("listing: keys never written", node=ni, keys=sorted(extra)[:10])

    def op_admin(self, rnd, ni, key):
        what = rnd.choice(["warm", "warm-pin", "purge-key", "purge-prefix", "unpin"])
        self.note("admin/" + what)
        t0 = time.monotonic()
        try:
            if what.startswith("warm"):
                body = {"bucket": BUCKET}
                if rnd.random() < 0.5 or self.origin is not None:
                    body["keys"] = rnd.sample(self.keys, rnd.randrange(1, 4))
                else:
                    body["prefix"] = rnd.choice(["d0/", "d1/", "d2/"])
                if what == "warm-pin":
                    body["pin_seconds"] = rnd.randrange(2, 20)
                st, ans = self.admin(ni, "POST", "/admin/prefetch", body)
                if st == 202:
                    self.jobs.append((ni, self.nodes[ni].pid, ans["job"]))
                elif not (st == 409 and isinstance(ans, dict)
                          and "pin" in json.dumps(ans)) and not (  # pin_too_large: RAM full
                        self.origin is not None and st in (502, 503) and isinstance(ans, dict)
                        and ans.get("error") == "upstream_unavailable"):  # a fault armed
                    self.fail("warm", node=ni, status=st, answer=str(ans)[:300], body=body)
            elif what.startswith("purge"):
                body = {"bucket": BUCKET}
                if what == "purge-key":
                    body["key"] = key
                else:
                    body["prefix"] = key.split("/")[0] + "/"
                st, ans = self.admin(ni, "POST", "/admin/purge", body)
                if st != 200:
                    self.fail("purge", node=ni, status=st, answer=str(ans)[:300])
            else:
                st, ans = self.admin(ni, "POST", "/admin/unpin",
                                     {"bucket": BUCKET, "prefix": key.split("/")[0] + "/"})
                if st not in (200, 404):
                    self.fail("unpin", node=ni, status=st, answer=str(ans)[:300])
        except OSError as e:
            if not self.node_was_down(ni, t0, time.monotonic()):
                self.fail("admin " + what, node=ni, error=repr(e))

    def op_behind(self, rnd, ni, key):
        """--sanity: a write straight to the origin, behind larder's back, taken as
        acknowledged. Larder may serve the replaced version for up to its metadata TTL
        (docs/cluster.md): the checks must say so, or they check nothing."""
        body = self.body_for(rnd, key) + b"behind"
        et = etag_of(body)
        with self.model.key_locks[key]:
            v = self.model.begin(key, body, et, "behind %d" % len(body))
            if self.origin is not None:
                self.origin.put(BUCKET, key, body)
            else:
                self.direct.put_object(Bucket=BUCKET, Key=key, Body=body)
            v.a = time.monotonic()
        self.note("behind")

    OPS = [("get", 30), ("head", 6), ("cond", 8), ("put", 12), ("delete", 3), ("list", 5),
           ("mpu", 3), ("admin", 4), ("cutget", 3), ("cutput", 2)]

    def worker(self, w):
        rnd = random.Random("%d-worker-%d" % (self.seed, w))
        ops = [o for o in self.OPS if self.origin is None or o[0] not in ("list", "mpu")]
        if self.args.sanity:
            ops.append(("behind", 8))
        names, weights = zip(*ops)
        for i in range(self.args.ops):
            op = rnd.choices(names, weights)[0]
            key = rnd.choice(self.keys)
            ni = self.pick_node(rnd)
            try:
                if op == "get":
                    self.op_get(rnd, ni, key)
                elif op == "cutget":
                    self.op_get(rnd, ni, key, cut=True)
                elif op == "cutput":
                    self.op_cut_put(rnd, ni, key)
                else:
                    getattr(self, "op_" + op)(rnd, ni, key)
            except Exception:
                self.fail("script error", op=op, node=ni, key=key, tb=traceback.format_exc())

    # ------------------------------------------------------------ phases
    def warm_up(self):
        rnd = random.Random("%d-setup" % self.seed)
        for k in self.keys:
            self.op_put(rnd, 0, k)
        for _ in range(2):  # every node reads every key once: its pools and caches fill
            for ni in range(len(self.nodes)):
                for k in self.keys:
                    self.op_get(rnd, ni, k)
                if self.origin is None:
                    self.op_list(rnd, ni, self.keys[0])
        time.sleep(1)
        for n in self.nodes:
            self.baselines[n.pid] = self.proc_fds(n.pid)

    def settle_and_verify(self):
        if self.origin is not None:
            self.origin.clear_faults()
            self.origin.wait_idle(10)
        deadline = time.monotonic() + 60
        for ni, pid, job in self.jobs:
            if self.nodes[ni].pid != pid or not self.nodes[ni].alive():
                continue
            while time.monotonic() < deadline:
                st, ans = self.admin(ni, "GET", "/admin/jobs/" + job)
                if st != 200 or ans.get("state") in ("done", "failed", "cancelled"):
                    break
                time.sleep(0.2)
        self.wait_members(len(self.nodes))
        time.sleep(REDIS_GRACE_S if self.redis_down else 1)
        for k in self.keys:
            if self.origin is not None:
                o = self.origin.get(BUCKET, k)
                truth = (o.etag, bytes(o.data)) if o is not None else (None, None)
            else:
                try:
                    o = self.direct.get_object(Bucket=BUCKET, Key=k)
                    truth = (o["ETag"], o["Body"].read())
                except self.direct.exceptions.NoSuchKey:
                    truth = (None, None)
            cands = self.model.last_acked(k)
            if not any(v.etag == truth[0] and v.body == truth[1] for v in cands):
                self.fail("origin lost a write", key=k, origin=truth[0],
                          model=[(v.etag, v.what, v.a is not None) for v in cands])
            for ni in range(len(self.nodes)):
                st, hd, body, complete, t0, t1 = self.raw(ni, "GET", self.path(k))
                got = (hd.get("etag"), body) if st == 200 else (None, None) if st == 404 \
                    else ("status %s" % st, None)
                if got != truth:
                    self.fail("final read differs from origin", key=k, node=ni, status=st,
                              got=got[0], origin=truth[0], rid=hd.get("x-larder-request-id"),
                              cache=hd.get("x-larder-cache"))
                self.note("final_reads")
        time.sleep(2)
        self.fds = {}
        for i, n in enumerate(self.nodes):
            now = self.proc_fds(n.pid)
            base = self.baselines.get(n.pid)
            self.fds[i] = (base, now)
            if base is not None and now is not None and now > base + FD_SLACK:
                self.fail("fd growth", node=i, before=base, after=now,
                          fds=sorted(os.readlink("/proc/%d/fd/%s" % (n.pid, f))
                                     for f in os.listdir("/proc/%d/fd" % n.pid))[-40:])

    def check_access_logs(self):
        for i, n in enumerate(self.nodes):
            for rec in n.access_records():
                self.note("access_log_records")
                try:
                    ms = float(rec.get("duration_ms", "0"))
                except ValueError:
                    continue
                if ms > SLOW_REQUEST_S * 1000:
                    self.fail("slow request", node=i, record=rec)

    def run(self):
        self.t_start = time.monotonic()
        self.start()
        try:
            self.warm_up()
            t_ops = time.monotonic()
            side = [threading.Thread(target=self.watch)]
            if self.args.chaos:
                side.append(threading.Thread(target=self.chaos))
            if self.origin is not None:
                side.append(threading.Thread(target=self.faults))
            for t in side:
                t.start()
            threads = [threading.Thread(target=self.worker, args=(w,))
                       for w in range(self.args.workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.stop_chaos.set()
            for t in side:
                t.join()
            self.ops_seconds = time.monotonic() - t_ops
            self.restarted_pids = [n.pid for n in self.nodes]
            for n in self.nodes:  # baselines for restarted nodes: now, before the final reads
                if n.pid not in self.baselines:
                    self.baselines[n.pid] = self.proc_fds(n.pid)
            self.settle_and_verify()
            self.sample_rss()
            self.check_access_logs()
        finally:
            self.shutdown()
        return self.report()

    def shutdown(self):
        for i, n in enumerate(self.nodes):
            if n.alive():
                code = n.stop(timeout=40)
                if code != 0:
                    self.fail("sigterm exit at the end", node=i, code=code, log=n.log()[-3000:])
            self.check_sanitizers(i, "at the end")
        if self.args.keep:
            os.makedirs(self.args.keep, exist_ok=True)
            for i, n in enumerate(self.nodes):
                shutil.copy(n.stderr_path, os.path.join(self.args.keep, "node-%d.log" % i))
                if os.path.exists(n.access_log_path):
                    shutil.copy(n.access_log_path,
                                os.path.join(self.args.keep, "node-%d.access.log" % i))
            with open(os.path.join(self.args.keep, "events.jsonl"), "w") as f:
                for e in self.events:
                    f.write(json.dumps(e, default=str) + "\n")
            if self.upstream is not None:
                shutil.copy(self.upstream.log_path,
                            os.path.join(self.args.keep, "upstream.jsonl"))
        for n in self.nodes:
            n.cleanup()
        if self.upstream is not None:
            self.upstream.cleanup()
        else:
            self.origin.stop()
        self.redis.cleanup()
        for d in self.cache_dirs:
            shutil.rmtree(d, ignore_errors=True)

    def report(self):
        out = {"seed": self.seed, "origin": self.args.origin, "nodes": self.args.nodes, "workers": self.args.workers,
               "ops_per_worker": self.args.ops, "ops_seconds": round(self.ops_seconds, 1),
               "counts": dict(sorted(self.counts.items())),
               "rss_peak_mib": {str(k): v >> 20 for k, v in self.rss_peak.items()},
               "fds_before_after": getattr(self, "fds", {}),
               "violations": len(self.bad)}
        print(json.dumps(out, indent=1))
        kinds = {}
        for b in self.bad:
            kinds[b["what"]] = kinds.get(b["what"], 0) + 1
        if kinds:
            print("violations by kind:", json.dumps(kinds))
        print("%d passed, %d failed" % (1 if not self.bad else 0, 1 if self.bad else 0))
        return 1 if self.bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ops", type=int, default=250, help="operations per worker")
    p.add_argument("--workers", type=int, default=6)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--keys", type=int, default=9)
    p.add_argument("--no-chaos", dest="chaos", action="store_false")
    p.add_argument("--sanity", action="store_true",
                   help="also write behind larder's back: the run must then report stale reads")
    p.add_argument("--origin", choices=["moto", "fault"], default="moto",
                   help="fault: tests/integration/doubles/fault_origin.py with random faults")
    p.add_argument("--max-rss-mib", type=int, default=1536)
    p.add_argument("--ci", action="store_true", help="a short run (about a minute)")
    p.add_argument("--keep", help="copy the logs and the event list into this folder")
    p.add_argument("--previous-bin", help="the last node runs this (older) larder")
    args = p.parse_args()
    if args.workers > 8:
        p.error("--workers: at most 8")
    args.chaos_every = (6.0, 12.0)
    if args.ci:
        args.ops, args.workers, args.chaos_every = 60, 4, (8.0, 14.0)
    sys.exit(Soak(args).run())


if __name__ == "__main__":
    main()
