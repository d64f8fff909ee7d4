"""Per-key limits of [key ID] sections (issue 14 item 1): a key's
max_upstream_requests bounds its concurrent misses; a request without a body
beyond it (a cached read, a LIST) waits for a slot (LARDER_UPSTREAM_SLOT_WAIT_MS), then is refused with 503
SlowDown and Retry-After, and the key's other readers and other keys go on. max_bytes_per_second shapes a key's reads smoothly.
max_resident_bytes bounds the bytes of the RAM tier a key's misses keep.
The upstream is fault_origin.FaultOrigin, which can hold each GET back so
the misses overlap."""
import functools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import http.client
import threading
import time
import unittest
import urllib.request

import harness
from fault_origin import FaultOrigin
from test_cache_faults import BUCKET, blob, fetch, larder_env, finish_larder

CAPPED, CAPPED_SECRET = "capped-job", "capped-secret"
FREE, FREE_SECRET = "free-job", "free-secret"
SLOW, SLOW_SECRET = "slow-job", "slow-secret"
SMALL, SMALL_SECRET = "small-job", "small-secret"
LISTER, LISTER_SECRET = "lister-job", "lister-secret"
MiB = 1024 * 1024
ADMIN_TOKEN = "key-limits-admin-token-0123456789"

CONFIG = """[key %s]
secret = %s
access = read-only
buckets = *
max_upstream_requests = 2

[key %s]
secret = %s
access = read-only
buckets = *

[key %s]
secret = %s
access = read-only
buckets = *
max_bytes_per_second = 16MiB

[key %s]
secret = %s
access = read-only
buckets = *
max_resident_bytes = 16MiB

[key %s]
secret = %s
access = read-only
buckets = *
max_bytes_per_second = 1MiB

[bucket listed]
list_cache_ttl = 60
""" % (CAPPED, CAPPED_SECRET, FREE, FREE_SECRET, SLOW, SLOW_SECRET, SMALL, SMALL_SECRET,
       LISTER, LISTER_SECRET)


class KeyLimitsCase(harness.S3Asserts, unittest.TestCase):
    """One fault origin for the class; a larder (CONFIG's keys) per test."""

    @classmethod
    def setUpClass(cls):
        if not os.access(harness.larder_binary(), os.X_OK):
            raise unittest.SkipTest("larder binary not built: " + harness.larder_binary())
        cls.origin = FaultOrigin().start()
        cls.origin.create_bucket(BUCKET)
        cls.cache_dir = tempfile.mkdtemp(prefix="larder-cache-")

    @classmethod
    def tearDownClass(cls):
        cls.origin.stop()
        shutil.rmtree(cls.cache_dir, ignore_errors=True)

    def start(self, **extra):
        env = dict(larder_env(self.cache_dir, **dict({"LARDER_READAHEAD": "0"}, **extra)),
                   LARDER_UPSTREAM_URL=self.origin.url)
        larder = harness.Larder(env=env, config_text=CONFIG, client_key=False).start()
        self.addCleanup(finish_larder, self, larder)
        return larder

    def assert_two_at_a_time(self, since, n):
        """The n GETs the origin took since were served 2 at a time. Its
        in-flight count ends after a response is written, when larder may
        already have started the next on the slot it gave back (CI saw 3),
        so their 0.4 s services (throttle_above's service_ms) are timed
        instead: each is recorded as its service ends, and a third can
        begin only once one of two before it was answered, so ends 2
        apart are 0.4 s apart at least."""
        ends = sorted(r["t"] for r in self.origin.requests(since, method="GET"))
        self.assertEqual(len(ends), n, ends)
        for a, b in zip(ends, ends[2:]):
            self.assertGreater(b - a, 0.4 - 0.05, "3 GETs at once at the origin: %s" % ends)

    def read_all(self, larder, keys, who, secret, gate=None, since=0, headers=None):
        """GETs of keys (or of (path, headers) pairs), all at once; their answers. With
        gate (the origin's hold_next gate for them), the gate opens once every read is
        either answered or held at the origin: those waiting for a slot have had their
        answer, however slow the machine."""
        out = [None] * len(keys)

        def one(i):
            path, h = keys[i] if isinstance(keys[i], tuple) else \
                (harness.key_path(BUCKET, keys[i]), None)
            out[i] = fetch(larder.url, "GET", path, key=who, secret=secret, headers=h)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(keys))]
        for t in threads:
            t.start()
        if gate is not None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                held = [r for r in self.origin.requests(since, "GET")
                        if r.get("arrived") and not r.get("done")]
                if sum(x is not None for x in out) + len(held) >= len(keys):
                    break
                time.sleep(0.02)
            gate.set()
        for t in threads:
            t.join()
        return out


class MaxUpstreamRequests(KeyLimitsCase):

    def test_cold_reads_past_the_cap_wait_for_a_slot(self):
        # 8 cold reads of a key capped at 2, each GET taking 0.4 s at the
        # origin: they were refused at once (503 SlowDown), and SDKs gave
        # up where S3 would have served them (boto3's standard retry mode:
        # 24 of 48 reads failed; the CRT's download of a 32 MiB object in
        # 1 MiB parts failed within 0.7 s; audit round 7). They wait for
        # the key's slots instead, 2 at a time at the origin, and all
        # succeed in about 8 x 0.4 / 2 s.
        larder = self.start()
        keys = ["queued-%d" % i for i in range(8)]
        data = {k: blob(60 + i, 5000 + i) for i, k in enumerate(keys)}
        for k in keys:
            self.origin.put(BUCKET, k, data[k])
        self.origin.throttle_above(1000, service_ms=400)
        self.addCleanup(self.origin.throttle_above, None)
        since = len(self.origin.requests())
        t0 = time.monotonic()
        got = self.read_all(larder, keys, CAPPED, CAPPED_SECRET)
        elapsed = time.monotonic() - t0
        self.assertEqual([r.status for r in got], [200] * 8, got)
        for k, r in zip(keys, got):
            self.assertEqual(r.body, data[k])
        self.assert_two_at_a_time(since, 8)
        # 1.6 s of service, and time for a loaded machine: a read not woken when a slot
        # comes back waits out its slot wait (5 s).
        self.assertLess(elapsed, 4 * 0.4 + 3, "the reads waited too long for their slots")

    def test_pass_through_requests_past_the_cap_wait_for_a_slot(self):
        # Requests larder does not cache (ListObjectsV2, a GET of a
        # version) were refused at once past the key's cap, where S3 would
        # have served them (boto3's standard retries and the CRT give up on
        # them as they did on cached reads: audit round 7). Without a body
        # they wait for a slot in the same queue, 2 at a time at the origin.
        larder = self.start()
        self.origin.create_bucket("plain")
        page = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.'
                'amazonaws.com/doc/2006-03-01/"><Name>plain</Name><Prefix></Prefix>'
                '<KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false'
                '</IsTruncated></ListBucketResult>')
        self.origin.list_pages["plain"] = lambda q: page
        self.addCleanup(self.origin.list_pages.pop, "plain")
        data = {"pt-%d" % i: blob(80 + i, 2000 + i) for i in range(3)}
        for k, v in data.items():
            self.origin.put("plain", k, v)
        reads = [("GET", "/plain?list-type=2", page.encode())] * 5 + \
                [("GET", "/plain/%s?versionId=null" % k, v) for k, v in data.items()]
        self.origin.throttle_above(1000, service_ms=400)
        self.addCleanup(self.origin.throttle_above, None)
        since = len(self.origin.requests())
        out = [None] * len(reads)

        def one(i):
            out[i] = fetch(larder.url, reads[i][0], reads[i][1], key=CAPPED,
                           secret=CAPPED_SECRET)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reads))]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        self.assertEqual([r.status for r in out], [200] * len(reads), out)
        for (_, path, want), r in zip(reads, out):
            self.assertEqual(r.body, want, path)
        self.assert_two_at_a_time(since, len(reads))
        # 1.6 s of service, and time for a loaded machine: a read not woken when a slot
        # comes back waits out its slot wait (5 s).
        self.assertLess(elapsed, 4 * 0.4 + 3, "the requests waited too long for their slots")

    def test_pass_through_waits_end(self):
        # A pass-through that waits LARDER_UPSTREAM_SLOT_WAIT_MS gets 503
        # SlowDown, and one whose client leaves while it waits leaves the
        # queue: neither holds a slot after.
        larder = self.start(LARDER_UPSTREAM_SLOT_WAIT_MS="600")
        self.origin.create_bucket("plain")
        self.origin.put("plain", "pt", blob(90, 1000))
        path = "/plain/pt?versionId=null"
        m, gate = self.origin.mark(), threading.Event()
        self.origin.hold_next(gate, n=2, bucket="plain")  # the key's 2 slots, until the end
        self.addCleanup(gate.set)
        holders = [threading.Thread(target=fetch, args=(larder.url, "GET", path),
                                    kwargs={"key": CAPPED, "secret": CAPPED_SECRET})
                   for _ in range(2)]
        for t in holders:
            t.start()
        deadline = time.monotonic() + 30
        while len([g for g in self.origin.requests(m, "GET", "plain") if g.get("arrived")]) \
                < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        left = harness.signed_socket(larder, "GET", path, CAPPED, CAPPED_SECRET)
        time.sleep(0.2)
        left.close()
        t0 = time.monotonic()
        r = fetch(larder.url, "GET", path, key=CAPPED, secret=CAPPED_SECRET)
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (503, "SlowDown"), r)
        self.assertGreater(time.monotonic() - t0, 0.5)
        gate.set()
        for t in holders:
            t.join()
        for _ in range(2):
            r = fetch(larder.url, "GET", path, key=CAPPED, secret=CAPPED_SECRET)
            self.assertEqual(r.status, 200, r)

    def test_cold_reads_that_wait_too_long_slow_down(self):
        # Waiting is bounded by LARDER_UPSTREAM_SLOT_WAIT_MS: past it, the
        # reads still waiting get 503 SlowDown, as S3 would answer.
        larder = self.start(LARDER_UPSTREAM_SLOT_WAIT_MS="1000")
        keys = ["cold-%d" % i for i in range(6)]
        data = {k: blob(i, 4000 + i) for i, k in enumerate(keys)}
        for k in keys:
            self.origin.put(BUCKET, k, data[k])
        m, gate = self.origin.mark(), threading.Event()
        self.origin.hold_next(gate, n=50, bucket=BUCKET)
        got = self.read_all(larder, keys, CAPPED, CAPPED_SECRET, gate, m)
        ok = [k for k, r in zip(keys, got) if r.status == 200]
        slow = [r for r in got if r.status == 503]
        self.assertEqual(len(ok) + len(slow), 6, got)
        self.assertTrue(slow, "no read was refused: %s" % got)
        for r in slow:
            self.assertEqual(harness.s3_error(r.body)[0], "SlowDown", r)
            self.assertIn("retry-after", r.headers, r)
            self.assertGreaterEqual(int(r.headers["retry-after"]), 1)
        gets = [g for g in self.origin.requests(m, "GET") if g["bucket"] == BUCKET]
        # Every GET here was held until the others had their answers: 2 slots, 2 GETs.
        self.assertLessEqual(len(gets), 2, [(g["key"], g["t"]) for g in gets])
        for k in ok:
            self.assertEqual(got[keys.index(k)].body, data[k])

        # The slots came back with the answers: the refused reads now succeed.
        self.origin.clear_faults()
        for k in keys:
            if k not in ok:
                r = fetch(larder.url, "GET", harness.key_path(BUCKET, k), key=CAPPED,
                          secret=CAPPED_SECRET)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.body, data[k])

    def test_reads_of_known_objects_that_go_upstream_are_counted(self):
        # Only reads that learnt an object took a slot: ranges of an object larder knew, and
        # objects whose chunks were evicted, all went upstream at once (8 GETs, capped at 2).
        # Reads wait 1 s at most for a slot, the GETs holding them until the others are
        # answered.
        larder = self.start(LARDER_RAM_CACHE_SIZE="2MiB", LARDER_METADATA_TTL="immutable",
                            LARDER_CACHE_DIR=None, LARDER_DISK_CACHE_SIZE=None,  # RAM only
                            LARDER_UPSTREAM_SLOT_WAIT_MS="1000")
        big = blob(40, 12 * MiB)
        self.origin.put(BUCKET, "known-big", big)
        smalls = ["known-%d" % i for i in range(6)]
        for i, k in enumerate(smalls):
            self.origin.put(BUCKET, k, blob(50 + i, MiB - 100))
        path = harness.key_path(BUCKET, "known-big")
        r = fetch(larder.url, "GET", path, key=CAPPED, secret=CAPPED_SECRET,
                  headers={"Range": "bytes=0-0"})
        self.assertEqual(r.status, 206, r)
        for k in smalls:  # known now; a 2 MiB RAM tier keeps two at most
            r = fetch(larder.url, "GET", harness.key_path(BUCKET, k), key=CAPPED,
                      secret=CAPPED_SECRET)
            self.assertEqual(r.status, 200, r)

        def burst(reads):
            m, gate = self.origin.mark(), threading.Event()
            self.origin.hold_next(gate, n=50, bucket=BUCKET)
            out = self.read_all(larder, [(p, h) for p, h, _ in reads], CAPPED, CAPPED_SECRET,
                                gate, m)
            self.origin.clear_faults()
            gets = [g for g in self.origin.requests(m, "GET") if g["bucket"] == BUCKET]
            return out, gets

        ranges = [(path, {"Range": "bytes=%d-%d" % (i * MiB, i * MiB + 9)},
                   big[i * MiB:i * MiB + 10]) for i in range(2, 8)]
        evicted = [(harness.key_path(BUCKET, k), None, blob(50 + i, MiB - 100))
                   for i, k in enumerate(smalls[:4])]
        for reads in (ranges, evicted):
            got, gets = burst(reads)
            self.assertLessEqual(len(gets), 2, [g["key"] for g in gets])
            slow = [r for r in got if r.status == 503]
            self.assertTrue(slow, got)
            self.assertEqual({harness.s3_error(r.body)[0] for r in slow}, {"SlowDown"})
            for (_, _, want), r in zip(reads, got):
                if r.status != 503:
                    self.assertEqual((r.status // 100, r.body), (2, want))

    def test_a_client_that_left_gives_its_slot_back(self):
        # Two reads of the capped key wait for S3's first byte (held until the
        # end); their clients leave. Their slots must come back then, not when
        # S3 answers: a third read right after goes through (it got 503
        # SlowDown before, once its slot wait of 5 s was over), cold and as a
        # pass-through (?versionId).
        larder = self.start()
        for k in ("left-0", "left-1", "after-0", "after-1"):
            self.origin.put(BUCKET, k, blob(len(k), 3000))
        for query in ("?versionId=null", ""):
            m, gate = self.origin.mark(), threading.Event()
            self.addCleanup(gate.set)
            self.origin.hold_next(gate, n=2, bucket=BUCKET, key=None)
            socks = [harness.signed_socket(larder, "GET", harness.key_path(BUCKET, k) + query,
                                           CAPPED, CAPPED_SECRET)
                     for k in ("left-0", "left-1")]
            deadline = time.monotonic() + 30
            while len([g for g in self.origin.requests(m, "GET") if g.get("arrived")]) < 2 \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
            for s in socks:
                s.close()
            k = "after-%d" % (query != "")
            r = fetch(larder.url, "GET", harness.key_path(BUCKET, k) + query, key=CAPPED,
                      secret=CAPPED_SECRET)
            self.assertEqual(r.status, 200, (query, r))
            gate.set()
            self.origin.clear_faults()
            self.origin.wait_idle(10)

    def test_read_ahead_takes_the_keys_slots_too(self):
        # A capped key's read-ahead went upstream on its reader's one slot:
        # two readers of cold 16 MiB objects (1 MiB chunks, read-ahead 8)
        # kept 17 GETs in flight at the origin with a cap of 2 (audit round
        # 9), most of a throttled S3 prefix's window, which the other keys
        # then waited for. Each read-ahead fetch takes a slot of its own
        # now: the two readers' GETs stay 2 at a time unanswered at the
        # origin (max_unanswered: a GET whose answer is all written may
        # still count as in flight there when larder starts the next, which
        # made 3). An uncapped reader still reads
        # ahead, so the setting is not what keeps the count low.
        larder = self.start(LARDER_READAHEAD="8", LARDER_CHUNK_SIZE="1MiB")
        # A prefix of their own: GETs of earlier tests' still trickling in (their larders
        # gone, a 10 s pause to go) are not counted with these.
        keys = ["ahead/%d" % i for i in range(3)]
        for i, k in enumerate(keys):
            self.origin.put_synthetic(BUCKET, k, 16 * MiB, seed=b"ahead%d" % i)
        self.addCleanup(self.origin.throttle_above, None)

        def reads(who, secret, names):
            self.origin.throttle_above(1000, service_ms=100)
            got = self.read_all(larder, names, who, secret)
            self.assertEqual([r.status for r in got], [200] * len(names), got)
            for k, r in zip(names, got):
                self.assertEqual(r.body, bytes(self.origin.get(BUCKET, k).data), k)
            return self.origin.max_unanswered
        self.assertLessEqual(reads(CAPPED, CAPPED_SECRET, keys[:2]), 2)
        self.assertGreaterEqual(reads(FREE, FREE_SECRET, keys[2:]), 4)

    def leave_during_answers(self, larder, paths, connect=None, leave=None):
        """GETs of paths whose origin sends 64 KiB of the body, then stalls 10 s: each
        client reads its answer's headers and those bytes (nothing left unread: its close
        is a FIN), then leaves; returns their access records within 8 s of the close
        (before the stall ends, however loaded the machine)."""
        self.origin.slow_next(piece=65536, pause_ms=10000, n=len(paths), bucket=BUCKET)
        before = len(larder.access_records())
        socks = []
        for p in paths:
            s = (connect or harness.signed_socket)(larder, "GET", p, CAPPED, CAPPED_SECRET)
            data = b""
            while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < 65536:
                piece = s.recv(65536)
                self.assertTrue(piece, (p, data[:300]))
                data += piece
            self.assertTrue(data.startswith(b"HTTP/1.1 200 "), data[:300])
            socks.append(s)
        for s in socks:
            (leave or socket.socket.close)(s)
        deadline, recs = time.monotonic() + 8, []
        while time.monotonic() < deadline and len(recs) < len(paths):
            recs = [a for a in larder.access_records()[before:] if a.get("key") in
                    [p.split("?")[0].rsplit("/", 1)[1] for p in paths]]
            time.sleep(0.05)
        return recs

    def test_a_client_that_left_during_its_answer_gives_its_slot_back(self):
        # Two reads of the capped key (2 slots) whose answers' headers went out, their origin
        # stalling after the first 64 KiB; their clients leave. The requests went on until
        # S3's next bytes (or LARDER_UPSTREAM_TIMEOUT), holding their slots, connections and
        # transfers: nothing watched a connection once its answer was queued, and a third
        # read got 503 SlowDown. Cold (cached) and pass-through (?versionId) alike.
        larder = self.start()
        for k in ("during-0", "during-1", "during-after"):
            self.origin.put(BUCKET, k, blob(len(k), 1 << 20))
        paths = [harness.key_path(BUCKET, "during-0") + "?versionId=null",
                 harness.key_path(BUCKET, "during-1")]
        recs = self.leave_during_answers(larder, paths)
        self.assertEqual(sorted((a["status"], a["error"]) for a in recs),
                         [("200", "client-gone")] * 2, recs)
        # Slots held until the stall ends would make this wait out its slot wait (5 s): 503.
        r = fetch(larder.url, "GET", harness.key_path(BUCKET, "during-after"), key=CAPPED,
                  secret=CAPPED_SECRET)
        self.assertEqual(r.status, 200, r)
        self.origin.wait_idle(15)

    def test_a_tls_client_that_closed_during_its_answer_is_noticed(self):
        # Over TLS a client that closes well sends a close_notify alert before its FIN: bytes
        # to read, which the watch took for a pipelined request and stopped watching.
        from test_tls import make_cert
        tmp = tempfile.mkdtemp(prefix="larder-tls-")
        self.addCleanup(shutil.rmtree, tmp, True)
        cert, key = make_cert(tmp)
        larder = self.start(LARDER_TLS_CERT=cert, LARDER_TLS_KEY=key)
        ctx = ssl.create_default_context(cafile=cert)

        def connect(larder, method, path, who, secret):
            h = harness.sign_headers(method, "https://127.0.0.1:%d%s" % (larder.port, path),
                                     who, secret)
            head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (method, path, larder.port)
            head += "".join("%s: %s\r\n" % kv for kv in h.items() if kv[0].lower() != "host")
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", larder.port), 10),
                                server_hostname="127.0.0.1")
            s.sendall(head.encode() + b"\r\n")
            return s

        def leave(s):
            s.settimeout(0.3)
            try:
                s.unwrap()  # sends close_notify, then waits for larder's: it never comes
            except OSError:
                pass
            s.close()
        for k in ("tls-0", "tls-1"):
            self.origin.put(BUCKET, k, blob(len(k), 1 << 20))
        paths = [harness.key_path(BUCKET, "tls-0") + "?versionId=null",
                 harness.key_path(BUCKET, "tls-1")]
        recs = self.leave_during_answers(larder, paths, connect, leave)
        self.assertEqual(sorted((a["status"], a["error"]) for a in recs),
                         [("200", "client-gone")] * 2, recs)
        self.origin.wait_idle(10)

    def test_other_keys_are_not_limited(self):
        larder = self.start()
        keys = ["free-%d" % i for i in range(6)]
        for i, k in enumerate(keys):
            self.origin.put(BUCKET, k, blob(20 + i, 3000))
        self.origin.delay_next(500, n=50, bucket=BUCKET)
        got = self.read_all(larder, keys, FREE, FREE_SECRET)
        self.origin.clear_faults()
        self.assertEqual([r.status for r in got], [200] * 6, got)


def timed_read(base, path, key, secret, marks):
    """GET path; returns (status, bytes, elapsed, times at which each of
    marks (fractions of the body) was reached)."""
    h = harness.sign_headers("GET", base + path, key, secret)
    host, port = base.replace("http://", "").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    t0 = time.monotonic()
    try:
        c.request("GET", path, headers=h)
        r = c.getresponse()
        size = int(r.getheader("content-length") or 0)
        got, at, todo = 0, [], list(marks)
        while True:
            piece = r.read(256 * 1024)
            if not piece:
                break
            got += len(piece)
            while todo and got >= todo[0] * size:
                at.append(time.monotonic() - t0)
                todo.pop(0)
        return r.status, got, time.monotonic() - t0, at
    finally:
        c.close()


def assert_rate(case, elapsed, want, what, under=0.15):
    """elapsed (s) is want's: under less at most, for the cap is never passed; up to 50%
    more, for a loaded machine (two test runners, ASan) may be slower than the cap."""
    case.assertGreater(elapsed, (1 - under) * want,
                       "%s took %.2f s, its cap says %.2f s: faster" % (what, elapsed, want))
    case.assertLess(elapsed, 1.5 * want, "%s took %.2f s, its cap says %.2f s: much slower"
                    % (what, elapsed, want))


class MaxBytesPerSecond(KeyLimitsCase):
    """A 60 MiB hit read by a key capped at 16 MiB/s takes 3.75 s (no less than 15% under
    it), smoothly; an uncapped key reading it at the same time is not held back."""

    def test_capped_key_reads_a_hit_at_its_rate(self):
        larder = self.start(LARDER_RAM_CACHE_SIZE="256MiB", LARDER_DISK_CACHE_SIZE="256MiB")
        data = blob(7, 60 * MiB)
        self.origin.put(BUCKET, "big", data)
        path = harness.key_path(BUCKET, "big")
        r = fetch(larder.url, "GET", path, key=FREE, secret=FREE_SECRET, timeout=120)
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.body == data)
        m = self.origin.mark()

        out = {}
        t0 = time.monotonic()

        def free():
            time.sleep(0.5)  # while the capped read is under way
            out["free_start"] = time.monotonic() - t0
            out["free"] = timed_read(larder.url, path, FREE, FREE_SECRET, [])
        t = threading.Thread(target=free)
        t.start()
        out["slow"] = timed_read(larder.url, path, SLOW, SLOW_SECRET, [0.25, 0.5, 0.75])
        t.join()
        self.assertEqual(self.origin.gets(BUCKET, "big", m), [], "both reads were hits")
        status, got, elapsed, at = out["slow"]
        self.assertEqual((status, got), (200, 60 * MiB))
        want = 60 / 16
        assert_rate(self, elapsed, want, "the capped read")
        # Smooth: no quarter of the body comes faster than the cap (a burst
        # would), nor takes most of the time (a stall).
        quarters = [b - a for a, b in zip([0] + at, at + [elapsed])]
        for q in quarters:
            self.assertGreater(q, 0.75 * want / 4, quarters)
            self.assertLess(q, 0.5 * elapsed, quarters)
        # Not held back: it read the same 60 MiB, started later and ended first (a cap
        # shared with the capped key would end it after that key's read).
        fstatus, fgot, felapsed, _ = out["free"]
        self.assertEqual((fstatus, fgot), (200, 60 * MiB))
        self.assertLess(out["free_start"] + felapsed, elapsed,
                        "the uncapped key was held back: %.2f s" % felapsed)

    def test_pass_through_reads_are_shaped_too(self):
        larder = self.start()
        self.origin.put(BUCKET, "bypassed", blob(8, 24 * MiB))
        path = harness.key_path(BUCKET, "bypassed") + "?versionId=null"  # never cached
        status, got, elapsed, _ = timed_read(larder.url, path, SLOW, SLOW_SECRET, [])
        self.assertEqual((status, got), (200, 24 * MiB))
        assert_rate(self, elapsed, 24 / 16, "the pass-through read")
        # Its log line is written when libmicrohttpd reports the request
        # complete, which can come just after the client has the last byte.
        deadline = time.monotonic() + 5
        while "bypass" not in [rec.get("cache") for rec in larder.access_records()] and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("bypass", [rec.get("cache") for rec in larder.access_records()])


    def test_cached_listings_are_shaped_too(self):
        # Answers from the LIST cache went out at full speed: 6 of 600 KB in 0.02 s to a key
        # capped at 64 KiB/s (audit round 3).
        larder = self.start()
        entries = "".join("<Contents><Key>k/%06d-%s</Key><Size>1</Size><ETag>&quot;x&quot;"
                          "</ETag><StorageClass>STANDARD</StorageClass></Contents>"
                          % (i, "p" * 60) for i in range(3000))
        page = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.'
                'amazonaws.com/doc/2006-03-01/"><Name>listed</Name><Prefix>k/</Prefix>'
                '<KeyCount>3000</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false'
                '</IsTruncated>%s</ListBucketResult>' % entries)
        self.origin.create_bucket("listed")
        self.origin.list_pages["listed"] = lambda q: page
        self.addCleanup(self.origin.list_pages.pop, "listed")
        path = "/listed?list-type=2&prefix=k%2F"
        r = fetch(larder.url, "GET", path, key=LISTER, secret=LISTER_SECRET)
        self.assertEqual((r.status, r.body.decode()), (200, page))
        t0, got = time.monotonic(), 0
        for _ in range(3):
            r = fetch(larder.url, "GET", path, key=LISTER, secret=LISTER_SECRET)
            self.assertEqual((r.status, r.cache, r.body.decode()), (200, "hit", page))
            got += len(r.body)
        assert_rate(self, time.monotonic() - t0, got / MiB, "the cached listings", 0.25)


class MaxResidentBytes(KeyLimitsCase):
    """A key capped at 16 MiB reads 60 MiB of distinct objects through a 64
    MiB RAM tier (no NVMe): the bytes charged to it end within 15% of 16 MiB,
    and another key's 24 MiB read before it all stay hits. Objects of 3 MiB
    with 1 MiB chunks: chunk 0 of each comes with the object's first GET,
    the others from chunk fetches; both are charged. With an NVMe tier, so
    are the chunks the key's later passes read back from NVMe."""

    def admin_get(self, admin, path):
        req = urllib.request.Request(admin + path,
                                     headers={"Authorization": "Bearer " + ADMIN_TOKEN})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def start_two_jobs(self, prefix, seed, **extra):
        """A larder with its admin port, and on the origin 8 objects of 3 MiB
        for the uncapped key and 20 for the capped one, named prefix-...
        Returns (larder, admin URL, theirs, mine)."""
        port = harness.free_port()
        admin = "http://127.0.0.1:%d" % port
        larder = self.start(LARDER_ADMIN_LISTEN="127.0.0.1:%d" % port,
                            LARDER_ADMIN_TOKEN=ADMIN_TOKEN, **extra)
        theirs = ["%s-free-%d" % (prefix, i) for i in range(8)]     # 24 MiB
        mine = ["%s-small-%d" % (prefix, i) for i in range(20)]     # 60 MiB
        self.data = {}
        for i, k in enumerate(theirs + mine):
            self.data[k] = blob(seed + i, 3 * MiB)
            self.origin.put(BUCKET, k, self.data[k])
        return larder, admin, theirs, mine

    def read(self, larder, keys, who, secret):
        """GETs keys one after another as who; each must come back whole."""
        for k in keys:
            r = fetch(larder.url, "GET", harness.key_path(BUCKET, k), key=who, secret=secret)
            self.assertEqual((r.status, r.body == self.data[k]), (200, True), (k, r))

    def test_capped_key_settles_at_its_cap_and_others_stay(self):
        larder, admin, theirs, mine = self.start_two_jobs(
            "res", 40, LARDER_DISK_CACHE_SIZE="0", LARDER_CACHE_DIR=None)
        self.read(larder, theirs, FREE, FREE_SECRET)
        self.read(larder, mine, SMALL, SMALL_SECRET)

        res = json.loads(self.admin_get(admin, "/admin/stats"))["resident"]
        self.assertEqual(res[SMALL]["max_bytes"], 16 * MiB, res)
        self.assertLess(abs(res[SMALL]["bytes"] - 16 * MiB), 0.15 * 16 * MiB, res)
        self.assertEqual(res[FREE], {"bytes": 24 * MiB, "max_bytes": 0}, res)
        metrics = self.admin_get(admin, "/metrics").decode()
        self.assertIn('larder_key_resident_bytes{key="%s"} %d' % (SMALL, res[SMALL]["bytes"]),
                      metrics)
        self.assertIn('larder_key_resident_limit_bytes{key="%s"} %d' % (SMALL, 16 * MiB),
                      metrics)

        # The other key's data was all kept: its second read is all hits.
        m = self.origin.mark()
        self.read(larder, theirs, FREE, FREE_SECRET)
        self.assertEqual(self.origin.requests(m, "GET"), [])

        # A SIGHUP that lowers the cap applies it at once.
        larder.write_config(CONFIG.replace("max_resident_bytes = 16MiB",
                                           "max_resident_bytes = 8MiB"))
        larder.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            res = json.loads(self.admin_get(admin, "/admin/stats"))["resident"]
            if res[SMALL]["max_bytes"] == 8 * MiB:
                break
            time.sleep(0.1)
        self.assertEqual(res[SMALL]["max_bytes"], 8 * MiB, res)
        self.assertLessEqual(res[SMALL]["bytes"], 8 * MiB, res)
        self.assertEqual(res[FREE]["bytes"], 24 * MiB, res)

    def stats(self, admin):
        return json.loads(self.admin_get(admin, "/admin/stats"))

    def wait_nvme_settled(self, admin, chunks):
        """Until the NVMe tier holds chunks entries (the write-through is
        asynchronous), or its count stops growing for a second."""
        last, since = -1, time.monotonic()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            n = self.stats(admin)["cache"]["nvme"]["chunks"]
            if n >= chunks:
                return n
            if n != last:
                last, since = n, time.monotonic()
            elif time.monotonic() - since > 1:
                return n
            time.sleep(0.05)
        return last

    def test_chunks_read_back_from_nvme_are_charged(self):
        """With an NVMe tier the capped key's second pass reads its data back
        from NVMe into RAM. Those promotions are charged to it as its fills
        are: it stays at its cap, and the other key's data stays in RAM (its
        re-read is all RAM hits). Uncharged (before audit round 7) they filled
        the RAM tier (63 of 64 chunks) and the other key's re-read found 8 of
        its 24 chunks pushed down to NVMe."""
        larder, admin, theirs, mine = self.start_two_jobs("nvme", 140,
                                                          LARDER_DISK_CACHE_SIZE="256MiB")
        read = functools.partial(self.read, larder)
        read(theirs, FREE, FREE_SECRET)
        read(mine, SMALL, SMALL_SECRET)
        # Every chunk on NVMe, so the second pass reads them back from there.
        self.assertEqual(self.wait_nvme_settled(admin, 84), 84)
        for _ in range(2):
            read(theirs, FREE, FREE_SECRET)         # the other job keeps its data warm
            m = self.origin.mark()
            read(mine, SMALL, SMALL_SECRET)         # the next epoch
            self.assertEqual(self.origin.requests(m, "GET"), [])

        # The other key's data is still all in RAM: its re-read is all RAM hits.
        st = self.stats(admin)
        nvme_hits, ram_hits = st["cache"]["nvme"]["hits"], st["cache"]["ram"]["hits"]
        m = self.origin.mark()
        read(theirs, FREE, FREE_SECRET)
        self.assertEqual(self.origin.requests(m, "GET"), [])
        after = self.stats(admin)
        self.assertEqual(after["cache"]["nvme"]["hits"] - nvme_hits, 0,
                         (st["resident"], st["cache"]))
        self.assertGreaterEqual(after["cache"]["ram"]["hits"] - ram_hits, 24, after["cache"])
        self.assertLessEqual(after["resident"][SMALL]["bytes"], 16 * MiB, after["resident"])
        self.assertEqual(after["resident"][FREE], {"bytes": 24 * MiB, "max_bytes": 0},
                         after["resident"])


class BadLimitRefused(unittest.TestCase):

    def check(self, text):
        binary = harness.larder_binary()
        if not os.access(binary, os.X_OK):
            raise unittest.SkipTest("larder binary not built: " + binary)
        d = tempfile.mkdtemp(prefix="larder-conf-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "larder.conf")
        with open(path, "w") as f:
            f.write(text)
        e = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LARDER_"))}
        e.update({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
                  "LARDER_UPSTREAM_URL": "http://127.0.0.1:9", "LARDER_CONFIG": path})
        return subprocess.run([binary, "serve", "--check"], env=e, capture_output=True,
                              timeout=30, stdin=subprocess.DEVNULL)

    def test_bad_max_upstream_requests(self):
        for bad in ("lots", "-1", "2.5", "100001"):
            out = self.check("[key k1]\nsecret = s\nbuckets = *\nmax_upstream_requests = %s\n" % bad)
            self.assertEqual(out.returncode, 2, (bad, out.stderr))
            self.assertIn(b"max_upstream_requests", out.stderr, bad)
            self.assertIn(b"expected a number of concurrent upstream requests", out.stderr, bad)

    def test_bad_max_bytes_per_second(self):
        for bad in ("fast", "-1", "1000", "2TiB"):
            out = self.check("[key k1]\nsecret = s\nbuckets = *\nmax_bytes_per_second = %s\n" % bad)
            self.assertEqual(out.returncode, 2, (bad, out.stderr))
            self.assertIn(b"max_bytes_per_second", out.stderr, bad)
            self.assertIn(b"expected bytes a second", out.stderr, bad)

    def test_bad_max_resident_bytes(self):
        for bad in ("much", "-1", "512KiB", "2PiB"):
            out = self.check("[key k1]\nsecret = s\nbuckets = *\nmax_resident_bytes = %s\n" % bad)
            self.assertEqual(out.returncode, 2, (bad, out.stderr))
            self.assertIn(b"max_resident_bytes", out.stderr, bad)
            self.assertIn(b"expected a size", out.stderr, bad)
        # Less than one chunk (8 MiB by default): none of it could stay.
        out = self.check("[key k1]\nsecret = s\nbuckets = *\nmax_resident_bytes = 4MiB\n")
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn(b"[key k1] max_resident_bytes", out.stderr)
        self.assertIn(b"less than one chunk", out.stderr)

    def test_good_max_upstream_requests(self):
        out = self.check("[key k1]\nsecret = s\nbuckets = *\nmax_upstream_requests = 4\n"
                         "max_bytes_per_second = 64MiB\nmax_resident_bytes = 1GiB\n")
        self.assertEqual(out.returncode, 0, out.stderr)


if __name__ == "__main__":
    unittest.main()
