"""The chunked cache when the origin misbehaves, and its NVMe tier across restarts.

The upstream here is fault_origin.FaultOrigin, a scripted S3 origin that
verifies larder's SigV4 signatures and can answer 503 SlowDown bursts, hang up
in the middle of a body, delay its first byte or change an object between two
requests. FaultOriginSelfTest checks the origin itself with boto3, without
larder, so a failure elsewhere in this file is larder's.

Chunk size is 1 MiB throughout, so objects of a few MiB span several chunks.
"""
import glob
import hashlib
import http.client
import itertools
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest


import fault_origin
import harness
from fault_origin import FaultOrigin, ORIGIN_KEY, ORIGIN_SECRET

MiB = 1024 * 1024
CHUNK = MiB
BUCKET = "fault-bkt"


def blob(seed, n):
    return random.Random(seed).randbytes(n)


def md5_etag(data):
    return '"%s"' % hashlib.md5(data).hexdigest()


class Resp(harness.Resp):
    def __repr__(self):
        return "<%s %s cache=%s len=%d complete=%s error=%r>" % (
            self.status, {k: v for k, v in self.headers.items()
                          if k in ("etag", "content-range", "content-length")},
            self.cache, len(self.body), self.complete, self.error)


def fetch(base, method, path, headers=None, **kw):
    """One signed request (harness.signed_request)."""
    return harness.signed_request(base, method, path, headers, resp_class=Resp, **kw)


def origin_client(origin, secret=ORIGIN_SECRET, **kw):
    """boto3 straight to the origin; one attempt (botocore's retries
    max_attempts counts retries, total_max_attempts counts attempts)."""
    kw.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
    return harness.make_s3_client(origin.url, ORIGIN_KEY, secret, **kw)


# ------------------------------------------------------------------ the origin itself


class FaultOriginSelfTest(harness.S3Asserts, unittest.TestCase):
    """fault_origin.py against boto3, no larder involved."""

    @classmethod
    def setUpClass(cls):
        cls.origin = FaultOrigin().start()
        cls.s3 = origin_client(cls.origin)

    @classmethod
    def tearDownClass(cls):
        cls.origin.stop()

    def setUp(self):
        self.origin.clear_faults()

    def test_put_get_head_metadata(self):
        self.s3.create_bucket(Bucket="self-a")
        data = blob(1, 3000)
        put = self.s3.put_object(Bucket="self-a", Key="dir/o b+j", Body=data,
                                 ContentType="text/plain", Metadata={"Who": "me"})
        self.assertEqual(put["ETag"], md5_etag(data))
        got = self.s3.get_object(Bucket="self-a", Key="dir/o b+j")
        self.assertEqual(got["Body"].read(), data)
        self.assertEqual(got["ETag"], md5_etag(data))
        self.assertEqual(got["ContentType"], "text/plain")
        self.assertEqual(got["Metadata"], {"who": "me"})
        self.assertEqual(got["AcceptRanges"], "bytes")
        head = self.s3.head_object(Bucket="self-a", Key="dir/o b+j")
        self.assertEqual(head["ContentLength"], 3000)
        self.assertEqual(head["LastModified"], got["LastModified"])
        self.assertS3Error(lambda: self.s3.get_object(Bucket="self-a", Key="nope"), 404,
                           "NoSuchKey")
        self.assertS3Error(lambda: self.s3.get_object(Bucket="self-none", Key="x"), 404,
                           "NoSuchBucket")
        self.s3.delete_object(Bucket="self-a", Key="dir/o b+j")
        self.assertS3Error(lambda: self.s3.head_object(Bucket="self-a", Key="dir/o b+j"), 404,
                           "404")

    def test_put_cut_mid_body_stores_nothing(self):
        # As at S3: a PUT whose client leaves before Content-Length bytes
        # came is not an object (the double stored the bytes that came).
        self.s3.create_bucket(Bucket="self-cut")
        url = self.origin.url + "/self-cut/half"
        h = harness.sign_headers("PUT", url, ORIGIN_KEY, ORIGIN_SECRET,
                                 payload="UNSIGNED-PAYLOAD",
                                 headers={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})
        h["Content-Length"] = "1000"
        h["Host"] = url.split("/")[2]
        mark = self.origin.mark()
        with socket.create_connection(("127.0.0.1", self.origin.port), timeout=10) as s:
            s.sendall(("PUT /self-cut/half HTTP/1.1\r\n" +
                       "".join("%s: %s\r\n" % kv for kv in h.items()) + "\r\n").encode()
                      + b"x" * 400)
        deadline = time.monotonic() + 5  # the origin's thread sees the close
        while not self.origin.requests(mark) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(self.origin.wait_idle())
        self.assertEqual([r["status"] for r in self.origin.requests(mark)], ["incomplete-body"])
        self.assertIsNone(self.origin.get("self-cut", "half"))

    def test_ranges(self):
        data = blob(2, 1000)
        self.origin.put("self-r", "r", data)
        for rng, want, cr in [("bytes=0-0", data[:1], "bytes 0-0/1000"),
                              ("bytes=10-19", data[10:20], "bytes 10-19/1000"),
                              ("bytes=990-5000", data[990:], "bytes 990-999/1000"),
                              ("bytes=900-", data[900:], "bytes 900-999/1000"),
                              ("bytes=-7", data[-7:], "bytes 993-999/1000"),
                              ("bytes=-5000", data, "bytes 0-999/1000")]:
            with self.subTest(rng):
                r = self.s3.get_object(Bucket="self-r", Key="r", Range=rng)
                self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], 206)
                self.assertEqual(r["ContentRange"], cr)
                self.assertEqual(r["Body"].read(), want)
        for rng in ("bytes=5-2", "bytes=0-1,5-6", "items=0-5"):
            with self.subTest(ignored=rng):
                r = self.s3.get_object(Bucket="self-r", Key="r", Range=rng)
                self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], 200)
                self.assertEqual(r["Body"].read(), data)
        for rng in ("bytes=1000-", "bytes=-0", "bytes=5000-6000"):
            with self.subTest(unsatisfiable=rng):
                resp = self.assertS3Error(
                    lambda: self.s3.get_object(Bucket="self-r", Key="r", Range=rng),
                    416, "InvalidRange")
                self.assertEqual(resp["ResponseMetadata"]["HTTPHeaders"]["content-range"],
                                 "bytes */1000")
        self.origin.put("self-r", "empty", b"")
        self.assertS3Error(lambda: self.s3.get_object(Bucket="self-r", Key="empty",
                                                      Range="bytes=0-99"), 416, "InvalidRange")
        self.assertEqual(self.s3.get_object(Bucket="self-r", Key="empty")["Body"].read(), b"")

    def test_conditionals(self):
        data = b"conditional"
        etag = self.origin.put("self-c", "c", data, mtime=time.time() - 100)
        lm = self.s3.head_object(Bucket="self-c", Key="c")["LastModified"]
        past, future = lm.timestamp() - 50, lm.timestamp() + 50
        from datetime import datetime, timezone
        at = lambda t: datetime.fromtimestamp(t, timezone.utc)  # noqa: E731
        get = lambda **kw: self.s3.get_object(Bucket="self-c", Key="c", **kw)  # noqa: E731
        self.assertEqual(get(IfMatch=etag)["Body"].read(), data)
        self.assertS3Error(lambda: get(IfMatch='"other"'), 412, "PreconditionFailed")
        self.assertS3Error(lambda: get(IfMatch='"other"', Range="bytes=0-3"), 412,
                           "PreconditionFailed")
        self.assertS3Error(lambda: get(IfNoneMatch=etag), 304, "304")
        self.assertS3Error(lambda: get(IfModifiedSince=at(future)), 304, "304")
        self.assertS3Error(lambda: get(IfUnmodifiedSince=at(past)), 412, "PreconditionFailed")
        self.assertEqual(get(IfModifiedSince=at(past))["Body"].read(), data)
        # S3: If-Match true wins over If-Unmodified-Since false; If-None-Match
        # false means If-Modified-Since is not looked at.
        self.assertEqual(get(IfMatch=etag, IfUnmodifiedSince=at(past))["Body"].read(), data)
        self.assertEqual(get(IfNoneMatch='"other"', IfModifiedSince=at(future))["Body"].read(),
                         data)
        self.assertS3Error(lambda: self.s3.head_object(Bucket="self-c", Key="c", IfMatch='"x"'),
                           412, "412")
        r = self.s3.get_object(Bucket="self-c", Key="c", ResponseContentType="a/b",
                               ResponseContentDisposition="attachment; filename=x",
                               ResponseCacheControl="no-cache")
        self.assertEqual((r["ContentType"], r["ContentDisposition"], r["CacheControl"]),
                         ("a/b", "attachment; filename=x", "no-cache"))

    def test_signatures_enforced(self):
        self.origin.put("self-s", "s", b"x")
        bad = origin_client(self.origin, secret="wrong-secret")
        self.assertS3Error(lambda: bad.get_object(Bucket="self-s", Key="s"), 403,
                           "SignatureDoesNotMatch")
        self.assertEqual(self.origin.requests()[-1]["auth_error"], "SignatureDoesNotMatch")
        other = harness.make_s3_client(self.origin.url, "AKIDSOMEONEELSE", ORIGIN_SECRET,
                                       retries={"total_max_attempts": 1})
        self.assertS3Error(lambda: other.get_object(Bucket="self-s", Key="s"), 403,
                           "InvalidAccessKeyId")
        status, _, body = harness.http_request(self.origin.url, "GET", "/self-s/s")
        self.assertEqual((status, harness.s3_error(body)[0]), (403, "AccessDenied"))
        # a body that does not match its signed hash
        url = self.origin.url + "/self-s/t"
        h = harness.sign_headers("PUT", url, ORIGIN_KEY, ORIGIN_SECRET, body=b"signed")
        status, _, body = harness.http_request(self.origin.url, "PUT", "/self-s/t", h, b"sneaky")
        self.assertEqual((status, harness.s3_error(body)[0]), (400, "XAmzContentSHA256Mismatch"))
        # skewed clock
        import datetime
        when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        h = harness.sign_headers("GET", self.origin.url + "/self-s/s", ORIGIN_KEY, ORIGIN_SECRET,
                                 when=when)
        status, _, body = harness.http_request(self.origin.url, "GET", "/self-s/s", h)
        self.assertEqual((status, harness.s3_error(body)[0]), (403, "RequestTimeTooSkewed"))
        # faults never apply to rejected requests
        self.origin.fail_next(1, key="s")
        self.assertS3Error(lambda: bad.get_object(Bucket="self-s", Key="s"), 403,
                           "SignatureDoesNotMatch")
        self.assertS3Error(lambda: self.s3.get_object(Bucket="self-s", Key="s"), 503, "SlowDown")
        self.assertEqual(self.s3.get_object(Bucket="self-s", Key="s")["Body"].read(), b"x")

    def test_fail_next_and_log(self):
        self.origin.put("self-f", "f", b"abc")
        m = self.origin.mark()
        self.origin.fail_next(2, key="f")
        self.assertS3Error(lambda: self.s3.get_object(Bucket="self-f", Key="f"), 503, "SlowDown")
        retrying = origin_client(self.origin, retries={"total_max_attempts": 3,
                                                               "mode": "standard"})
        self.assertEqual(retrying.get_object(Bucket="self-f", Key="f", Range="bytes=1-",
                                             IfMatch=md5_etag(b"abc"))["Body"].read(), b"bc")
        gets = self.origin.gets("self-f", "f", since=m)
        self.assertEqual([g["status"] for g in gets], [503, 503, 206])
        self.assertEqual([g["faults"] for g in gets], [["error"], ["error"], []])
        self.assertEqual(gets[-1]["range"], "bytes=1-")
        self.assertEqual(gets[-1]["if_match"], md5_etag(b"abc"))
        self.origin.fail_next(1, status=500, code="InternalError", methods=("HEAD",), key="f")
        self.assertEqual(self.s3.get_object(Bucket="self-f", Key="f")["Body"].read(), b"abc")
        self.assertS3Error(lambda: self.s3.head_object(Bucket="self-f", Key="f"), 500, "500")
        self.assertEqual(self.origin.count(since=m, method="HEAD", key="f"), 1)

    def test_drop_and_delay(self):
        data = blob(3, 2 * MiB)
        self.origin.put("self-d", "d", data)
        self.origin.drop_next(1000, key="d")
        r = fetch_origin(self.origin, "/self-d/d")
        self.assertEqual(r.status, 200)
        self.assertFalse(r.complete, r)
        self.assertEqual(r.body, data[:1000])
        self.origin.drop_next(5000, key="d", reset=True)
        r = fetch_origin(self.origin, "/self-d/d", {"Range": "bytes=100-"})
        self.assertFalse(r.complete, r)
        self.assertEqual(r.body, data[100:100 + len(r.body)])
        self.assertLessEqual(len(r.body), 5000)
        self.origin.delay_next(700, key="d")
        t0 = time.monotonic()
        self.assertEqual(self.s3.get_object(Bucket="self-d", Key="d")["Body"].read(), data)
        self.assertGreaterEqual(time.monotonic() - t0, 0.7)
        self.origin.slow_next(256 * 1024, 100, key="d")
        t0 = time.monotonic()
        self.assertEqual(self.s3.get_object(Bucket="self-d", Key="d")["Body"].read(), data)
        self.assertGreaterEqual(time.monotonic() - t0, 0.7, "8 pieces, 100 ms apart")
        t0 = time.monotonic()
        self.s3.head_object(Bucket="self-d", Key="d")
        self.assertLess(time.monotonic() - t0, 0.5, "a GET delay must not apply to HEAD")

    def test_late_answer_at_a_gate(self):
        # late_next with a gate: the GET's version is taken when wait_request returns,
        # its answer waits for the gate; hold_next's GET is seen waiting, then answers
        # the object as it is once the gate opens.
        v1, v2 = blob(6, 5000), blob(7, 6000)
        for late in (True, False):
            self.origin.put("self-l", "l", v1)
            m, gate, got = self.origin.mark(), threading.Event(), []
            if late:
                self.origin.late_next(gate=gate, key="l")
            else:
                self.origin.hold_next(gate, key="l")
            t = threading.Thread(target=lambda: got.append(
                self.s3.get_object(Bucket="self-l", Key="l")["Body"].read()))
            t.start()
            rec = self.origin.wait_request("self-l", "l", since=m)
            self.assertTrue(rec, "the GET never came")
            self.assertFalse(rec["done"], rec)
            self.origin.put("self-l", "l", v2)
            t.join(0.3)
            self.assertEqual(got, [], "answered before its gate opened")
            gate.set()
            t.join(30)
            self.assertEqual(got, [v1 if late else v2])
        self.assertIsNone(self.origin.wait_request("self-l", "l", since=self.origin.mark(),
                                                   timeout=0.2))

    def test_unanswered_at_once(self):
        # One client's requests one after another are never unanswered together; two
        # held at once are.
        self.origin.put("self-u", "u", blob(8, 300000))
        self.origin.throttle_above(1000)
        self.addCleanup(self.origin.throttle_above, None)
        for _ in range(5):
            self.s3.get_object(Bucket="self-u", Key="u")["Body"].read()
        self.assertEqual(self.origin.max_unanswered, 1)
        gate = threading.Event()
        self.origin.hold_next(gate, n=2, key="u")
        threads = [threading.Thread(target=lambda: self.s3.get_object(
            Bucket="self-u", Key="u")["Body"].read()) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while self.origin.max_unanswered < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.set()
        for t in threads:
            t.join()
        self.assertEqual(self.origin.max_unanswered, 2)

    def test_replace_between_requests(self):
        v1, v2 = blob(4, 5000), blob(5, 6000)
        e1 = self.origin.put("self-x", "x", v1, content_type="text/a", metadata={"k": "v"})
        self.origin.replace_after("self-x", "x", v2, after_gets=1)
        self.assertEqual(self.s3.head_object(Bucket="self-x", Key="x")["ETag"], e1)
        self.assertEqual(self.s3.get_object(Bucket="self-x", Key="x")["Body"].read(), v1)
        got = self.s3.get_object(Bucket="self-x", Key="x")
        self.assertEqual(got["Body"].read(), v2)
        self.assertEqual(got["ETag"], md5_etag(v2))
        self.assertEqual((got["ContentType"], got["Metadata"]), ("text/a", {"k": "v"}))
        self.assertS3Error(lambda: self.s3.get_object(Bucket="self-x", Key="x", IfMatch=e1,
                                                      Range="bytes=0-9"), 412, "PreconditionFailed")
        h1 = self.s3.head_object(Bucket="self-x", Key="x")
        self.assertGreater(h1["LastModified"].timestamp(),
                           self.origin.get("self-x", "x").mtime - 1)

    def test_concurrent_requests(self):
        data = blob(6, MiB)
        self.origin.put("self-p", "p", data)
        errors = []

        def worker(i):
            try:
                c = origin_client(self.origin)
                a = (i * 9973) % len(data)
                r = c.get_object(Bucket="self-p", Key="p", Range="bytes=%d-%d" % (a, a + 999))
                if r["Body"].read() != data[a:a + 1000]:
                    errors.append("wrong bytes at %d" % a)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])


def fetch_origin(origin, path, headers=None):
    return fetch(origin.url, "GET", path, headers, key=ORIGIN_KEY, secret=ORIGIN_SECRET)


# ------------------------------------------------------------------ larder + fault origin


def larder_env(cache_dir, **extra):
    env = {
        "LARDER_UPSTREAM_URL": None,  # filled by start_larder
        "AWS_ACCESS_KEY_ID": ORIGIN_KEY,
        "AWS_SECRET_ACCESS_KEY": ORIGIN_SECRET,
        "LARDER_UPSTREAM_REGION": fault_origin.ORIGIN_REGION,
        "LARDER_UPSTREAM_TIMEOUT": "5",
        "LARDER_CHUNK_SIZE": "1MiB",
        "LARDER_CACHE_DIR": cache_dir,
        "LARDER_RAM_CACHE_SIZE": "64MiB",
        "LARDER_DISK_CACHE_SIZE": "64MiB",
        "LARDER_METADATA_TTL": "300",
        "LARDER_UPSTREAM_RETRIES": "3",
    }
    env.update(extra)
    return env


def start_larder(origin, env):
    env = dict(env, LARDER_UPSTREAM_URL=origin.url)
    return harness.Larder(env=env).start()


def finish_larder(testcase, larder):
    """SIGTERM; the exit code must be 0 and sanitizers silent."""
    code = larder.stop()
    san = larder.sanitizer_text()
    log = larder.log()
    larder.cleanup()
    testcase.assertEqual(code, 0, "larder exit code on SIGTERM; log tail:\n" + log[-3000:])
    testcase.assertEqual(san, "", "sanitizer reports")


def assert_origin_saw_only_signed(testcase, origin, since=0):
    for r in origin.requests(since):
        testcase.assertIsNone(r.get("auth_error"), "origin refused larder's signature on %s %s"
                              % (r["method"], r["target"]))


class FaultCase(harness.S3Asserts, unittest.TestCase):
    """One fault origin and one larder for the class; readahead off so every
    upstream request is one a reader asked for."""
    EXTRA_ENV = {"LARDER_READAHEAD": "0"}

    @classmethod
    def setUpClass(cls):
        if not os.access(harness.larder_binary(), os.X_OK):
            raise unittest.SkipTest("larder binary not built: " + harness.larder_binary())
        cls.origin = FaultOrigin().start()
        cls.origin.create_bucket(BUCKET)
        cls.cache_dir = tempfile.mkdtemp(prefix="larder-cache-")
        try:
            cls.larder = start_larder(cls.origin, larder_env(cls.cache_dir, **cls.EXTRA_ENV))
        except BaseException:
            cls.origin.stop()
            shutil.rmtree(cls.cache_dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            problems = []
            code = cls.larder.stop()
            if code != 0:
                problems.append("larder exit %r on SIGTERM; log tail:\n%s"
                                % (code, cls.larder.log()[-3000:]))
            san = cls.larder.sanitizer_text()
            if san:
                problems.append("sanitizer reports:\n" + san[:20000])
            if problems:
                raise AssertionError("\n".join(problems))
        finally:
            cls.larder.cleanup()
            cls.origin.stop()
            shutil.rmtree(cls.cache_dir, ignore_errors=True)

    def setUp(self):
        self.origin.clear_faults()

    def tearDown(self):
        self.origin.clear_faults()
        assert_origin_saw_only_signed(self, self.origin)

    def get(self, key, headers=None, method="GET", timeout=60):
        return fetch(self.larder.url, method, harness.key_path(BUCKET, key), headers,
                     timeout=timeout)

    def cache_object(self, key, data):
        """key holds data at the origin, and larder serves it as a hit."""
        self.origin.put(BUCKET, key, data)
        self.assertBody(self.get(key), data, "the first read")
        self.assertEqual(self.get(key).cache, "hit")

    def put_signed(self, key, data):
        """(status, body) of a PUT through larder, sent once (no retries)."""
        path = harness.key_path(BUCKET, key)
        h = harness.sign_headers("PUT", self.larder.url + path, harness.CLIENT_KEY,
                                 harness.CLIENT_SECRET, body=data)
        status, _, body = harness.http_request(self.larder.url, "PUT", path, h, data)
        return status, body

    def assertBody(self, r, data, what=""):
        self.assertEqual(r.status, 200, "%s %r" % (what, r))
        self.assertTrue(r.complete, "%s %r" % (what, r))
        self.assertEqual(len(r.body), len(data), what)
        self.assertTrue(r.body == data, "%s: wrong bytes (first difference at %d)"
                        % (what, first_difference(r.body, data)))

    def assertOneVersion(self, r, v1, v2):
        """r is all of v1 or v2 under that version's ETag, or cut short
        within one of them: never a mix."""
        if r.complete and r.status == 200:
            self.assertTrue(r.body in (v1, v2), "a whole answer must be one version, not a mix "
                            "(ETag %s; v1 %s, v2 %s; first chunk v1's: %s)"
                            % (r.headers.get("etag"), md5_etag(v1), md5_etag(v2),
                               r.body[:CHUNK] == v1[:CHUNK]))
            self.assertEqual(r.headers.get("etag"), md5_etag(r.body))
        else:
            self.assertTrue(v1.startswith(r.body) or v2.startswith(r.body),
                            "a cut-short answer must be a prefix of one version: %r" % r)

    def concurrently(self, n, read):
        """read(i) for i in 0..n-1, each on its own thread: their results."""
        results = [None] * n

        def run(i):
            results[i] = read(i)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    def chunk_gets(self, key, since):
        return [g for g in self.origin.gets(BUCKET, key, since)]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


class UpstreamFaults(FaultCase):

    def test_upstream_headers_too_large_to_relay(self):
        # An S3-compatible upstream may answer with more header bytes than
        # libmicrohttpd's connection pool holds beside the request (S3 itself
        # allows 2 KiB of user metadata). The client gets a 500 that says so,
        # from the cache and through the pass-through (a versionId), where it
        # got its connection closed with no answer; an answer that fits goes
        # through whole.
        data = b"y" * 1000
        for key, size in (("hdr-fits", 12 * 1024), ("hdr-huge", 40 * 1024)):
            self.origin.put(BUCKET, key, data)
            self.origin.extra_headers[(BUCKET, key)] = {"x-amz-meta-big": "v" * size}
        for method in ("GET", "HEAD"):
            for query in ("", "?versionId=null"):
                with self.subTest(method=method, query=query):
                    path = harness.key_path(BUCKET, "hdr-fits") + query
                    r = fetch(self.larder.url, method, path)
                    self.assertEqual(r.status, 200, r)
                    self.assertEqual(len(r.headers.get("x-amz-meta-big", "")), 12 * 1024)
                    if method == "GET":
                        self.assertBody(r, data)
                    path = harness.key_path(BUCKET, "hdr-huge") + query
                    r = fetch(self.larder.url, method, path)
                    self.assertEqual(r.status, 500, r)
                    self.assertTrue(r.complete, r)
                    if method == "GET":
                        code, _ = harness.s3_error(r.body)
                        self.assertEqual(code, "InternalError", r.body)
                        self.assertIn(b"headers", r.body)

    def test_access_log_says_who_ended_a_body_early(self):
        # A body larder cut (its upstream kept failing) and one the client walked away from
        # were both logged error=error.
        data = blob(15, 3 * CHUNK)
        self.origin.put(BUCKET, "cut-log", data)
        path = harness.key_path(BUCKET, "cut-log")
        r = fetch(self.larder.url, "GET", path, headers={"Range": "bytes=0-9"})
        self.assertEqual(r.status, 206, r)  # known, chunk 0 held: the answer can begin
        self.origin.fail_next(20, status=500, code="InternalError", message="x", key="cut-log")
        cut = fetch(self.larder.url, "GET", path)
        self.origin.clear_faults()
        self.assertEqual((cut.status, cut.complete), (200, False), cut)
        self.assertTrue(data.startswith(cut.body))
        big = blob(16, 24 * CHUNK)  # more than the kernel's socket buffers take at once
        self.origin.put(BUCKET, "left-log", big)
        path = harness.key_path(BUCKET, "left-log")
        self.assertBody(fetch(self.larder.url, "GET", path), big)
        h = harness.sign_headers("GET", self.larder.url + path, harness.CLIENT_KEY,
                                 harness.CLIENT_SECRET)
        c = http.client.HTTPConnection("127.0.0.1", self.larder.port, timeout=30)
        c.request("GET", path, headers=h)
        left = c.getresponse()
        self.assertEqual(left.status, 200)
        left.read(1000)
        gone_id = left.getheader("x-larder-request-id")
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        left.close()
        c.close()  # a reset
        deadline = time.monotonic() + 10
        want = {cut.headers["x-larder-request-id"]: "upstream-error",
                gone_id: ("send-error", "client-abort")}
        while time.monotonic() < deadline:
            recs = {a["id"]: a["error"] for a in self.larder.access_records() if a["id"] in want}
            if len(recs) == 2:
                break
            time.sleep(0.1)
        self.assertEqual(recs.get(cut.headers["x-larder-request-id"]), "upstream-error", recs)
        self.assertIn(recs.get(gone_id), want[gone_id], recs)

    def test_503_burst_is_retried(self):
        data = blob(10, 2 * CHUNK + 1234)
        self.origin.put(BUCKET, "burst", data)
        m = self.origin.mark()
        self.origin.fail_next(2, key="burst")
        t0 = time.monotonic()
        r = self.get("burst")
        self.assertBody(r, data, "after two 503 SlowDown")
        self.assertLess(time.monotonic() - t0, 20)
        gets = self.origin.gets(BUCKET, "burst", since=m)
        self.assertEqual(sum(1 for g in gets if g["status"] == 503), 2, gets)
        self.assertEqual(sorted(g["status"] for g in gets if g["status"] != 503), [206] * 3,
                         "one successful GET per chunk: %s" % [(g["range"], g["status"])
                                                               for g in gets])
        # A 500 InternalError is retried the same way.
        self.origin.put(BUCKET, "burst500", data[:1000])
        m = self.origin.mark()
        self.origin.fail_next(1, status=500, code="InternalError", key="burst500")
        self.assertBody(self.get("burst500"), data[:1000], "after one 500")
        self.assertEqual([g["status"] for g in self.origin.gets(BUCKET, "burst500", m)],
                         [500, 206])

    def test_retries_exhausted_is_an_s3_error(self):
        data = blob(11, 1500)
        self.origin.put(BUCKET, "exhaust", data)
        m = self.origin.mark()
        self.origin.fail_next(100, key="exhaust")
        t0 = time.monotonic()
        r = self.get("exhaust", timeout=60)
        took = time.monotonic() - t0
        self.assertEqual(r.status, 503, r)
        self.assertIn(harness.s3_error(r.body)[0], ("SlowDown", "ServiceUnavailable"), r.body[:500])
        self.assertLess(took, 30, "retries must give up in bounded time")
        attempts = self.origin.gets(BUCKET, "exhaust", since=m)
        self.assertEqual(len(attempts), 1 + 3, "LARDER_UPSTREAM_RETRIES=3: one try and three "
                         "retries; saw %s" % [a["status"] for a in attempts])
        # Nothing about the failure is remembered: the next read works.
        self.origin.clear_faults()
        self.assertBody(self.get("exhaust"), data, "after the burst ended")

    def test_answer_cut_inside_its_headers_is_an_s3_error(self):
        # Every try's answer ends after its status line (200, or 206 for the ranged
        # first read) and some headers: that is no answer, not an empty object.
        data = blob(12, 1500)
        self.origin.put(BUCKET, "cut-headers", data)
        for reset in (True, False):
            with self.subTest(reset=reset):
                m = self.origin.mark()
                self.origin.cut_headers_next(4, reset=reset, key="cut-headers")
                r = self.get("cut-headers")
                self.assertEqual((r.status, harness.s3_error(r.body)[0]),
                                 (503, "ServiceUnavailable"), r)
                self.assertEqual(len(self.origin.gets(BUCKET, "cut-headers", since=m)), 4)
                self.origin.clear_faults()
        self.assertBody(self.get("cut-headers"), data, "once the origin answers")

    def test_client_errors_are_not_retried(self):
        self.origin.put(BUCKET, "denied", b"nope")
        m = self.origin.mark()
        self.origin.fail_next(1, status=403, code="AccessDenied", message="Access Denied",
                              key="denied")
        r = self.get("denied")
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (403, "AccessDenied"), r)
        self.assertEqual(len(self.origin.gets(BUCKET, "denied", since=m)), 1)
        r = self.get("missing-key")
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (404, "NoSuchKey"), r)

    def _drop_case(self, key, data, after, reset, headers=None, want=None):
        self.origin.put(BUCKET, key, data)
        m = self.origin.mark()
        self.origin.drop_next(after, key=key, reset=reset)
        r = self.get(key, headers)
        want = data if want is None else want
        # Correct bytes, or a clean failure: never wrong bytes.
        if r.complete and r.status in (200, 206):
            self.assertTrue(r.body == want, "wrong bytes after a dropped upstream connection "
                            "(first difference at %d)" % first_difference(r.body, want))
            outcome = "recovered"
        else:
            self.assertTrue(want.startswith(r.body) or r.status not in (200, 206),
                            "a cut-short answer must be a prefix of the right bytes: %r" % r)
            if r.status is not None and r.status not in (200, 206):
                self.assertGreaterEqual(r.status, 500, r)
            outcome = "clean error"
        gets = self.origin.gets(BUCKET, key, since=m)
        self.assertTrue(gets and gets[0].get("dropped"), "the fault did not hit: %s" % gets)
        # Nothing partial was cached: the next read is right (and complete).
        again = self.get(key, headers)
        self.assertEqual(again.status, 206 if headers else 200, again)
        self.assertTrue(again.complete and again.body == want,
                        "second read after a drop is wrong: %r" % again)
        # The second read may end a few bytes into a chunk whose fetch is
        # still streaming when the answer is complete; a read meanwhile is
        # coalesced onto that fetch (x-larder-cache: miss, no new GET). Once
        # the fetch ends, the same read is a hit. Bounded wait.
        # The fetch the drop hit may also still be resuming in the background
        # for a chunk this read does not need (the first read's chunk 0, say):
        # only GETs of bytes this read wants count against it.
        lo = parse_start((headers or {}).get("Range")) or 0
        hi = lo + len(want)

        def wanted(gs):
            return [g for g in gs if (parse_start(g["range"]) or 0) < hi and
                    (g["range"] is None or parse_end(g["range"]) >= lo)]

        before = len(wanted(self.origin.gets(BUCKET, key, since=m)))
        deadline = time.monotonic() + 10
        while True:
            third = self.get(key, headers)
            self.assertTrue(third.complete and third.body == want, third)
            if third.cache == "hit" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        after = self.origin.gets(BUCKET, key, since=m)
        self.assertEqual(third.cache, "hit", "%r; upstream GETs so far: %s" % (
            third, [(g["range"], g["if_match"] is not None, g["status"], g.get("dropped"))
                    for g in after]))
        self.assertEqual(len(wanted(after)), before, "reads after the recovery went upstream: %s"
                         % [(g["range"], g["status"]) for g in after])
        return outcome, gets

    def test_connection_dropped_mid_chunk(self):
        data = blob(12, 2 * CHUNK + 777)
        outcome, gets = self._drop_case("drop-fin", data, 300000, reset=False)
        if outcome == "recovered":
            # Resumed from where the body stopped, not from the chunk start.
            resumed = [g for g in gets[1:] if g["range"] and g["range"].startswith("bytes=300000-")]
            self.assertTrue(resumed, "expected a resumed range from offset 300000: %s"
                            % [(g["range"], g["status"]) for g in gets])
            self.assertTrue(all(g["if_match"] == md5_etag(data) for g in gets[1:]),
                            "resumed ranges must carry If-Match: %s" % gets[1:])

    def test_connection_reset_mid_second_chunk(self):
        data = blob(13, 3 * CHUNK)
        rng = "bytes=%d-%d" % (CHUNK + 10, 2 * CHUNK + 10)
        self._drop_case("drop-rst", data, 200000, reset=True, headers={"Range": rng},
                        want=data[CHUNK + 10:2 * CHUNK + 11])

    def test_drop_before_any_body_byte(self):
        data = blob(14, CHUNK // 2)
        self._drop_case("drop-zero", data, 0, reset=False)

    def test_small_object_dropped_midway(self):
        # At most 256 KiB in one chunk: the answer waits for all its bytes
        # and goes out as one iovec over the chunk (cread_small).
        data = blob(16, 200 * 1024)
        self._drop_case("drop-small", data, 70000, reset=True)

    def test_small_object_arriving_slowly_reaches_every_reader(self):
        # 200 KiB in 16 KiB pieces 100 ms apart: readers that come while it
        # fills get all of it, from the one upstream GET, as misses; none is
        # answered with the bytes that had arrived when it came. The others
        # come once the first one's GET is at the origin, 60 ms apart.
        data = blob(17, 200 * 1024)
        self.origin.put(BUCKET, "small-slow", data)
        m = self.origin.mark()
        self.origin.slow_next(16 * 1024, 100, key="small-slow")
        def staggered(i):
            if i:
                self.assertTrue(self.origin.wait_request(BUCKET, "small-slow", since=m))
                time.sleep(0.06 * i)
            return self.get("small-slow", timeout=30)
        results = self.concurrently(4, staggered)
        gets = self.origin.gets(BUCKET, "small-slow", since=m)
        for i, r in enumerate(results):
            why = "reader %d; upstream GETs %s" % (i, [(g["range"], g["body_sent"]) for g in gets])
            self.assertBody(r, data, why)
            self.assertEqual(r.cache, "miss", "waited on an upstream fetch: " + why)
        self.assertEqual(len(gets), 1, [(g["range"], g["body_sent"]) for g in gets])
        # A range of it while another fetch of it trickles in: its bytes only.
        self.origin.put(BUCKET, "small-slow2", data)
        self.origin.slow_next(16 * 1024, 25, key="small-slow2")
        r = self.get("small-slow2", {"Range": "bytes=100000-100999"})
        self.assertEqual((r.status, r.body), (206, data[100000:101000]), r)
        again = self.get("small-slow2")
        self.assertBody(again, data, "whole object after a range of it")
        deadline = time.monotonic() + 10
        while again.cache != "hit" and time.monotonic() < deadline:
            time.sleep(0.1)
            again = self.get("small-slow2")
            self.assertBody(again, data, "whole object, again")
        self.assertEqual(again.cache, "hit")

    def test_small_chunk_gives_its_bytes_as_they_come(self):
        # 200 KiB in 16 KiB pieces 200 ms apart (2.4 s in all). The fetch
        # gathers a small chunk's bytes in a copy of its own, but hands
        # what it has to readers every time its loop turns: a range of the
        # first KiB is answered once that piece is in, not once the chunk
        # is whole.
        data = blob(18, 200 * 1024)
        self.origin.put(BUCKET, "small-trickle", data)
        m = self.origin.mark()
        self.origin.slow_next(16 * 1024, 200, key="small-trickle")
        t0 = time.monotonic()
        r = self.get("small-trickle", {"Range": "bytes=0-1023"})
        took = time.monotonic() - t0
        self.assertEqual((r.status, r.body), (206, data[:1024]), r)
        gets = self.origin.gets(BUCKET, "small-trickle", since=m)
        self.assertLess(took, 1.5, "the first KiB took %.2f s; upstream GETs %s" % (
            took, [(g["range"], g["body_sent"]) for g in gets]))
        whole = self.get("small-trickle")
        self.assertBody(whole, data, "the whole object after the trickle")

    def test_whole_answer_with_a_piece_ending_at_chunk_0s_end(self):
        # A first read with x-amz-checksum-mode learns the object with one
        # whole GET, which stops once chunk 0 is full. The origin writes
        # 64 KiB pieces 30 ms apart, so a piece ends exactly where chunk 0
        # does and the bytes after it find chunk 0 full: it is complete and
        # kept all the same (a build that failed it as "no memory" answered
        # this read from a second GET of chunk 0, or with 503).
        data = blob(19, 2 * CHUNK + 4321)
        self.origin.put(BUCKET, "whole-aligned", data)
        m = self.origin.mark()
        self.origin.slow_next(64 * 1024, 30, key="whole-aligned")
        r = self.get("whole-aligned", {"x-amz-checksum-mode": "ENABLED"})
        self.assertBody(r, data, "a first read in checksum mode")
        gets = [g["range"] for g in self.origin.gets(BUCKET, "whole-aligned", since=m)]
        self.assertEqual(gets, [None, "bytes=%d-%d" % (CHUNK, 2 * CHUNK - 1),
                                "bytes=%d-%d" % (2 * CHUNK, len(data) - 1)], gets)
        again = self.get("whole-aligned", {"Range": "bytes=0-99"})
        self.assertEqual((again.status, again.body, again.cache), (206, data[:100], "hit"), again)

    def test_small_range_read_caches_its_whole_chunk(self):
        # The chunk fetch is slow (about 1 s for 1 MiB); the client wants 100
        # bytes at its start and is gone long before it ends. The chunk must
        # still be cached: the same read again makes no upstream request.
        data = blob(26, 3 * CHUNK)
        self.origin.put(BUCKET, "small-read", data)
        r = self.get("small-read", {"Range": "bytes=0-9"})  # learns the object (chunk 0)
        self.assertEqual(r.status, 206, r)
        m = self.origin.mark()
        self.origin.slow_next(64 * 1024, 60, key="small-read")
        rng = {"Range": "bytes=%d-%d" % (CHUNK + 10, CHUNK + 109)}
        r = self.get("small-read", rng)
        self.assertEqual((r.status, r.body), (206, data[CHUNK + 10:CHUNK + 110]), r)
        self.assertTrue(self.origin.wait_idle(10), "the chunk fetch never finished")
        time.sleep(0.3)
        again = self.get("small-read", rng)
        self.assertEqual((again.status, again.body), (206, data[CHUNK + 10:CHUNK + 110]))
        gets = self.origin.gets(BUCKET, "small-read", since=m)
        self.assertEqual(again.cache, "hit", "chunk 1 was not kept: %s"
                         % [(g["range"], g["status"], g["body_sent"], g.get("client_aborted"))
                            for g in gets])
        self.assertEqual(len(gets), 1, [(g["range"], g["body_sent"]) for g in gets])

    def test_object_replaced_between_chunks_is_never_mixed(self):
        v1, v2 = blob(16, 4 * CHUNK), blob(17, 4 * CHUNK)
        e1 = self.origin.put(BUCKET, "swap", v1)
        r = self.get("swap", {"Range": "bytes=0-99"})
        self.assertEqual((r.status, r.body), (206, v1[:100]), r)
        self.origin.replace_after(BUCKET, "swap", v2)
        e2 = md5_etag(v2)
        m = self.origin.mark()
        # A range only in chunks never fetched: metadata says v1 (TTL 300 s),
        # the chunk fetch carries If-Match v1 and gets 412: the answer is v2.
        rng = {"Range": "bytes=%d-%d" % (2 * CHUNK, 2 * CHUNK + 999)}
        r = self.get("swap", rng)
        if r.complete:
            self.assertEqual(r.status, 206, r)
            self.assertEqual(r.headers.get("etag"), e2, r)
            self.assertTrue(r.body == v2[2 * CHUNK:2 * CHUNK + 1000],
                            "old or mixed bytes after 412")
        else:
            # Headers (v1's) already sent when the 412 came: a clean cut, no bytes.
            self.assertEqual(r.body, b"", r)
        gets = self.origin.gets(BUCKET, "swap", since=m)
        self.assertIn(412, [g["status"] for g in gets], "expected an If-Match: v1 fetch -> 412")
        self.assertTrue(all(g["if_match"] in (e1, e2, None) for g in gets))
        r = self.get("swap", rng)
        self.assertEqual((r.status, r.complete, r.headers.get("etag")), (206, True, e2), r)
        self.assertTrue(r.body == v2[2 * CHUNK:2 * CHUNK + 1000])
        # The whole object now: v2 only, never v1's cached chunk 0.
        r = self.get("swap")
        self.assertBody(r, v2, "after the change")
        self.assertEqual(r.headers.get("etag"), e2)
        r = self.get("swap", method="HEAD")
        self.assertEqual((r.status, r.headers.get("etag")), (200, e2))

    def test_object_deleted_between_chunks_is_not_found(self):
        # The metadata says the object is there, the chunk's fetch gets S3's
        # 404: the reader learns it again and answers as S3 now does (404
        # NoSuchKey), where it answered 503 ServiceUnavailable.
        self.origin.put(BUCKET, "gone", blob(20, 3 * CHUNK))
        r = self.get("gone", {"Range": "bytes=0-99"})  # learns it (TTL 300 s)
        self.assertEqual(r.status, 206, r)
        self.origin.delete(BUCKET, "gone")  # behind larder's back
        r = self.get("gone", {"Range": "bytes=%d-%d" % (2 * CHUNK, 2 * CHUNK + 99)})
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (404, "NoSuchKey"), r)
        r = self.get("gone", method="HEAD")
        self.assertEqual(r.status, 404, r)

    def test_object_replaced_during_full_read(self):
        v1, v2 = blob(18, 3 * CHUNK), blob(19, 3 * CHUNK)
        self.origin.put(BUCKET, "swap-mid", v1)
        r = self.get("swap-mid", {"Range": "bytes=0-9"})  # chunk 0 of v1 cached
        self.assertEqual(r.status, 206, r)
        # v2 appears once chunk 1 of v1 was served: chunk 2 then gets 412.
        self.origin.replace_after(BUCKET, "swap-mid", v2, after_gets=1)
        self.assertOneVersion(self.get("swap-mid"), v1, v2)
        r = self.get("swap-mid")
        self.assertBody(r, v2, "the read after the change")
        self.assertEqual(r.headers.get("etag"), md5_etag(v2))

    def test_reader_that_learns_again_lets_go_of_its_first_fetch(self):
        # A range past chunk 0 that cannot name its chunk before the size is
        # known (a suffix) learns the object with a fetch of chunk 0 and
        # reads its own chunk meanwhile. That fetch found the object changed
        # (412) and the reader learnt it again with a second fetch, while
        # the first, still on its way, kept the reader as its owner: it told
        # a reader that had gone of its end (a use after free, which ASan
        # stops larder for).
        v1, v2 = blob(40, 3 * CHUNK), blob(41, 3 * CHUNK)
        self.origin.put(BUCKET, "relearn", v1)
        m, gate = self.origin.mark(), threading.Event()
        self.origin.late_next(gate=gate, key="relearn")  # the learning GET: v1, heard later
        self.origin.slow_next(CHUNK // 32, 50, key="relearn")  # ... and slowly (1.6 s)
        rng = {"Range": "bytes=-%d" % (2 * CHUNK - 10)}
        got = []
        t = threading.Thread(target=lambda: got.append(self.get("relearn", rng)))
        t.start()
        self.assertTrue(self.origin.wait_request(BUCKET, "relearn", since=m), "no GET came")
        self.origin.replace_after(BUCKET, "relearn", v2)  # now: chunk 1's fetch gets 412
        gate.set()
        t.join()
        r = got[0]
        self.assertEqual((r.status, r.complete, r.headers.get("etag")), (206, True, md5_etag(v2)),
                         r)
        self.assertTrue(r.body == v2[CHUNK + 10:], "old or mixed bytes")
        self.assertIn(412, [g["status"] for g in self.origin.gets(BUCKET, "relearn", since=m)])
        self.origin.wait_idle(10)  # the first fetch has ended too
        time.sleep(0.3)
        self.assertTrue(self.larder.alive(), self.larder.sanitizer_text()[:4000])
        r = self.get("relearn", rng)
        self.assertEqual((r.status, r.headers.get("etag")), (206, md5_etag(v2)), r)

    def test_range_learnt_with_its_own_chunk_is_one_version(self):
        # A range past chunk 0 learns the object with its own chunk's GET
        # (docs/cache.md, "Chunks and metadata"). When the object is replaced
        # while that GET's answer trickles in, the reader gets the version
        # that answer named, whole, as S3 gives a GET that came before a PUT;
        # the next read after the ETag changes learns the new one.
        v1, v2 = blob(42, 3 * CHUNK), blob(43, 3 * CHUNK)
        self.origin.put(BUCKET, "own-chunk", v1)
        m, gate = self.origin.mark(), threading.Event()
        self.origin.late_next(gate=gate, key="own-chunk")
        self.origin.slow_next(CHUNK // 32, 50, key="own-chunk")
        rng = {"Range": "bytes=%d-%d" % (2 * CHUNK + 10, 2 * CHUNK + 1009)}
        got = []
        t = threading.Thread(target=lambda: got.append(self.get("own-chunk", rng)))
        t.start()
        self.assertTrue(self.origin.wait_request(BUCKET, "own-chunk", since=m), "no GET came")
        self.origin.replace_after(BUCKET, "own-chunk", v2)
        gate.set()
        t.join()
        r = got[0]
        self.assertEqual((r.status, r.complete, r.headers.get("etag")), (206, True, md5_etag(v1)),
                         r)
        self.assertTrue(r.body == v1[2 * CHUNK + 10:2 * CHUNK + 1010], "mixed bytes")
        self.assertEqual([g["range"] for g in self.origin.gets(BUCKET, "own-chunk", since=m)],
                         ["bytes=%d-%d" % (2 * CHUNK, 3 * CHUNK - 1)])
        self.origin.wait_idle(10)
        # Another chunk of it now: If-Match names v1, S3 says 412, and the
        # reader learns v2 and answers with it.
        r = self.get("own-chunk", {"Range": "bytes=10-19"})
        self.assertEqual((r.status, r.headers.get("etag"), r.body), (206, md5_etag(v2), v2[10:20]))

    def test_readers_racing_writers_get_one_version_each(self):
        # Whole and ranged reads while the objects change, through larder and
        # behind its back: every answer is the version its ETag names, or a
        # cut-short prefix of it. Some answers come late and trickle, so
        # that fetches overlap the changes: a bounded version of the scratch
        # race that found the use after free above (this caught it 1 run in 3).
        keys = ["race-%d" % i for i in range(3)]
        versions, lock = {}, threading.Lock()

        def new_version(n):
            data = blob(1000 + n, int(CHUNK * (1.2 + (n % 5) * 0.3)))
            with lock:
                versions[md5_etag(data)] = data
            return data
        for i, k in enumerate(keys):
            self.origin.put(BUCKET, k, new_version(i))
        s3 = self.larder.client()
        stop = time.monotonic() + 8
        problems, counts = [], {"whole": 0, "cut": 0}

        def read(i):
            rnd = random.Random(i)
            while time.monotonic() < stop:
                k, h = rnd.choice(keys), {}
                if rnd.random() < 0.6:
                    a = rnd.randrange(0, 2 * CHUNK)
                    h["Range"] = "bytes=%d-%d" % (a, a + rnd.randrange(0, CHUNK))
                r = self.get(k, h)
                if r.status == 416 and h:  # past the end of a shorter version
                    continue
                with lock:
                    data = versions.get(r.headers.get("etag"))
                if r.status not in (200, 206) or data is None:
                    problems.append(("answer", k, h, repr(r)))
                    continue
                first, last = 0, len(data) - 1
                if r.status == 206:
                    span, total = r.headers["content-range"].split(" ")[1].split("/")
                    first, last = map(int, span.split("-"))
                    if int(total) != len(data):
                        problems.append(("size", k, h, repr(r)))
                want = data[first:last + 1]
                if r.complete and r.body == want:
                    counts["whole"] += 1
                elif not r.complete and want.startswith(r.body):
                    counts["cut"] += 1
                else:
                    problems.append(("bytes", k, h, repr(r)))

        def write():
            rnd, n = random.Random(99), 100
            while time.monotonic() < stop:
                k, data = rnd.choice(keys), new_version(n)
                # some answers trickle, so that fetches overlap the changes
                slow = rnd.choice(keys)
                self.origin.late_next(150, key=slow)
                self.origin.slow_next(CHUNK // 8, 40, key=slow)
                if n % 2:
                    self.origin.put(BUCKET, k, data)  # behind larder's back
                else:
                    s3.put_object(Bucket=BUCKET, Key=k, Body=data)
                n += 1
                time.sleep(rnd.random() * 0.2)
        threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
        threads.append(threading.Thread(target=write))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(problems[:5], [])
        self.assertGreater(counts["whole"], 20, counts)
        self.assertTrue(self.larder.alive(), self.larder.sanitizer_text()[:4000])

    def test_upload_refused_before_its_body_gets_the_refusal(self):
        # S3 may answer a refused upload before it reads the body. larder
        # then drops the rest of the client's body, and answered 400
        # IncompleteBody for the bytes it had not sent, hiding S3's 403.
        data = blob(24, 4 * MiB)
        self.origin.refuse_next(1, 403, "AccessDenied", "Access Denied", key="refused")
        with self.assertRaises(Exception) as cm:
            self.larder.client().put_object(Bucket=BUCKET, Key="refused", Body=data)
        err = cm.exception.response
        self.assertEqual((err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"]),
                         (403, "AccessDenied"), err)
        self.assertIsNone(self.origin.get(BUCKET, "refused"))

    def test_write_whose_answer_was_lost_drops_the_cached_object(self):
        # The origin stored the new bytes, then the connection went before
        # its answer: larder dropped what it knew of the key only on an
        # answer it heard, and went on serving the old object from its
        # cache (until LARDER_METADATA_TTL, or for ever with "immutable").
        v1, v2 = blob(30, 300 * 1024), blob(31, 300 * 1024)
        self.cache_object("lost-answer", v1)
        self.origin.lose_answer_next(1, key="lost-answer")
        status, body = self.put_signed("lost-answer", v2)
        self.assertGreaterEqual(status, 500, body)  # the client heard no success
        self.assertEqual(self.origin.get(BUCKET, "lost-answer").data, v2, "the origin has v2")
        self.assertBody(self.get("lost-answer"), v2, "the read after the write")

    def test_write_answered_500_drops_the_cached_object(self):
        # S3 stored the new bytes and answered 500 InternalError, which
        # tells nothing of the outcome: larder dropped the key only on a
        # 2xx or a lost answer, and went on serving the old object.
        v1, v2 = blob(32, 300 * 1024), blob(33, 300 * 1024)
        self.cache_object("answered-500", v1)
        self.origin.error_after_next(1, key="answered-500")
        status, body = self.put_signed("answered-500", v2)
        self.assertEqual(status, 500, body)
        self.assertEqual(self.origin.get(BUCKET, "answered-500").data, v2, "the origin has v2")
        self.assertBody(self.get("answered-500"), v2, "the read after the write")
        # A write S3 refused changed nothing: the object stays cached.
        self.origin.refuse_next(1, 403, key="answered-500")
        status, body = self.put_signed("answered-500", v1)
        self.assertEqual(status, 403, body)
        self.assertEqual(self.get("answered-500").cache, "hit")

    def test_aws_chunked_body_shorter_than_its_length_stores_nothing(self):
        # The aws-chunked body ended before the Content-Length the client
        # sent. larder sent the whole decoded object upstream once the
        # final chunk verified, then failed the request on the surplus
        # bytes (or the client's hang-up): S3 had stored it, and larder,
        # which heard of no success, kept serving the old object.
        from test_payload_modes import chunked_signed, signed_headers
        v1, v2 = b"version one", b"version two!"
        for surplus in (True, False):
            key = "chunked-surplus-%s" % surplus
            self.origin.put(BUCKET, key, v1)
            self.assertBody(self.get(key), v1, "the first read")
            path = harness.key_path(BUCKET, key)
            h = signed_headers(self.larder.url + path,
                               {"Content-Encoding": "aws-chunked",
                                "x-amz-decoded-content-length": str(len(v2))},
                               "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
            body = chunked_signed(v2, h)
            h["Content-Length"] = str(len(body) + 5)
            # A PUT that reaches S3 is held there until the client has its answer (or has
            # gone) and larder is done with the request: S3 then stores what it got.
            m, before, gate = self.origin.mark(), len(self.larder.access_records()), \
                threading.Event()
            self.origin.hold_next(gate, methods=("PUT",), key=key)
            head = "PUT %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (path, self.larder.port)
            head += "".join("%s: %s\r\n" % kv for kv in h.items()) + "\r\n"
            try:
                answer = harness.raw_exchange(self.larder.port, head.encode() + body,
                                              later=b"xxxxx" if surplus else None, pause=0.4,
                                              timeout=5 if surplus else 0.4)
                if surplus:
                    self.assertIn(b" 400 ", answer.split(b"\r\n")[0], answer)
                    self.assertIn(b"<Code>InvalidChunkSizeError</Code>", answer)
                deadline = time.monotonic() + 30
                while not [a for a in self.larder.access_records()[before:]
                           if a.get("method") == "PUT" and a.get("key") == key]:
                    self.assertLess(time.monotonic(), deadline, "larder never logged the PUT")
                    time.sleep(0.05)
                # What larder sent S3 before it ended the request has come in by now: every
                # request the origin serves is over or held at the gate.
                def settled():
                    with self.origin.lock:
                        held = sum(1 for r in self.origin.log[m:]
                                   if r.get("arrived") and not r.get("done"))
                        return sum(self.origin.inflight.values()) == held
                while not settled():
                    self.assertLess(time.monotonic(), deadline, "a request to S3 never ended")
                    time.sleep(0.05)
            finally:
                gate.set()
            self.assertTrue(self.origin.wait_idle(30), "the held PUT never ended")
            self.assertEqual([(g["status"], g["faults"]) for g in
                              self.origin.requests(m, "PUT", BUCKET, key)
                              if g["status"] != "incomplete-body"], [],
                             "a body cut short by its own length went upstream whole")
            self.assertEqual(self.origin.get(BUCKET, key).data, v1,
                             "a body cut short by its own length went upstream whole")
            self.assertBody(self.get(key), v1, "the read after the refused write")

    def test_object_written_while_it_is_learnt_is_never_mixed(self):
        # The first read's GET is answered with v1, which larder hears only
        # after a PUT of v2 through larder dropped what it was learning: the
        # reader then learns v2, and must not serve v1's chunk 0 under it.
        v1, v2 = blob(20, 3 * CHUNK), blob(21, 3 * CHUNK)
        self.origin.put(BUCKET, "learnt", v1)
        m, gate = self.origin.mark(), threading.Event()
        self.origin.late_next(gate=gate, key="learnt")
        res = {}
        reader = threading.Thread(target=lambda: res.setdefault("r", self.get("learnt")))
        reader.start()
        self.assertTrue(self.origin.wait_request(BUCKET, "learnt", since=m), "no GET came")
        self.larder.client().put_object(Bucket=BUCKET, Key="learnt", Body=v2)
        gate.set()
        reader.join(60)
        self.assertOneVersion(res["r"], v1, v2)
        r = self.get("learnt")
        self.assertBody(r, v2, "the read after the write")
        self.assertEqual(r.headers.get("etag"), md5_etag(v2))


def parse_start(rng):
    if not rng or not rng.startswith("bytes="):
        return None
    a = rng[6:].split("-")[0]
    return int(a) if a else None


def parse_end(rng):
    """Last byte of "bytes=a-b"; a huge number for "bytes=a-"."""
    b = rng[6:].split("-", 1)[1] if rng and rng.startswith("bytes=") else ""
    return int(b) if b else 1 << 62


# ------------------------------------------------------------------ NVMe tier


def seg_files(cache_dir):
    return sorted(glob.glob(os.path.join(cache_dir, "seg-*.log")))


def find_in_segments(cache_dir, needle):
    """(path, offset) of needle in a segment file, or None."""
    for p in seg_files(cache_dir):
        with open(p, "rb") as f:
            buf = f.read()
        i = buf.find(needle)
        if i >= 0:
            return p, i
    return None


def wait_on_disk(cache_dir, probes, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(find_in_segments(cache_dir, p) for p in probes):
            return True
        time.sleep(0.1)
    return False


class SlowFirstByte(FaultCase):
    """Twelve readers of one cold object coalesce on its fetches. A larder of
    its own: in UpstreamFaults, whose earlier tests fill the 64 MiB RAM tier,
    a chunk the admission policy kept out of a full tier could be gone
    before the slowest reader (ASan, a loaded machine) came to it, and that
    reader fetched it again. S3's first byte waits at a gate until all twelve
    are in (an admin API to count their connections), and larder waits for it
    as long as that takes."""

    @classmethod
    def setUpClass(cls):
        cls.EXTRA_ENV = dict(FaultCase.EXTRA_ENV, LARDER_UPSTREAM_TIMEOUT="60",
                             **harness.Larder.admin_env())
        super().setUpClass()

    def connections(self):
        return self.larder.client_connections()

    def test_slow_first_byte_coalesces_readers(self):
        data = blob(15, 4 * CHUNK)
        self.origin.put(BUCKET, "slow", data)
        m, gate = self.origin.mark(), threading.Event()
        self.origin.hold_next(gate, n=4, key="slow")
        out = {}
        try:
            readers = threading.Thread(target=lambda: out.setdefault(
                "r", self.concurrently(12, lambda i: self.get("slow"))))
            readers.start()
            self.assertTrue(self.origin.wait_request(BUCKET, "slow", since=m, timeout=60),
                            "no GET came")
            deadline = time.monotonic() + 60
            while self.connections() < 12:
                self.assertLess(time.monotonic(), deadline, "the readers never all came: %d did"
                                % self.connections())
                time.sleep(0.05)
        finally:
            gate.set()
        readers.join(120)
        results = out["r"]
        gets = self.origin.gets(BUCKET, "slow", since=m)
        for i, r in enumerate(results):
            # A stuck reader's story is in larder's log and the origin's.
            why = "reader %d; upstream GETs %s; larder log tail:\n%s" % (
                i, [(g["range"], g["status"], g["body_sent"]) for g in gets],
                self.larder.log()[-6000:])
            self.assertBody(r, data, why)
            self.assertEqual(r.cache, "miss", "waited on an upstream fetch: " + why)
        self.assertEqual(sorted(parse_start(g["range"]) for g in gets),
                         [0, CHUNK, 2 * CHUNK, 3 * CHUNK],
                         "one upstream GET per chunk: %s; larder log tail:\n%s"
                         % ([g["range"] for g in gets], self.larder.log()[-4000:]))
        self.assertEqual(self.origin.count(since=m, method="HEAD", key="slow"), 0)


class NvmeCase(harness.S3Asserts, unittest.TestCase):
    """A shared origin; each test starts its own larder processes on a
    cache directory of its own (start())."""

    @classmethod
    def setUpClass(cls):
        if not os.access(harness.larder_binary(), os.X_OK):
            raise unittest.SkipTest("larder binary not built: " + harness.larder_binary())
        cls.origin = FaultOrigin().start()
        cls.origin.create_bucket(BUCKET)

    @classmethod
    def tearDownClass(cls):
        cls.origin.stop()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="larder-nvme-")
        self.cache_dir = os.path.join(self.tmp, "cache")
        self.larders = []

    def tearDown(self):
        for l in self.larders:
            l.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)
        assert_origin_saw_only_signed(self, self.origin)

    def start(self, **extra):
        larder = start_larder(self.origin, larder_env(self.cache_dir, **extra))
        self.larders.append(larder)
        return larder

    def get(self, larder, key, headers=None, method="GET"):
        return fetch(larder.url, method, harness.key_path(BUCKET, key), headers)

    def warm(self, larder, key, data):
        r = self.get(larder, key)
        self.assertEqual((r.status, r.complete), (200, True), r)
        self.assertTrue(r.body == data)
        probes = [data[i + 1000:i + 1064] for i in range(0, len(data), CHUNK)]
        listing = os.listdir(self.cache_dir) if os.path.isdir(self.cache_dir) else "no such dir"
        self.assertTrue(wait_on_disk(self.cache_dir, probes),
                        "the chunks never reached a seg-*.log file in LARDER_CACHE_DIR: %s; "
                        "larder log tail:\n%s" % (listing, larder.log()[-6000:]))


class NvmeTier(NvmeCase):
    """Restarts, corruption and unusable cache directories."""

    def test_kill9_restart_serves_hits(self):
        data = blob(20, 2 * CHUNK + 4321)
        small = blob(21, 5000)
        self.origin.put(BUCKET, "persist", data, content_type="text/x-persist",
                        metadata={"tag": "p"})
        self.origin.put(BUCKET, "persist-small", small)
        a = self.start()
        self.warm(a, "persist", data)
        self.warm(a, "persist-small", small)
        head_before = self.get(a, "persist", method="HEAD")
        a.proc.kill()
        a.proc.wait()
        m = self.origin.mark()
        t0 = time.monotonic()
        b = self.start()
        r = self.get(b, "persist")
        took = time.monotonic() - t0
        self.assertEqual(r.cache, "hit", r)
        self.assertTrue(r.body == data)
        self.assertLess(took, 10, "restart to first hit")
        r = self.get(b, "persist", {"Range": "bytes=%d-%d" % (CHUNK - 5, CHUNK + 5)})
        self.assertEqual((r.status, r.cache, r.body), (206, "hit", data[CHUNK - 5:CHUNK + 6]))
        h = self.get(b, "persist", method="HEAD")
        self.assertEqual(h.cache, "hit", h)
        for name in ("etag", "content-length", "content-type", "last-modified", "x-amz-meta-tag"):
            self.assertEqual(h.headers.get(name), head_before.headers.get(name), name)
        r = self.get(b, "persist-small")
        self.assertEqual((r.cache, r.body), ("hit", small))
        self.assertEqual(self.origin.requests(since=m), [], "origin saw requests after restart")
        finish_larder(self, b)

    def test_write_during_a_first_read_is_not_undone_by_a_restart(self):
        # The first read's GET is answered with v1, heard after a PUT of v2
        # through larder wrote its tombstone. That read's chunk 0 (with v1's
        # metadata) reaches the NVMe tier after the tombstone; it must still
        # count as older, or a restart brings v1 back (immutable metadata:
        # never revalidated).
        v1, v2 = blob(22, 5000), blob(23, 6000)
        self.origin.put(BUCKET, "undone", v1)
        a = self.start(LARDER_METADATA_TTL="immutable")
        m, gate = self.origin.mark(), threading.Event()
        self.origin.late_next(gate=gate, key="undone")
        res = {}
        reader = threading.Thread(target=lambda: res.setdefault("r", self.get(a, "undone")))
        reader.start()
        self.assertTrue(self.origin.wait_request(BUCKET, "undone", since=m), "no GET came")
        a.client().put_object(Bucket=BUCKET, Key="undone", Body=v2)
        gate.set()
        reader.join(60)
        self.assertTrue(wait_on_disk(self.cache_dir, [v1[1000:1064]]),
                        "v1's chunk 0 never reached the NVMe tier: the test proves nothing")
        finish_larder(self, a)
        b = self.start(LARDER_METADATA_TTL="immutable")
        r = self.get(b, "undone")
        self.assertEqual((r.status, r.headers.get("etag")), (200, md5_etag(v2)), r)
        self.assertTrue(r.body == v2, "the restart brought back the version a write replaced")
        finish_larder(self, b)

    def test_delete_during_a_first_read_is_not_undone_by_a_restart(self):
        # As above, but the write is a DELETE: no newer version is learnt
        # whose chunk 0 would outrank v1's on NVMe. v1's chunk 0 is claimed
        # when its answer is heard, after the DELETE's tombstone; it must
        # still count as older than the tombstone (its answer was made
        # before the DELETE), or a restart serves the deleted object.
        v1 = blob(25, 5000)
        self.origin.put(BUCKET, "deleted", v1)
        a = self.start()
        m, gate = self.origin.mark(), threading.Event()
        self.origin.late_next(gate=gate, key="deleted")
        res = {}
        reader = threading.Thread(target=lambda: res.setdefault("r", self.get(a, "deleted")))
        reader.start()
        self.assertTrue(self.origin.wait_request(BUCKET, "deleted", since=m),
                        "the read never came")
        a.client().delete_object(Bucket=BUCKET, Key="deleted")
        gate.set()
        reader.join(60)
        self.assertIn(res["r"].status, (200, 404), res["r"])
        self.assertTrue(wait_on_disk(self.cache_dir, [v1[1000:1064]]),
                        "v1's chunk 0 never reached the NVMe tier: the test proves nothing")
        a.proc.kill()
        a.proc.wait()
        b = self.start()
        r = self.get(b, "deleted")
        self.assertEqual(r.status, 404, "the restart served an object deleted through larder: %r"
                         % r)
        finish_larder(self, b)

    def test_write_in_flight_at_a_crash_is_not_undone_by_a_restart(self):
        # S3 applied a write and had not answered yet when larder died: its
        # tombstone was written only on the answer, so the restart served
        # the old object from NVMe (for ever with immutable).
        for method in ("PUT", "DELETE"):
            key = "in-flight-" + method
            v1, v2 = blob(26, 200000), blob(27, 150000)
            self.origin.put(BUCKET, key, v1)
            a = self.start(LARDER_METADATA_TTL="immutable")
            self.warm(a, key, v1)
            # S3 applies the write and answers it only once larder is dead.
            m, gate = self.origin.mark(), threading.Event()
            self.origin.answer_after_next(methods=(method,), key=key, gate=gate)
            path = harness.key_path(BUCKET, key)
            body = v2 if method == "PUT" else b""
            h = harness.sign_headers(method, a.url + path, harness.CLIENT_KEY,
                                     harness.CLIENT_SECRET, body=body)
            writer = threading.Thread(target=lambda: harness.http_request(
                a.url, method, path, h, body, timeout=60), daemon=True)
            writer.start()
            try:
                w = self.origin.wait_request(BUCKET, key, since=m, method=method, timeout=60)
                self.assertIsNotNone(w, "the write never reached the origin")
                now = self.origin.get(BUCKET, key)
                self.assertEqual(now.data if now else None, v2 if method == "PUT" else None,
                                 "the origin did not apply the write")
                a.proc.kill()
                a.proc.wait()
                self.assertEqual(self.origin.requests(m, method, BUCKET, key)[0]["status"], None,
                                 "the write was answered before larder died")
            finally:
                gate.set()
            writer.join(60)
            b = self.start(LARDER_METADATA_TTL="immutable")
            r = self.get(b, key)
            if method == "PUT":
                self.assertEqual((r.status, r.complete), (200, True), r)
                self.assertTrue(r.body == v2, "the restart served the old object")
            else:
                self.assertEqual(r.status, 404, "the restart served a deleted object: %r" % r)
            finish_larder(self, b)

    def test_sigterm_while_a_read_waits_on_s3_exits_0(self):
        # Past LARDER_SHUTDOWN_GRACE a cold read still waiting for S3's
        # first byte kept its connection suspended, and libmicrohttpd
        # aborted the process (SIGABRT) when it was stopped: no clean exit,
        # and nothing after it ran (a recording profile went unsaved).
        data = blob(34, 200000)
        self.origin.put(BUCKET, "slow-at-stop", data)
        a = self.start(LARDER_SHUTDOWN_GRACE="1")
        m = self.origin.mark()
        self.origin.delay_next(15000, key="slow-at-stop")
        res = {}
        reader = threading.Thread(target=lambda: res.setdefault(
            "r", self.get(a, "slow-at-stop")), daemon=True)
        reader.start()
        deadline = time.monotonic() + 10
        while not self.origin.gets(BUCKET, "slow-at-stop", since=m) and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        code = a.stop(timeout=12)
        took = time.monotonic() - t0
        reader.join(10)
        self.assertEqual(code, 0, "exit on SIGTERM; log tail:\n" + a.log()[-3000:])
        self.assertLess(took, 8, "the grace period is 1 s")
        self.assertNotEqual(res.get("r") and res["r"].status, 200, res)
        self.assertEqual(a.sanitizer_text(), "")

    def test_lost_tombstones_revalidate_what_is_recovered(self):
        # One damaged record in tombstones.log dropped it and every record
        # after it, and a deleted file dropped them all: the objects written
        # through larder came back from NVMe as hits of their old version.
        # Now everything recovered is revalidated before it is served.
        for damage in ("flip", "delete"):
            keys = ["lost-%s-%d" % (damage, i) for i in range(2)]
            v1, v2 = blob(28, 5000), blob(29, 6000)
            for k in keys:
                self.origin.put(BUCKET, k, v1)
            a = self.start(LARDER_METADATA_TTL="immutable")
            for k in keys:
                self.warm(a, k, v1)
            for k in keys:
                a.client().put_object(Bucket=BUCKET, Key=k, Body=v2)
            finish_larder(self, a)
            tombs = os.path.join(self.cache_dir, "tombstones.log")
            if damage == "flip":
                with open(tombs, "r+b") as f:
                    f.seek(10)
                    c = f.read(1)
                    f.seek(10)
                    f.write(bytes([c[0] ^ 1]))
            else:
                os.unlink(tombs)
            b = self.start(LARDER_METADATA_TTL="immutable")
            for k in keys:
                r = self.get(b, k)
                self.assertEqual((r.status, r.complete), (200, True), r)
                self.assertTrue(r.body == v2, "%s, %s: the old version came back" % (damage, k))
            finish_larder(self, b)

    def test_version_change_seen_by_a_412_outlives_a_restart(self):
        # An object replaced at S3 (not through larder) within its TTL: a
        # chunk fetch's 412 tells larder, which then serves the new
        # version. A restart must not bring back the old version's
        # metadata from its chunk 0 on NVMe (the new version, empty, has
        # no chunk 0 that would outrank it there).
        v1 = blob(27, 2 * CHUNK + 10)
        self.origin.put(BUCKET, "replaced", v1)
        a = self.start()
        r = self.get(a, "replaced", {"Range": "bytes=0-99"})
        self.assertEqual((r.status, r.body), (206, v1[:100]), r)
        self.assertTrue(wait_on_disk(self.cache_dir, [v1[1000:1064]]),
                        "v1's chunk 0 never reached the NVMe tier: the test proves nothing")
        v2_etag = self.origin.put(BUCKET, "replaced", b"")
        m = self.origin.mark()
        r = self.get(a, "replaced", {"Range": "bytes=%d-%d" % (CHUNK, CHUNK + 9)})
        self.assertIn(412, [g["status"] for g in self.origin.gets(BUCKET, "replaced", since=m)],
                      "no 412: the test proves nothing")
        r = self.get(a, "replaced")
        self.assertEqual((r.status, r.body, r.headers.get("etag")), (200, b"", v2_etag), r)
        a.proc.kill()
        a.proc.wait()
        b = self.start()
        r = self.get(b, "replaced", method="HEAD")
        self.assertEqual((r.status, r.headers.get("etag")), (200, v2_etag),
                         "a restart brought back the version a 412 had shown replaced: %r" % r)
        r = self.get(b, "replaced")
        self.assertEqual((r.status, r.body), (200, b""), r)
        finish_larder(self, b)

    def test_rename_through_larder_forgets_the_source(self):
        # RenameObject (directory buckets) writes its destination and
        # removes its source: a read of the source must then be S3's 404,
        # not the cached object, before and after a restart.
        data = blob(26, 5000)
        self.origin.put(BUCKET, "ren/old name", data)
        a = self.start()
        self.warm(a, "ren/old name", data)
        self.assertEqual(self.get(a, "ren/old name").cache, "hit")
        r = fetch(a.url, "PUT", harness.key_path(BUCKET, "ren/new") + "?renameObject",
                  {"x-amz-rename-source": "/%s/ren/old%%20name" % BUCKET})
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(self.origin.get(BUCKET, "ren/old name"))
        r = self.get(a, "ren/old name")
        self.assertEqual(r.status, 404, "the renamed-away object was served: %r" % r)
        r = self.get(a, "ren/new")
        self.assertEqual((r.status, r.body == data), (200, True), r)
        a.proc.kill()
        a.proc.wait()
        b = self.start()
        r = self.get(b, "ren/old name")
        self.assertEqual(r.status, 404, "a restart served the renamed-away object: %r" % r)
        finish_larder(self, b)

    def test_corrupt_byte_is_refetched(self):
        data = blob(22, 3 * CHUNK)
        self.origin.put(BUCKET, "corrupt", data)
        a = self.start()
        self.warm(a, "corrupt", data)
        finish_larder(self, a)
        probe = data[CHUNK + 5000:CHUNK + 5064]
        where = find_in_segments(self.cache_dir, probe)
        self.assertIsNotNone(where)
        path, off = where
        with open(path, "r+b") as f:
            f.seek(off + 20)
            b = f.read(1)
            f.seek(off + 20)
            f.write(bytes([b[0] ^ 0x5A]))
        m = self.origin.mark()
        b2 = self.start()
        r = self.get(b2, "corrupt")
        self.assertEqual((r.status, r.complete), (200, True), r)
        self.assertTrue(r.body == data, "corrupt bytes served (first difference at %d)"
                        % first_difference(r.body, data))
        # x-larder-cache is decided when the response starts, from what the
        # index holds; the corruption of chunk 1 shows only when it is read,
        # mid-response. What matters: correct bytes, and the refetch below.
        self.assertIn(r.cache, ("hit", "miss"), r)
        gets = self.origin.gets(BUCKET, "corrupt", since=m)
        self.assertEqual([parse_start(g["range"]) for g in gets], [CHUNK],
                         "only the corrupt chunk 1 is refetched: %s" % [g["range"] for g in gets])
        self.assertEqual(gets[0]["if_match"], md5_etag(data))
        r = self.get(b2, "corrupt")
        self.assertEqual((r.cache, r.body == data), ("hit", True))
        finish_larder(self, b2)

    def test_cache_dir_that_cannot_be_created_stops_start(self):
        blocker = os.path.join(self.tmp, "a-file")
        with open(blocker, "w") as f:
            f.write("not a directory\n")
        env = larder_env(os.path.join(blocker, "cache"))
        env["LARDER_UPSTREAM_URL"] = self.origin.url
        larder = harness.Larder(env=env)
        self.larders.append(larder)
        err = open(larder.stderr_path, "wb")
        larder.proc = subprocess.Popen([harness.larder_binary(), "serve"], env=larder.env,
                                       stdout=err, stderr=err, stdin=subprocess.DEVNULL)
        err.close()
        try:
            code = larder.proc.wait(20)
        except subprocess.TimeoutExpired:
            code = None
        self.assertIsNotNone(code, "larder kept running with an unusable LARDER_CACHE_DIR")
        self.assertNotEqual(code, 0)
        log = larder.log()
        self.assertTrue("LARDER_CACHE_DIR" in log or blocker in log,
                        "the message must name the setting or the path:\n" + log[-2000:])
        self.assertEqual(larder.sanitizer_text(), "")

    def test_disk_refusing_writes_keeps_serving(self):
        data = blob(23, 2 * CHUNK + 99)
        self.origin.put(BUCKET, "nodisk", data)
        larder = self.start(LARDER_DISK_CACHE_SIZE="512KiB", LARDER_RAM_CACHE_SIZE="2MiB")
        for i in range(3):
            r = self.get(larder, "nodisk")
            self.assertEqual((r.status, r.complete), (200, True), "read %d: %r" % (i, r))
            self.assertTrue(r.body == data, "read %d wrong bytes" % i)
            r = self.get(larder, "nodisk", {"Range": "bytes=%d-" % (CHUNK - 1)})
            self.assertEqual(r.status, 206, r)
            self.assertTrue(r.body == data[CHUNK - 1:])
        self.assertTrue(larder.alive())
        self.assertEqual(find_in_segments(self.cache_dir, data[1000:1064]), None,
                         "a chunk was written past LARDER_DISK_CACHE_SIZE")
        finish_larder(self, larder)

    def test_cache_dir_removed_while_running_keeps_serving(self):
        data = blob(24, CHUNK + 10)
        other = blob(25, 2 * CHUNK)
        self.origin.put(BUCKET, "gone1", data)
        self.origin.put(BUCKET, "gone2", other)
        larder = self.start(LARDER_RAM_CACHE_SIZE="2MiB")
        self.warm(larder, "gone1", data)
        shutil.rmtree(self.cache_dir)
        with open(self.cache_dir, "w") as f:  # the directory is now a file
            f.write("x")
        for i in range(2):
            r = self.get(larder, "gone2")
            self.assertEqual((r.status, r.complete), (200, True), r)
            self.assertTrue(r.body == other)
            r = self.get(larder, "gone1")
            self.assertEqual((r.status, r.complete), (200, True), r)
            self.assertTrue(r.body == data)
        self.assertTrue(larder.alive())
        finish_larder(self, larder)



class WriteWhoseClientLeft(NvmeCase):
    """A write whose client sent all of it and left before S3 answered: S3
    carries such a write out, so larder must let it run to S3's answer."""

    def leave_a_write(self, larder, method, key, body, query="", headers=None):
        """Sends a signed write of key with all of body, once the origin has
        it (held: hold_next) hangs up, and waits until larder has logged its
        client gone."""
        m = self.origin.mark()
        path = harness.key_path(BUCKET, key) + query
        h = harness.sign_headers(method, larder.url + path, harness.CLIENT_KEY,
                                 harness.CLIENT_SECRET, headers, body=body)
        h["Content-Length"] = str(len(body))
        s = socket.create_connection(("127.0.0.1", larder.port), timeout=10)
        s.sendall(("%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n" % (
            method, path, larder.port, "".join("%s: %s\r\n" % kv for kv in h.items())))
            .encode() + body)
        deadline = time.monotonic() + 10
        while not self.origin.count(since=m, method=method, key=key) and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertTrue(self.origin.count(since=m, method=method, key=key),
                        "the write never reached the origin")
        s.close()
        # larder saw its client go: the write goes on (server log), or, a
        # write that does not outlive its client, is done (access log).
        notice = "%s %s/%s/%s%s: its client left; the write goes on" % (
            method, self.origin.url, BUCKET, key, query)
        recs = []
        while not recs and notice not in larder.log() and time.monotonic() < deadline + 10:
            recs = [a for a in larder.access_records()
                    if a.get("method") == method and a.get("key") == key]
            time.sleep(0.02)
        if notice not in larder.log():
            self.assertEqual([a.get("error") for a in recs], ["client-gone"], recs)

    def write_line(self, larder, method, key):
        """The access-log line of the write of key that outlived its client,
        once there is one (when S3 answered it)."""
        deadline = time.monotonic() + 10
        while True:
            recs = [a for a in larder.access_records()
                    if a.get("method") == method and a.get("key") == key]
            if recs or time.monotonic() > deadline:
                self.assertEqual(len(recs), 1, recs)
                return recs[0]
            time.sleep(0.02)

    def test_a_read_after_it_lands_is_not_the_old_object(self):
        # The client of a PUT (or DELETE) left before S3 answered. larder
        # stopped the write at once and forgot the key then, before S3 had
        # stored it; a read in between learnt the old object again, and it
        # was served after the write landed (for LARDER_METADATA_TTL).
        larder = self.start()
        for method in ("PUT", "DELETE"):
            with self.subTest(method=method):
                key = "left-" + method
                v1, v2 = blob(40, 200000), blob(41, 150000)
                self.origin.put(BUCKET, key, v1)
                self.warm(larder, key, v1)
                gate = threading.Event()
                self.origin.hold_next(gate, methods=(method,), key=key)
                self.leave_a_write(larder, method, key, v2 if method == "PUT" else b"")
                r = self.get(larder, key)  # S3 has not applied it: the old object
                self.assertEqual((r.status, r.body == v1), (200, True), r)
                gate.set()
                want = v2 if method == "PUT" else None
                deadline = time.monotonic() + 10
                while (getattr(self.origin.get(BUCKET, key), "data", None) != want and
                       time.monotonic() < deadline):
                    time.sleep(0.01)
                self.assertEqual(getattr(self.origin.get(BUCKET, key), "data", None), want,
                                 "the origin did not apply the write")
                # larder hears S3's answer a moment after the origin applied it.
                while time.monotonic() < deadline:
                    r = self.get(larder, key)
                    if r.status == 404 or r.body != v1:
                        break
                    time.sleep(0.05)
                if method == "PUT":
                    self.assertEqual((r.status, r.complete), (200, True), r)
                    self.assertTrue(r.body == v2, "the old object was served after the write "
                                    "landed (%s)" % r.cache)
                else:
                    self.assertEqual(r.status, 404, "the deleted object was served: %r" % r)
                # Its access-log line says the client left, and S3's answer
                # (written when it came; it said 0 when the client left).
                line = self.write_line(larder, method, key)
                self.assertEqual((line.get("error"), line.get("upstream_status")),
                                 ("client-gone", "200" if method == "PUT" else "204"), line)
        finish_larder(self, larder)

    def test_a_rename_forgets_its_source_when_it_lands(self):
        # The same for a RenameObject (directory buckets), which removes its
        # source, named by a header: the source must be forgotten once S3
        # answered, when the client's connection (and its headers) is gone.
        larder = self.start()
        src, v1 = "left-rename/old", blob(45, 5000)
        self.origin.put(BUCKET, src, v1)
        self.warm(larder, src, v1)
        gate = threading.Event()
        self.origin.hold_next(gate, methods=("PUT",), key="left-rename/new")
        self.leave_a_write(larder, "PUT", "left-rename/new", b"", query="?renameObject",
                           headers={"x-amz-rename-source": "/%s/%s" % (BUCKET, src)})
        r = self.get(larder, src)  # S3 has not renamed it yet
        self.assertEqual((r.status, r.body == v1), (200, True), r)
        gate.set()
        deadline = time.monotonic() + 10
        while self.origin.get(BUCKET, "left-rename/new") is None and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertIsNotNone(self.origin.get(BUCKET, "left-rename/new"), "no rename upstream")
        while time.monotonic() < deadline:
            r = self.get(larder, src)
            if r.status == 404:
                break
            time.sleep(0.05)
        self.assertEqual(r.status, 404, "the renamed-away object was served: %r" % r)
        finish_larder(self, larder)

    def test_a_drain_waits_for_it(self):
        # SIGTERM while such a write waits for S3: larder exited at once,
        # its transfer cut, as if the write belonged to nobody.
        larder = self.start(LARDER_SHUTDOWN_GRACE="60")
        key, v1, v2 = "left-drain", blob(42, 5000), blob(43, 7000)
        self.origin.put(BUCKET, key, v1)
        gate = threading.Event()
        self.origin.hold_next(gate, methods=("PUT",), key=key)
        m = self.origin.mark()
        self.leave_a_write(larder, "PUT", key, v2)
        larder.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "draining for up to" not in larder.log() and time.monotonic() < deadline:
            time.sleep(0.02)
        with self.assertRaises(subprocess.TimeoutExpired, msg="larder left the write"):
            larder.proc.wait(1.5)
        gate.set()
        self.assertEqual(larder.stop(timeout=20), 0, larder.log()[-3000:])
        self.assertEqual(larder.sanitizer_text(), "")
        put = [q for q in self.origin.requests(m) if q["method"] == "PUT"]
        self.assertEqual([(q["status"], q.get("client_aborted")) for q in put], [(200, None)],
                         "S3's answer must have reached larder")

    def test_it_counts_against_max_connections(self):
        # Such a write holds what a client's request holds (its upstream
        # socket and request, its buffers) until S3 answers. It stopped
        # counting when its client's connection closed, so clients that
        # send whole writes and hang up could pile them up past
        # LARDER_MAX_CONNECTIONS.
        larder = self.start(LARDER_MAX_CONNECTIONS="1", **harness.Larder.admin_env())

        def connections(want):
            """larder_client_connections once it is want (a closed
            connection is counted until its worker sees it go)."""
            deadline = time.monotonic() + 10
            while True:
                n = larder.client_connections()
                if n == want or time.monotonic() > deadline:
                    return n
                time.sleep(0.02)

        key, other, v1 = "left-count", "left-count-other", blob(46, 5000)
        self.origin.put(BUCKET, other, v1)
        gate = threading.Event()
        self.origin.hold_next(gate, methods=("PUT",), key=key)
        try:
            self.assertEqual(connections(0), 0, "a connection before the test's")
            self.leave_a_write(larder, "PUT", key, blob(47, 6000))
            self.assertEqual(connections(1), 1, "the write its client left is not counted")
            r = self.get(larder, other)
            self.assertEqual((r.status, b"<Code>SlowDown</Code>" in r.body), (503, True),
                             "a new client was served beside the write its client left")
        finally:
            gate.set()
        self.assertEqual(connections(0), 0, "the write's end did not give its place back")
        r = self.get(larder, other)
        self.assertEqual((r.status, r.body == v1), (200, True), r)
        finish_larder(self, larder)

    def test_one_left_in_the_middle_of_its_answer_hears_it_out(self):
        # S3 answered the write (a CompleteMultipartUpload's answer goes on
        # while S3 works), and its client, not reading, hung up while larder
        # held the upstream transfer back (paused) for it. The write went on
        # without its client, but nothing unpaused it: it never heard S3's
        # end, never forgot the key (the old object was served for good),
        # and held its connection's place until the drain cut it.
        larder = self.start()
        key, v1, v2 = "left-mid-answer", blob(48, 5000), blob(49, 6000)
        total = 32 * 1024 * 1024  # past what larder's buffers and the sockets hold
        self.origin.put(BUCKET, key, v1)
        self.warm(larder, key, v1)

        def answer(method, hdrs, obj):
            if method != "PUT":
                return None  # reads are answered as usual
            self.origin.put(BUCKET, key, v2)
            head = ("HTTP/1.1 200 OK\r\nETag: \"%s\"\r\nContent-Type: application/xml\r\n"
                    "Content-Length: %d\r\n\r\n" % (hashlib.md5(v2).hexdigest(), total))
            return itertools.chain([head.encode()], (b" " * 65536 for _ in range(total // 65536)))

        self.origin.answer_raw[(BUCKET, key)] = answer
        try:
            m = self.origin.mark()
            path = harness.key_path(BUCKET, key)
            h = harness.sign_headers("PUT", larder.url + path, harness.CLIENT_KEY,
                                     harness.CLIENT_SECRET, body=v2)
            h["Content-Length"] = str(len(v2))
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(10)
            s.connect(("127.0.0.1", larder.port))
            s.sendall(("PUT %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n" % (
                path, larder.port, "".join("%s: %s\r\n" % kv for kv in h.items())))
                .encode() + v2)
            self.assertTrue(s.recv(12).startswith(b"HTTP/1.1 200"), "no answer began")
            # The origin's answer stops going out: larder holds it back.
            sent, still, deadline = -1, 0, time.monotonic() + 30
            while still < 5 and time.monotonic() < deadline:
                put = [q for q in self.origin.requests(m) if q["method"] == "PUT"]
                now = put[0].get("raw_sent", 0) if put else 0
                still = still + 1 if now == sent else 0
                sent = now
                time.sleep(0.1)
            self.assertLess(sent, total, "larder read the whole answer with its client there")
            s.close()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                r = self.get(larder, key)
                if r.body != v1:
                    break
                time.sleep(0.1)
            self.assertEqual((r.status, r.body == v2), (200, True),
                             "the old object was served after the write landed (%s)" % r.cache)
            line = self.write_line(larder, "PUT", key)
            self.assertEqual((line.get("error"), line.get("upstream_status")),
                             ("client-gone", "200"), line)
        finally:
            del self.origin.answer_raw[(BUCKET, key)]
        finish_larder(self, larder)

    def test_a_part_upload_stops_at_once(self):
        # A multipart upload's part changes no object: its client sends it
        # again or aborts the upload. It does not outlive its client, and
        # a drain does not wait for it (the origin holds it for 30 s).
        larder = self.start(LARDER_SHUTDOWN_GRACE="60", LARDER_UPSTREAM_TIMEOUT="60")
        gate = threading.Event()
        self.origin.hold_next(gate, methods=("PUT",), key="left-part")
        try:
            self.leave_a_write(larder, "PUT", "left-part", blob(44, 5000),
                               query="?partNumber=1&uploadId=up-1")
            self.assertEqual(larder.stop(timeout=15), 0, larder.log()[-3000:])
            self.assertEqual(larder.sanitizer_text(), "")
        finally:
            gate.set()


if __name__ == "__main__":
    unittest.main()
