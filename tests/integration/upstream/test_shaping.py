"""Upstream shaping (gateway/shaper.h): S3 throttles a prefix with 503 SlowDown
when too many requests are in flight to it; larder lowers its own concurrency
to the prefix (AIMD) so that its clients see no error where clients going
straight to the origin do, and the origin's 503s stay few.

The origin is fault_origin.FaultOrigin with throttle_above(K): more than K
requests in flight to one prefix get 503 SlowDown, the others take a few ms.
"""
import concurrent.futures
import http.client
import random
import shutil
import tempfile
import threading
import time
import unittest
import urllib.request

import admin_calls
import harness
import test_cache_faults
from fault_origin import ORIGIN_KEY, ORIGIN_SECRET
from test_cache_faults import BUCKET


def get_all_headers(base, path):
    """GET path signed; (Resp, {lower-case name: [every value]})."""
    h = harness.sign_headers("GET", base + path, harness.CLIENT_KEY, harness.CLIENT_SECRET)
    host, port = base.replace("http://", "").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        c.request("GET", path, headers=h)
        r = c.getresponse()
        every = {}
        for k, v in r.getheaders():
            every.setdefault(k.lower(), []).append(v)
        return harness.Resp(r.status, {k: v[-1] for k, v in every.items()}, r.read()), every
    finally:
        c.close()

def put(base, path, body):
    """A signed PUT of body; its status."""
    h = harness.sign_headers("PUT", base + path, harness.CLIENT_KEY, harness.CLIENT_SECRET,
                             body=body)
    host, port = base.replace("http://", "").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        c.request("PUT", path, body=body, headers=h)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


READERS = 24
K = 4
N_OBJECTS = 192
N_WARM = N_OBJECTS + N_OBJECTS // 2  # warmed by a job while N_OBJECTS are read
SIZE = 64 * 1024
TOKEN = "shaping-admin-token-0123456789"


def blob(seed, n):
    return random.Random(seed).randbytes(n)


def read_all(base, keys, key_id, secret, query=""):
    """READERS threads reading keys (each once); returns [(key, Resp)]."""
    def one(k):
        return k, harness.signed_request(base, "GET", "/%s/%s%s" % (BUCKET, k, query),
                                         key=key_id, secret=secret, timeout=60)
    with concurrent.futures.ThreadPoolExecutor(READERS) as pool:
        return list(pool.map(one, keys))


class Shaping(admin_calls.AdminCalls, test_cache_faults.FaultCase):
    """test_cache_faults' fault origin and larder, with the admin port for the metrics."""
    ADMIN_PORT = harness.free_port()
    ADMIN_TOKEN = TOKEN
    admin = "http://127.0.0.1:%d" % ADMIN_PORT
    EXTRA_ENV = {"LARDER_READAHEAD": "0",
                 "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % ADMIN_PORT,
                 "LARDER_ADMIN_TOKEN": TOKEN}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data = {}
        for prefix, n in (("direct", N_OBJECTS), ("cold", N_OBJECTS), ("warm", N_WARM),
                          ("pass", N_OBJECTS)):
            for i in range(n):
                key = "%s/obj-%03d" % (prefix, i)
                cls.data[key] = blob(hash(key) & 0xffff, SIZE)
                cls.origin.put(BUCKET, key, cls.data[key])

    def metric(self, name, port=None):
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % (port or self.ADMIN_PORT))
        req.add_header("Authorization", "Bearer " + TOKEN)
        with urllib.request.urlopen(req, timeout=30) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        self.fail("no metric " + name)

    def test_throttled_origin_no_client_errors(self):
        """24 cold readers against an origin throttling above 4 per prefix:
        straight to the origin they get 503s; through larder every answer is
        200 with the right bytes, and the origin throttled larder rarely."""
        direct = ["direct/obj-%03d" % i for i in range(N_OBJECTS)]
        cold = ["cold/obj-%03d" % i for i in range(N_OBJECTS)]

        self.origin.throttle_above(K, service_ms=30)
        try:
            got = read_all(self.origin.url, direct, ORIGIN_KEY, ORIGIN_SECRET)
            direct_503 = sum(1 for _, r in got if r.status == 503)
            self.assertGreater(direct_503, N_OBJECTS // 4,
                               "the load must be more than the origin serves at once")

            self.origin.throttle_above(K, service_ms=30)
            got = read_all(self.larder.url, cold, harness.CLIENT_KEY, harness.CLIENT_SECRET)
            throttled = self.origin.throttled
            most = self.origin.max_inflight
        finally:
            self.origin.throttle_above(None)
        bad = [(k, r.status) for k, r in got if r.status != 200 or r.body != self.data[k]]
        self.assertEqual(bad, [], "through larder, every read is 200 with its bytes")
        self.assertLessEqual(most, K)
        self.assertLess(throttled, N_OBJECTS // 3,
                        "the origin's 503s to larder (%d) stay bounded" % throttled)
        self.assertGreater(self.metric("larder_upstream_throttled_total"), 0)
        self.assertGreater(self.metric("larder_upstream_shaped_waits_total"), 0)

    def test_pass_through_on_a_throttled_prefix(self):
        """The same load as reads the cache never keeps (?versionId=null goes
        through to S3 as it is): straight to the origin many get 503; through
        larder they wait for their prefix's window like cache fills, a 503
        shrinks it and is retried, so every answer is 200 with its bytes and
        the origin throttled larder rarely."""
        keys = ["pass/obj-%03d" % i for i in range(N_OBJECTS)]
        self.origin.throttle_above(K, service_ms=30)
        try:
            got = read_all(self.origin.url, keys, ORIGIN_KEY, ORIGIN_SECRET, "?versionId=null")
            direct_503 = sum(1 for _, r in got if r.status == 503)
            self.assertGreater(direct_503, N_OBJECTS // 4)

            self.origin.throttle_above(K, service_ms=30)
            m = self.origin.mark()
            got = read_all(self.larder.url, keys, harness.CLIENT_KEY, harness.CLIENT_SECRET,
                           "?versionId=null")
            throttled = self.origin.throttled
            most = self.origin.max_inflight
        finally:
            self.origin.throttle_above(None)
        bad = [(k, r.status) for k, r in got if r.status != 200 or r.body != self.data[k]]
        self.assertEqual(bad, [], "through larder, every pass-through read is 200 with its bytes")
        self.assertTrue(all(r.headers.get("x-larder-cache") == "bypass" for _, r in got))
        self.assertEqual(sum(1 for g in self.origin.requests(m, "GET") if g["range"]), 0,
                         "passed through as the client asked, never as cache fills")
        self.assertLessEqual(most, K)
        self.assertLess(throttled, N_OBJECTS // 3,
                        "the origin's 503s to larder (%d) stay bounded" % throttled)

    def test_warm_job_and_readers_on_a_throttled_prefix(self):
        """A warm job (background) and 24 cold readers on one prefix throttling
        above 4: every read is 200, the job finishes without an error and has
        warmed its objects, and the origin throttled larder rarely."""
        keys = ["warm/obj-%03d" % i for i in range(N_WARM)]
        warm, read = keys[:N_WARM - N_OBJECTS], keys[N_WARM - N_OBJECTS:]
        self.origin.throttle_above(K, service_ms=30)
        try:
            st, r = self.call("POST", "/admin/prefetch", {"bucket": BUCKET, "keys": warm})
            self.assertEqual(st, 202, r)
            got = read_all(self.larder.url, read, harness.CLIENT_KEY, harness.CLIENT_SECRET)
            info = self.wait_job(r["job"])
            throttled = self.origin.throttled
        finally:
            self.origin.throttle_above(None)
        bad = [(k, r.status) for k, r in got if r.status != 200 or r.body != self.data[k]]
        self.assertEqual(bad, [], "every read is 200 with its bytes")
        self.assertEqual((info["state"], info["objects_done"], info["errors"]),
                         ("done", len(warm), 0), info)
        self.assertLess(throttled, N_WARM // 3)
        mark = self.origin.mark()
        for k in warm:
            r = harness.signed_request(self.larder.url, "GET", "/%s/%s" % (BUCKET, k))
            self.assertEqual((r.status, r.body), (200, self.data[k]))
        self.assertEqual(self.origin.count(since=mark, method="GET"), 0)

    def test_no_slot_in_time_is_slowdown(self):
        """A read that finds its prefix's window full waits, then gets what
        S3 would have answered: 503 SlowDown with Retry-After. The read
        holding the slot is unharmed."""
        cache_dir = tempfile.mkdtemp(prefix="larder-cache-")
        larder = test_cache_faults.start_larder(self.origin, test_cache_faults.larder_env(
            cache_dir, LARDER_UPSTREAM_WINDOW_MAX="1", LARDER_UPSTREAM_SLOT_WAIT_MS="300"))
        try:
            self.origin.put(BUCKET, "slow/a", blob(1, SIZE))
            self.origin.put(BUCKET, "slow/b", blob(2, SIZE))
            m, gate = self.origin.mark(), threading.Event()
            self.addCleanup(gate.set)
            self.origin.hold_next(gate, key="slow/a")  # it holds the slot until then
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                first = pool.submit(harness.signed_request, larder.url, "GET",
                                    "/%s/slow/a" % BUCKET)
                self.assertTrue(self.origin.wait_request(BUCKET, "slow/a", since=m))
                t0 = time.monotonic()
                second, every = get_all_headers(larder.url, "/%s/slow/b" % BUCKET)
                waited = time.monotonic() - t0
                gate.set()
                first = first.result()
            self.assertEqual(second.status, 503)
            self.assertEqual(harness.s3_error(second.body)[0], "SlowDown")
            self.assertEqual(every.get("retry-after"), ["1"], "one Retry-After, as S3 sends")
            self.assertGreaterEqual(waited, 0.25)
            self.assertEqual((first.status, first.body), (200, blob(1, SIZE)))
            # another prefix is not held back
            self.origin.put(BUCKET, "other/c", blob(3, SIZE))
            self.assertEqual(harness.signed_request(larder.url, "GET",
                                                    "/%s/other/c" % BUCKET).status, 200)
        finally:
            test_cache_faults.finish_larder(self, larder)
            shutil.rmtree(cache_dir, ignore_errors=True)

    def test_pass_through_and_listings_wait_for_the_window(self):
        """With a window of one request per prefix, held by a slow cache
        fill: a pass-through GET and a warm job's manifest read on that prefix
        reach the origin only once the fill is answered (they are counted in
        the window too), and so does a 1 MiB PUT (its body waits in larder
        meanwhile); the pass-through requests are answered 200. The fill is
        held at the origin until larder has counted the others' waits."""
        cache_dir = tempfile.mkdtemp(prefix="larder-cache-")
        port = harness.free_port()
        larder = test_cache_faults.start_larder(self.origin, test_cache_faults.larder_env(
            cache_dir, LARDER_UPSTREAM_WINDOW_MAX="1", LARDER_UPSTREAM_SLOT_WAIT_MS="5000",
            LARDER_ADMIN_LISTEN="127.0.0.1:%d" % port, LARDER_ADMIN_TOKEN=TOKEN))
        try:
            self.origin.put(BUCKET, "held/a", blob(1, SIZE))
            self.origin.put(BUCKET, "held/b", blob(2, SIZE))
            self.origin.put(BUCKET, "held/list.txt", b"held/b\n")
            m, gate = self.origin.mark(), threading.Event()
            self.addCleanup(gate.set)
            self.origin.hold_next(gate, key="held/a")
            body = blob(3, 1024 * 1024)
            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                fill = pool.submit(harness.signed_request, larder.url, "GET",
                                   "/%s/held/a" % BUCKET)
                self.assertTrue(self.origin.wait_request(BUCKET, "held/a", since=m))
                waits = self.metric("larder_upstream_shaped_waits_total", port)
                passed = pool.submit(harness.signed_request, larder.url, "GET",
                                     "/%s/held/b?versionId=null" % BUCKET)
                stored = pool.submit(put, larder.url, "/%s/held/c" % BUCKET, body)
                self.admin = "http://127.0.0.1:%d" % port
                st, job = self.call("POST", "/admin/prefetch",
                                    {"bucket": BUCKET, "manifest": "held/list.txt"})
                self.assertEqual(st, 202, job)
                # All three wait for the window (or, were larder wrong, reach the origin).
                deadline = time.monotonic() + 30
                while self.metric("larder_upstream_shaped_waits_total", port) < waits + 3 \
                        and self.origin.count(since=m) < 2 and time.monotonic() < deadline:
                    time.sleep(0.05)
                opened = time.time()
                gate.set()
                fill, passed, stored = fill.result(), passed.result(), stored.result()
            info = self.wait_job(job["job"])
            self.assertEqual((fill.status, fill.body), (200, blob(1, SIZE)))
            self.assertEqual((passed.status, passed.body), (200, blob(2, SIZE)))
            self.assertEqual(stored, 200)
            self.assertEqual(self.origin.get(BUCKET, "held/c").data, body)
            self.assertEqual((info["state"], info["errors"]), ("done", 0), info)
            reqs = self.origin.requests(m, "GET") + self.origin.requests(m, "PUT")
            later = [(g["key"], g["query"], round(g["t"] - opened, 2)) for g in reqs
                     if g["key"] in ("held/b", "held/list.txt", "held/c")]
            self.assertEqual(len([k for k, q, _ in later if k == "held/c"]), 1, later)
            self.assertEqual(len([k for k, q, _ in later if k == "held/list.txt"]), 1, later)
            self.assertEqual(len([k for k, q, _ in later if q.get("versionId")]), 1, later)
            for k, q, dt in later:
                self.assertGreaterEqual(dt, 0, "at the origin before the fill was answered: %r"
                                        % later)
        finally:
            test_cache_faults.finish_larder(self, larder)
            shutil.rmtree(cache_dir, ignore_errors=True)
            self.admin = Shaping.admin


if __name__ == "__main__":
    unittest.main()
