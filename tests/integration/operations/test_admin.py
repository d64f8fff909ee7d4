"""The admin listener (LARDER_ADMIN_LISTEN) and the `larder stats` / `larder purge` CLI.

Every route but /healthz needs the bearer token; bad input gets a JSON error
and changes nothing (checked by reading a cached object afterwards: still a
hit, no upstream request). Purges are checked from the outside: the next read
says x-larder-cache: miss and the moto request log shows larder's GET.
/metrics is checked by `promtool check metrics` (Debian's prometheus package;
the test is skipped without it) and its counters against what the test did.
"""
import http.client
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import unittest

import harness
from harness import LarderCase

BUCKET = "admin-data"
OTHER = "admin-other"
TOKEN = "admin-test-token-0123456789abcdef"
MiB = 1024 * 1024


def admin_request(port, method, path, token=TOKEN, body=None, headers=None, timeout=30):
    """(status, headers lower-cased, body bytes) of one request to the admin port."""
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = "Bearer " + token
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        try:
            c.request(method, path, body=body, headers=h)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused on its headers: the answer came before the body was read
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def parse_metrics(text):
    """{(name, frozenset(label items)): value} from the Prometheus text format."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        name, _, rest = series.partition("{")
        labels = {}
        if rest:
            for part in rest.rstrip("}").split(","):
                k, _, v = part.partition("=")
                labels[k] = v.strip('"')
        out[(name, frozenset(labels.items()))] = float(value)
    return out


def metric(m, name, **labels):
    return m.get((name, frozenset(labels.items())), 0.0)


class AdminCase(LarderCase):
    ADMIN_PORT = None
    TOKEN = TOKEN
    EXTRA_ENV = {}

    @classmethod
    def setUpClass(cls):
        cls.ADMIN_PORT = harness.free_port()
        env = {"LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % cls.ADMIN_PORT,
               "LARDER_CHUNK_SIZE": "1MiB", "LARDER_METADATA_TTL": "300"}
        if cls.TOKEN:
            env["LARDER_ADMIN_TOKEN"] = cls.TOKEN
        cls.LARDER_ENV = dict(env, **cls.EXTRA_ENV)
        super().setUpClass()
        if not harness.wait_port(cls.ADMIN_PORT, 10):
            raise RuntimeError("admin port not listening; log:\n" + cls.larder.log())

    def admin(self, method, path, token=TOKEN, body=None, headers=None):
        return admin_request(self.ADMIN_PORT, method, path, token, body, headers)

    def admin_json(self, method, path, token=TOKEN, body=None, headers=None):
        status, hdrs, data = self.admin(method, path, token, body, headers)
        self.assertEqual(hdrs.get("content-type"), "application/json", (status, data))
        return status, hdrs, json.loads(data)

    def metrics(self):
        status, hdrs, data = self.admin("GET", "/metrics")
        self.assertEqual(status, 200, data)
        self.assertTrue(hdrs["content-type"].startswith("text/plain; version=0.0.4"), hdrs)
        return data.decode()

    def wait_metrics(self, pred, timeout=10):
        """Metrics once pred(parsed) holds: a request is counted when libmicrohttpd
        reports it complete, which can come just after the client read the body."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.metrics()
            m = parse_metrics(text)
            if pred(m) or time.monotonic() > deadline:
                return text, m
            time.sleep(0.05)

    def wait_settled(self):
        """Metrics once every earlier request is over and counted: no client connection
        open (libmicrohttpd reports a request complete before its connection closed) and no
        chunk being fetched."""
        def settled(m):
            return (metric(m, "larder_client_connections"),
                    metric(m, "larder_inflight_fetches")) == (0, 0)
        text, m = self.wait_metrics(settled)
        self.assertTrue(settled(m), "earlier requests still open: %s" % text)
        return text, m


class Admin(AdminCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.direct.create_bucket(Bucket=OTHER)

    # -- helpers
    def get(self, key, bucket=BUCKET):
        """GET through larder: (status, x-larder-cache, body)."""
        path = harness.key_path(bucket, key)
        h = harness.sign_headers("GET", self.larder.url + path, harness.CLIENT_KEY,
                                 harness.CLIENT_SECRET)
        status, hdrs, body = harness.http_request(self.larder.url, "GET", path, h)
        return status, hdrs.get("x-larder-cache"), body

    def put(self, key, data, bucket=BUCKET):
        self.direct.put_object(Bucket=bucket, Key=key, Body=data)

    def cached(self, key, data, bucket=BUCKET):
        """Puts the object upstream and reads it through larder until it is a hit."""
        self.put(key, data, bucket)
        status, cache, body = self.get(key, bucket)
        self.assertEqual((status, cache, body), (200, "miss", data))
        self.assertEqual(self.get(key, bucket), (200, "hit", data))

    def upstream_gets(self, key, since, bucket=BUCKET):
        path = harness.key_path(bucket, key)
        return [r for r in self.upstream.from_larder(since)
                if r["method"] == "GET" and r["target"].partition("?")[0] == path]

    def assertUnchanged(self, key, data, bucket=BUCKET):
        """The object is still answered from the cache, with no upstream request."""
        m = self.upstream.mark()
        self.assertEqual(self.get(key, bucket), (200, "hit", data))
        self.assertEqual(self.upstream_gets(key, m, bucket), [])

    # -- routes and the token
    def test_healthz_needs_no_token(self):
        for token in (None, TOKEN, "wrong-token-wrong-token"):
            status, _, doc = self.admin_json("GET", "/healthz", token)
            self.assertEqual((status, doc), (200, {"status": "ok"}))

    def test_every_other_route_needs_the_token(self):
        routes = [("GET", "/readyz", None), ("GET", "/metrics", None),
                  ("GET", "/admin/stats", None),
                  ("POST", "/admin/purge", json.dumps({"bucket": BUCKET}))]
        for method, path, body in routes:
            for token, headers in ((None, None), ("wrong-token-0123456789", None),
                                   (TOKEN + "x", None), (TOKEN[:-1], None),
                                   (None, {"Authorization": "Basic " + TOKEN}),
                                   (None, {"Authorization": TOKEN})):
                status, hdrs, doc = self.admin_json(method, path, token, body, headers)
                what = "%s %s token=%r headers=%r" % (method, path, token, headers)
                self.assertEqual(status, 401, what)
                self.assertEqual(doc["error"], "unauthorized", what)
                self.assertTrue(hdrs.get("www-authenticate", "").startswith("Bearer"), what)
                if token:
                    self.assertIn("invalid bearer token", doc["message"])
                else:
                    self.assertIn("missing bearer token", doc["message"])
            status, _, _ = self.admin(method, path, TOKEN, body)
            self.assertEqual(status, 200, path)
        # The scheme name is case-insensitive (RFC 9110 11.1).
        status, _, _ = self.admin("GET", "/readyz", None,
                                  headers={"Authorization": "bearer " + TOKEN})
        self.assertEqual(status, 200)

    def test_healthz_answers_while_another_address_holds_connections(self):
        # A connection counts before its token is read: one address that opens
        # many and never ends its headers must not starve the liveness probe.
        held = []
        try:
            for _ in range(64):
                s = socket.socket()
                s.bind(("127.0.0.2", 0))
                try:
                    s.connect(("127.0.0.1", self.ADMIN_PORT))
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                except OSError:
                    pass  # refused: past that address's share
                held.append(s)
            # Once taken in, each is counted (held, or closed past the address's share).
            deadline = time.monotonic() + 10
            while harness.accept_queue(self.ADMIN_PORT) and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual(harness.accept_queue(self.ADMIN_PORT), 0,
                             "the admin listener left connections unaccepted")
            try:
                status, _, doc = self.admin_json("GET", "/healthz", None)
            except OSError as e:
                self.fail("/healthz: %r" % e)
            self.assertEqual((status, doc), (200, {"status": "ok"}))
        finally:
            for s in held:
                s.close()

    def test_wrong_token_purges_nothing(self):
        data = b"keep me" * 100
        self.cached("keep/a", data)
        status, _, doc = self.admin_json("POST", "/admin/purge", "not-the-token-0000000",
                                         json.dumps({"bucket": BUCKET, "key": "keep/a"}))
        self.assertEqual(status, 401)
        self.assertUnchanged("keep/a", data)

    def test_readyz(self):
        status, _, doc = self.admin_json("GET", "/readyz")
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc, {"ready": True, "checks": {"upstream_credentials": True,
                                                         "store_loaded": True,
                                                         "draining": False}})

    def test_unknown_route_and_method(self):
        for method, path in (("GET", "/"), ("GET", "/admin"), ("GET", "/metrics/"),
                             ("POST", "/admin/prefetchx"), ("GET", "/admin/stats/x")):
            status, _, doc = self.admin_json(method, path)
            self.assertEqual(status, 404, path)
            self.assertEqual(doc["error"], "not_found")
            self.assertIn("routes:", doc["message"])
        # 405 says in Allow what the path takes (RFC 9110), every method of it
        for method, path, allow in (("DELETE", "/metrics", "GET, HEAD"),
                                    ("GET", "/admin/purge", "POST"),
                                    ("POST", "/admin/stats", "GET, HEAD"),
                                    ("PUT", "/healthz", "GET, HEAD"),
                                    ("PUT", "/admin/jobs/j1", "GET, HEAD, DELETE"),
                                    ("DELETE", "/admin/lookahead", "GET, HEAD, POST")):
            status, hdrs, doc = self.admin_json(method, path)
            self.assertEqual(status, 405, path)
            self.assertEqual(doc["error"], "method_not_allowed")
            got = hdrs.get("allow", "")
            self.assertEqual(sorted(got.split(", ")), sorted(allow.split(", ")), (path, hdrs))
            self.assertIn("takes %s, not %s" % (got, method), doc["message"])

    def test_bad_purge_requests_change_nothing(self):
        data = b"stays cached" * 1000
        self.cached("bad/a", data)
        big = json.dumps({"bucket": BUCKET, "prefix": "x" * (9 * 1024 * 1024)})  # > 8 MiB
        cases = [
            ("", 400, "expected a JSON body"),
            ("{", 400, "malformed JSON"),
            ('{"bucket": "admin-data", "prefix": "bad/"', 400, "malformed JSON"),
            ('{"bucket": "admin-data", "bucket": "admin-data"}', 400, "malformed JSON"),
            ("[]", 400, "expected a JSON object"),
            ('"admin-data"', 400, "expected a JSON object"),
            ('{"prefix": "bad/"}', 400, "bucket is missing"),
            ('{"bucket": 5}', 400, "must be strings"),
            ('{"bucket": "admin-data", "prefix": ["bad/"]}', 400, "must be strings"),
            ('{"bucket": "no such/bucket", "prefix": "bad/"}', 400, "invalid bucket name"),
            ('{"bucket": "ab"}', 400, "invalid bucket name"),
            ('{"bucket": "admin-data", "prefix": "bad/", "key": "bad/a"}', 400, "not both"),
            ('{"bucket": "admin-data", "key": ""}', 400, "key must be"),
            ('{"bucket": "admin-data", "prefix": "bad/", "recursive": true}', 400,
             "unknown field"),
            (big, 413, "larger than"),
        ]
        for body, want_status, want_msg in cases:
            status, _, doc = self.admin_json("POST", "/admin/purge", body=body.encode())
            self.assertEqual(status, want_status, body[:100])
            self.assertIn(want_msg, doc["message"], body[:100])
            self.assertIn(doc["error"], ("bad_request", "payload_too_large"))
        self.assertUnchanged("bad/a", data)

    # -- purge
    def test_purge_key(self):
        data = os.urandom(3 * MiB + 5)
        self.cached("pk/target", data)
        self.cached("pk/target2", b"neighbour")
        status, _, doc = self.admin_json("POST", "/admin/purge",
                                         body=json.dumps({"bucket": BUCKET, "key": "pk/target"}))
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc, {"bucket": BUCKET, "key": "pk/target", "purged_objects": 1})
        m = self.upstream.mark()
        self.assertEqual(self.get("pk/target"), (200, "miss", data))
        self.assertGreaterEqual(len(self.upstream_gets("pk/target", m)), 1)
        # Exact: the key with a longer name is still cached.
        self.assertUnchanged("pk/target2", b"neighbour")
        # Purging what is not cached purges nothing.
        status, _, doc = self.admin_json("POST", "/admin/purge",
                                         body=json.dumps({"bucket": BUCKET, "key": "pk/none"}))
        self.assertEqual((status, doc["purged_objects"]), (200, 0))

    def test_purge_prefix(self):
        objs = {"pp/a": b"a" * 100, "pp/sub/b": os.urandom(MiB + 1), "ppx/c": b"c" * 10}
        for k, v in objs.items():
            self.cached(k, v)
        self.cached("pp/z", b"other bucket", bucket=OTHER)
        status, _, doc = self.admin_json("POST", "/admin/purge",
                                         body=json.dumps({"bucket": BUCKET, "prefix": "pp/"}))
        self.assertEqual((status, doc), (200, {"bucket": BUCKET, "prefix": "pp/",
                                               "purged_objects": 2}))
        for k in ("pp/a", "pp/sub/b"):
            m = self.upstream.mark()
            self.assertEqual(self.get(k), (200, "miss", objs[k]), k)
            self.assertEqual(len(self.upstream_gets(k, m)), 1 if len(objs[k]) <= MiB else 2, k)
        self.assertUnchanged("ppx/c", objs["ppx/c"])
        self.assertUnchanged("pp/z", b"other bucket", bucket=OTHER)

    def test_purge_whole_bucket(self):
        self.cached("wb/one", b"1", bucket=OTHER)
        self.cached("wb/two", b"2", bucket=OTHER)
        status, _, doc = self.admin_json("POST", "/admin/purge",
                                         body=json.dumps({"bucket": OTHER}))
        self.assertEqual(status, 200, doc)
        self.assertGreaterEqual(doc["purged_objects"], 2)
        self.assertEqual(self.get("wb/one", OTHER), (200, "miss", b"1"))

    # -- metrics and stats
    def test_each_chunk_read_is_counted_once(self):
        # A reader looks a chunk up once: a cold GET of a one-chunk object is one
        # chunk miss with nobody coalesced, a warm one one RAM hit, and a warm GET
        # of a three-chunk object three. (Small answers and RAM hits used to look
        # their chunks up again to build the iovec: two RAM hits per chunk, and a
        # RAM hit on every cold read.)
        small, big = os.urandom(5000), os.urandom(2 * MiB + 100)
        self.put("cc/small", small)
        self.put("cc/big", big)
        _, m0 = self.wait_settled()  # earlier reads' completions

        def counts(pred=lambda d: True):
            def delta(m):
                return tuple(int(metric(m, n, **l) - metric(m0, n, **l)) for n, l in (
                    ("larder_cache_chunk_misses_total", {}),
                    ("larder_cache_chunk_hits_total", {"tier": "ram"}),
                    ("larder_coalesced_waiters_total", {})))
            _, m = self.wait_metrics(lambda m: pred(delta(m)))
            return delta(m)

        self.assertEqual(self.get("cc/small"), (200, "miss", small))
        self.assertEqual(counts(lambda d: d[0] >= 1), (1, 0, 0), "misses, RAM hits, coalesced")
        self.assertEqual(self.get("cc/small"), (200, "hit", small))
        self.assertEqual(counts(lambda d: d[1] >= 1), (1, 1, 0))
        self.assertEqual(self.get("cc/big"), (200, "miss", big))
        self.assertEqual(counts(lambda d: d[0] >= 4)[0], 4)
        _, m0 = self.wait_metrics(lambda m: True)
        self.assertEqual(self.get("cc/big"), (200, "hit", big))
        self.assertEqual(counts(lambda d: d[1] >= 3), (0, 3, 0))

    def test_metrics_text_and_counters(self):
        data = os.urandom(2 * MiB + 100)
        self.cached("m/obj", data)
        key = ("larder_requests_total", frozenset({"op": "GetObject", "status": "200"}.items()))
        # Once the warm-up reads are counted: their completion may still be pending.
        _, before = self.wait_settled()
        n = 5
        for _ in range(n):
            self.assertEqual(self.get("m/obj"), (200, "hit", data))
        text, after = self.wait_metrics(lambda m: m.get(key, 0) >= before.get(key, 0) + n)
        self.assertEqual(after.get(key, 0) - before.get(key, 0), n)
        self.assertEqual(metric(after, "larder_cache_requests_total", result="hit")
                         - metric(before, "larder_cache_requests_total", result="hit"), n)
        self.assertEqual(metric(after, "larder_cache_response_bytes_total", result="hit")
                         - metric(before, "larder_cache_response_bytes_total", result="hit"),
                         n * len(data))
        self.assertEqual(metric(after, "larder_cache_requests_total", result="miss"),
                         metric(before, "larder_cache_requests_total", result="miss"))
        self.assertEqual(metric(after, "larder_upstream_request_duration_seconds_count"),
                         metric(before, "larder_upstream_request_duration_seconds_count"))
        # A miss: upstream requests counted, chunk-level misses too.
        m0 = self.upstream.mark()
        self.put("m/new", data)
        self.assertEqual(self.get("m/new"), (200, "miss", data))
        fills = len(self.upstream_gets("m/new", m0))
        _, later = self.wait_metrics(
            lambda m: metric(m, "larder_upstream_request_duration_seconds_count")
            >= metric(after, "larder_upstream_request_duration_seconds_count") + fills)
        self.assertEqual(metric(later, "larder_upstream_request_duration_seconds_count")
                         - metric(after, "larder_upstream_request_duration_seconds_count"), fills)
        self.assertGreaterEqual(metric(later, "larder_upstream_response_bytes_total")
                                - metric(after, "larder_upstream_response_bytes_total"), len(data))
        self.assertGreaterEqual(metric(later, "larder_cache_chunk_misses_total"), 3)
        self.assertGreater(metric(later, "larder_cache_used_bytes", tier="ram"), 0)
        self.assertGreater(metric(later, "larder_cache_capacity_bytes", tier="ram"), 0)
        for name in ("larder_coalesced_waiters_total", "larder_inflight_fetches",
                     "larder_cache_evictions_total", "larder_upstream_errors_total",
                     "larder_upstream_retries_total", "larder_metadata_objects"):
            self.assertIn("\n# TYPE %s " % name, text)
        self.promtool(text)

    def promtool(self, text):
        tool = shutil.which("promtool")
        if not tool:
            self.skipTest("promtool not installed (Debian package prometheus)")
        r = subprocess.run([tool, "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, "promtool: %s%s" % (r.stdout.decode(),
                                                              r.stderr.decode()))
        # promtool's lint only warns on stdout/stderr; a clean exposition says nothing.
        self.assertEqual((r.stdout + r.stderr).strip(), b"")

    def test_stats(self):
        data = b"s" * 5000
        self.direct.create_bucket(Bucket="admin-stats")
        self.cached("st/a", data, bucket="admin-stats")        # a miss then a hit
        self.assertEqual(self.get("st/a", "admin-stats"), (200, "hit", data))
        path = harness.key_path("admin-stats", "st/a")

        def row():
            status, _, doc = self.admin_json("GET", "/admin/stats")
            self.assertEqual(status, 200)
            return doc, doc["buckets"].get("admin-stats", {})
        deadline = time.monotonic() + 10
        doc, r = row()
        while r.get("requests", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            doc, r = row()
        self.assertEqual((r["requests"], r["hits"], r["misses"], r["bypass"]), (3, 2, 1, 0))
        self.assertAlmostEqual(r["hit_ratio"], 2 / 3, places=6)
        self.assertEqual(r["bytes_served"], 3 * len(data))
        self.assertEqual(r["upstream_bytes_saved"], 2 * len(data))
        client = doc["clients"][harness.CLIENT_KEY]
        self.assertGreaterEqual(client["requests"], 3)
        self.assertGreaterEqual(doc["total"]["requests"], 3)
        self.assertIn("ram", doc["cache"])
        self.assertIsNotNone(path)

    # -- the CLI
    def cli(self, *args, env=None, token=TOKEN):
        e = {k: v for k, v in os.environ.items() if not k.startswith("LARDER_")}
        e["LARDER_ADMIN_URL"] = "http://127.0.0.1:%d" % self.ADMIN_PORT
        if token is not None:
            e["LARDER_ADMIN_TOKEN"] = token
        e["ASAN_OPTIONS"] = "detect_leaks=1"
        e.update(env or {})
        return subprocess.run([harness.larder_binary()] + list(args), env=e,
                              capture_output=True, timeout=60, stdin=subprocess.DEVNULL)

    def test_cli_stats(self):
        self.cached("cli/x", b"x" * 123)
        r = self.cli("stats")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, b"")
        out = r.stdout.decode()
        self.assertNotIn("\x1b", out)  # no escape sequences on a non-terminal
        lines = out.splitlines()
        self.assertEqual(lines[0].split("\t"),
                         ["scope", "name", "requests", "hits", "misses", "bypass", "hit_ratio",
                          "bytes_served", "upstream_bytes_saved"])
        rows = {tuple(l.split("\t")[:2]): l.split("\t") for l in lines[1:]}
        self.assertIn(("total", "-"), rows)
        b = rows[("bucket", BUCKET)]
        self.assertEqual(len(b), 9)
        self.assertTrue(all(f.isdigit() for f in b[2:6] + b[7:]), b)
        self.assertGreaterEqual(int(b[3]), 1)
        self.assertIn(("client", harness.CLIENT_KEY), rows)
        r = self.cli("stats", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("buckets", json.loads(r.stdout))
        r = self.cli("stats", "--admin", "http://127.0.0.1:%d/" % self.ADMIN_PORT,
                     env={"LARDER_ADMIN_URL": "http://127.0.0.1:1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        # A node alone: the cluster view is a header and no members.
        r = self.cli("cluster")
        self.assertEqual((r.returncode, r.stdout.decode()),
                         (0, "id\taddress\tcapacity\townership_share\tdirectory_entries\t"
                             "avoided_seconds\n"))

    def test_cli_purge(self):
        self.cached("cp/one", b"1" * 10)
        self.cached("cp/two", b"2" * 20)
        r = self.cli("purge", "s3://%s/cp/one" % BUCKET, "--key")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode(), "purged 1 object at s3://%s/cp/one\n" % BUCKET)
        self.assertEqual(self.get("cp/one")[1], "miss")
        self.assertEqual(self.get("cp/two")[1], "hit")
        r = self.cli("purge", "s3://%s/cp/" % BUCKET)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode(), "purged 2 objects under s3://%s/cp/\n" % BUCKET)
        self.assertEqual(self.get("cp/two")[1], "miss")

    def test_cli_exit_codes(self):
        for args in (("stats", "--bogus"), ("stats", "extra"), ("purge",),
                     ("purge", "bucket/prefix"), ("purge", "s3://ab/x"),
                     ("purge", "--key", "s3://%s" % BUCKET), ("purge", "s3://a/b", "s3://c/d"),
                     ("stats", "--admin"), ("stats", "--admin", "ftp://x"), ("frobnicate",)):
            r = self.cli(*args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertEqual(r.stdout, b"", args)
            self.assertNotEqual(r.stderr, b"", args)
        for args in (("stats", "--help"), ("purge", "--help"), ("purge", "-h"), ("--help",)):
            r = self.cli(*args)
            self.assertEqual(r.returncode, 0, args)
            self.assertIn(b"usage: larder", r.stdout)
            self.assertEqual(r.stderr, b"")
        # Server down.
        down = "http://127.0.0.1:%d" % harness.free_port()
        for args in (("stats",), ("purge", "s3://%s/x" % BUCKET)):
            r = self.cli(*args, env={"LARDER_ADMIN_URL": down})
            self.assertEqual(r.returncode, 1, r)
            self.assertIn(b"cannot reach the admin endpoint", r.stderr)
            self.assertEqual(r.stdout, b"")
        # Wrong or missing token: the server's message, exit 1.
        r = self.cli("stats", token="wrong-token-000000000000")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"invalid bearer token", r.stderr)
        self.assertIn(b"HTTP 401", r.stderr)
        self.assertEqual(r.stdout, b"")
        r = self.cli("purge", "s3://%s/x" % BUCKET, token=None)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"missing bearer token", r.stderr)
        self.assertIn(b"LARDER_ADMIN_TOKEN is not set", r.stderr)
        # Not an admin endpoint at all (the S3 port answers XML).
        r = self.cli("stats", "--admin", self.larder.url)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"unexpected answer", r.stderr)


class AdminPurgeRemembered404(AdminCase):
    """A purge forgets a remembered 404 (LARDER_NEGATIVE_TTL) as it forgets
    an object: the next read goes upstream."""
    EXTRA_ENV = {"LARDER_NEGATIVE_TTL": "600"}

    def test_purge_forgets_a_remembered_404(self):
        self.direct.create_bucket(Bucket=BUCKET)
        for body, key in (({"bucket": BUCKET, "key": "neg/k"}, "neg/k"),
                          ({"bucket": BUCKET, "prefix": "negp/"}, "negp/k")):
            path = harness.key_path(BUCKET, key)
            for attempt in range(2):
                r = harness.signed_request(self.larder.url, "GET", path)
                self.assertEqual(r.status, 404, (key, attempt))
            self.direct.put_object(Bucket=BUCKET, Key=key, Body=b"now here")
            r = harness.signed_request(self.larder.url, "GET", path)
            self.assertEqual(r.status, 404, "remembered for LARDER_NEGATIVE_TTL")
            status, _, doc = self.admin_json("POST", "/admin/purge", body=json.dumps(body))
            self.assertEqual((status, doc["purged_objects"]), (200, 1), doc)
            r = harness.signed_request(self.larder.url, "GET", path)
            self.assertEqual((r.status, r.body), (200, b"now here"), key)

class AdminClientRows(AdminCase):
    """What a refused request counts as in the per-client rows and the operation metrics."""
    EXTRA_ENV = {"LARDER_MAX_CONNECTIONS": "3"}

    def stats_clients(self):
        status, _, doc = self.admin_json("GET", "/admin/stats")
        self.assertEqual(status, 200, doc)
        return doc["clients"]

    def test_an_unknown_key_is_not_the_anonymous_row(self):
        # A request signed with a key id larder has never heard of counted in "(anonymous)",
        # the row of unsigned requests, on a node that serves none.
        unauth = self.stats_clients().get("(unauthenticated)", {}).get("requests", 0)
        r = harness.signed_request(self.larder.url, "GET", "/bkt/k", key="AKUNKNOWNKEY0001",
                                   secret="nope")
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (403, "InvalidAccessKeyId"))
        # counted as it completes, which may be just after its answer arrived
        self.wait_settled()
        clients = self.stats_clients()
        self.assertNotIn("(anonymous)", clients, clients)
        self.assertGreaterEqual(clients.get("(unauthenticated)", {}).get("requests", 0),
                                unauth + 1, clients)

    def test_a_wrong_signature_is_not_the_keys_row(self):
        # A key id is no secret (it is in logs and URLs): a request that names it with a
        # wrong signature counted in that key's row, so anyone could add to it.
        before = self.stats_clients()
        mine = before.get(harness.CLIENT_KEY, {}).get("requests", 0)
        unauth = before.get("(unauthenticated)", {}).get("requests", 0)
        for _ in range(3):
            r = harness.signed_request(self.larder.url, "GET", "/bkt/k", secret="not-its-secret")
            self.assertEqual((r.status, harness.s3_error(r.body)[0]),
                             (403, "SignatureDoesNotMatch"))
        # signed for another region: refused before the signature is checked, not anonymous
        h = harness.sign_headers("GET", self.larder.url + "/bkt/k", harness.CLIENT_KEY,
                                 harness.CLIENT_SECRET)
        h["Authorization"] = h["Authorization"].replace("/us-east-1/", "/eu-west-3/")
        st, _, body = harness.http_request(self.larder.url, "GET", "/bkt/k", h)
        self.assertEqual(st, 400, body)
        # counted as each request completes, which may be just after its answer arrived
        after = self.wait_clients(lambda c: c.get("(unauthenticated)", {}).get("requests", 0)
                                  >= unauth + 4)
        self.assertEqual(after.get(harness.CLIENT_KEY, {}).get("requests", 0), mine, after)
        self.assertEqual(after["(unauthenticated)"]["requests"], unauth + 4, after)
        self.assertNotIn("(anonymous)", after, after)
        r = harness.signed_request(self.larder.url, "GET", "/bkt/k")  # the key's own
        self.assertIn(r.status, (200, 404), r)
        self.wait_clients(lambda c: c.get(harness.CLIENT_KEY, {}).get("requests", 0) == mine + 1)

    def wait_clients(self, pred, timeout=5):
        deadline = time.monotonic() + timeout
        while True:
            clients = self.stats_clients()
            if pred(clients) or time.monotonic() > deadline:
                self.assertTrue(pred(clients), clients)
                return clients
            time.sleep(0.05)

    def test_a_request_refused_at_the_connection_limit_is_no_listbuckets(self):
        # It was refused before its path was read, and counted as op="ListBuckets".
        idle = [socket.create_connection(("127.0.0.1", self.larder.port), timeout=10)
                for _ in range(4)]
        try:
            # A connection counts once a worker accepted it.
            _, m = self.wait_metrics(lambda m: metric(m, "larder_client_connections") >= 4)
            self.assertEqual(metric(m, "larder_client_connections"), 4)
            r = harness.signed_request(self.larder.url, "GET", "/bkt/some/key", timeout=10)
            self.assertEqual(r.status, 503, r)
        finally:
            for c in idle:
                c.close()
        _, m = self.wait_settled()  # the refused request counted, the idle ones let go
        self.assertEqual(metric(m, "larder_requests_total", op="ListBuckets", status="503"), 0)
        self.assertEqual(metric(m, "larder_requests_total", op="Other", status="503"), 1)

    def test_a_request_refused_on_its_headers_is_no_listbuckets(self):
        # Refused before its path was parsed (a header name that is no token, a second
        # Content-Length): it counted as op="ListBuckets" (a GET) or "CreateBucket" (a PUT).
        def count_400(m):
            return sum(v for (name, labels), v in m.items()
                       if name == "larder_requests_total" and ("status", "400") in labels)

        m0 = parse_metrics(self.admin("GET", "/metrics")[2].decode())
        for method, extra in (("GET", b"Bad Name: x\r\n"),
                              ("PUT", b"Content-Length: 0\r\nContent-Length: 3\r\n")):
            h = harness.sign_headers(method, self.larder.url + "/bkt/some/key",
                                     harness.CLIENT_KEY, harness.CLIENT_SECRET)
            req = ("%s /bkt/some/key HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                   % (method, self.larder.port)).encode()
            req += b"".join(("%s: %s\r\n" % kv).encode() for kv in h.items()) + extra + b"\r\n"
            out = harness.raw_exchange(self.larder.port, req, timeout=5)
            self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out[:300])
        deadline = time.monotonic() + 5  # counted as each completes
        while True:
            m = parse_metrics(self.admin("GET", "/metrics")[2].decode())
            if time.monotonic() > deadline or count_400(m) - count_400(m0) >= 2:
                break
            time.sleep(0.05)
        for op in ("ListBuckets", "CreateBucket"):
            self.assertEqual(metric(m, "larder_requests_total", op=op, status="400"),
                             metric(m0, "larder_requests_total", op=op, status="400"), op)
        self.assertEqual(metric(m, "larder_requests_total", op="Other", status="400") -
                         metric(m0, "larder_requests_total", op="Other", status="400"), 2)


class AdminBlockingRoute(unittest.TestCase):
    """A route that waits on the upstream (a warm job's bucket check, here against an upstream
    that accepts and never answers) holds its own connection only: /healthz, which liveness
    probes ask, and the other routes still answer at once."""

    def test_healthz_answers_while_a_warm_job_waits_on_upstream(self):
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the backlog; nothing is ever read
        self.addCleanup(silent.close)
        port = harness.free_port()
        larder = harness.Larder(env={
            "LARDER_UPSTREAM_URL": "http://127.0.0.1:%d" % silent.getsockname()[1],
            "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
            "LARDER_UPSTREAM_TIMEOUT": "6", "LARDER_UPSTREAM_RETRIES": "0",
            "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % port, "LARDER_ADMIN_TOKEN": TOKEN})
        larder.start()
        self.addCleanup(larder.cleanup)
        self.assertTrue(harness.wait_port(port, 10))
        answer = {}

        def warm():
            answer["warm"] = admin_request(port, "POST", "/admin/prefetch",
                                           body=json.dumps({"bucket": "data", "prefix": ""}))
        queued = harness.accept_queue(silent.getsockname()[1])
        t = threading.Thread(target=warm)
        t.start()
        # Until its bucket check has connected to the upstream, which never takes it in.
        deadline = time.monotonic() + 10
        while harness.accept_queue(silent.getsockname()[1]) <= queued:
            self.assertLess(time.monotonic(), deadline, "the warm job never asked the upstream")
            time.sleep(0.02)
        t0 = time.monotonic()
        status, _, _ = admin_request(port, "GET", "/healthz", token=None, timeout=20)
        took = time.monotonic() - t0
        self.assertEqual(status, 200)
        self.assertLess(took, 2.0, "/healthz waited %.1f s behind the warm job" % took)
        self.assertTrue(t.is_alive(), "the warm job did not wait on the upstream: %r" % answer)
        status, _, _ = admin_request(port, "GET", "/admin/stats", timeout=20)
        self.assertEqual(status, 200)
        t.join(30)
        self.assertGreaterEqual(answer["warm"][0], 400, answer)  # the upstream never answered
        self.assertEqual(larder.stop(), 0)
        larder.check_sanitizers(self)


class AdminWithoutToken(AdminCase):
    """No LARDER_ADMIN_TOKEN: only /healthz (and the /ui page) answers; the rest says how to fix it."""
    TOKEN = None

    def test_only_healthz(self):
        status, _, doc = self.admin_json("GET", "/healthz", None)
        self.assertEqual(status, 200)
        for method, path in (("GET", "/metrics"), ("GET", "/readyz"), ("GET", "/admin/stats"),
                             ("POST", "/admin/purge")):
            for token in (None, TOKEN):
                status, _, doc = self.admin_json(method, path, token,
                                                 body=b'{"bucket":"abc"}')
                self.assertEqual(status, 403, path)
                self.assertEqual(doc["error"], "forbidden")
                self.assertIn("LARDER_ADMIN_TOKEN", doc["message"])


class AdminOff(LarderCase):
    """LARDER_ADMIN_LISTEN=off: no listener, larder serves as before."""
    LARDER_ENV = {"LARDER_ADMIN_LISTEN": "off", "LARDER_ADMIN_TOKEN": TOKEN}

    def test_off(self):
        self.assertIn("admin listener off", self.larder.log())
        self.assertEqual(self.s3.list_buckets()["ResponseMetadata"]["HTTPStatusCode"], 200)


if __name__ == "__main__":
    unittest.main()
