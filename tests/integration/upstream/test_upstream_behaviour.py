"""What larder does toward its upstream, checked against a scripted S3 stand-in.

moto cannot show these: buckets in other regions (S3 answers a request signed
for the wrong region with 400 and x-amz-bucket-region), connection reuse, a
stalled or slow origin, an unreachable one. The stand-in here verifies every
request's SigV4 signature independently (botocore) for the region it says the
bucket lives in, records what arrived, and answers as S3 would.
"""
import hashlib
import http.server
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

import harness

UP_KEY, UP_SECRET = "AKIDSTANDIN", "standin/secret"
REGIONS = {"eu-bucket": "eu-west-1", "us-bucket": "us-east-1", "slow-bucket": "us-east-1",
           "eu-listed": "eu-west-1", "eu-endless": "eu-west-1"}
# Buckets in eu-west-1 whose wrong-region answer's body never ends: it comes a
# byte every 0.2 s ("eu-trickle-"), or stops after its first bytes ("eu-quiet-").
# A region is learnt per bucket, once: each test asks a bucket of its own.
SLOW_REDIRECT = ("eu-trickle-", "eu-quiet-")
for _what in ("get", "delete", "list"):
    for _how in SLOW_REDIRECT:
        REGIONS[_how + _what] = "eu-west-1"
OBJECT = bytes(range(256)) * 4096  # 1 MiB
MARKER = "delete-marker-version-1"
FRAMED = b"framed-twice-0123456789"


def expected_signature(method, path, headers, region):
    """botocore's signature for what arrived, as S3 would compute it."""
    url = "http://%s%s" % (headers["Host"], path)
    signed = [h.strip() for h in
              headers["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")]
    req = AWSRequest(method=method, url=url,
                     headers={k: v for k, v in headers.items() if k.lower() in signed})
    req.context["timestamp"] = headers["X-Amz-Date"]
    auth = S3SigV4Auth(Credentials(UP_KEY, UP_SECRET), "s3", region)
    cr = auth.canonical_request(req)
    sts = auth.string_to_sign(req, cr)
    return auth.signature(sts, req)


class StandIn(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        # A port of the runner's range (LARDER_TEST_PORTS), as the larders' are.
        super().__init__(("127.0.0.1", harness.free_port()), Handler)
        self.log = []           # (method, path, region signed for, client port, headers)
        self.lock = threading.Lock()
        self.aborted = threading.Event()
        self.list_failures = 0  # listings of eu-listed answered SlowDown before the real one
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server_address[1]

    def requests(self):
        with self.lock:
            return list(self.log)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, extra=None):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code>"
                "<Message>stand-in</Message><RequestId>STANDIN</RequestId></Error>" % code).encode()
        h = {"Content-Type": "application/xml", "x-amz-request-id": "STANDIN"}
        h.update(extra or {})
        self.reply(status, body, h)

    def handle_one(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        path = self.path
        bucket = urllib.parse.unquote(path.split("?")[0].split("/")[1])
        authz = self.headers.get("Authorization", "")
        scope_region = authz.split("Credential=")[1].split("/")[2] if "Credential=" in authz else ""
        headers = {k: v for k, v in self.headers.items()}
        with self.server.lock:
            self.server.log.append((self.command, path, scope_region, self.client_address[1],
                                    headers))
        want_region = REGIONS.get(bucket, "us-east-1")
        if bucket == "eu-listed" and self.command == "HEAD" and path == "/eu-listed":
            # HeadBucket through an endpoint that answers it for any region
            # and does not name the bucket's: only the listing can learn it.
            return self.reply(200)
        if scope_region != want_region and bucket == "eu-endless":
            return self.endless_redirect(want_region)
        if scope_region != want_region and bucket.startswith(SLOW_REDIRECT):
            return self.slow_redirect(want_region, bucket.startswith("eu-quiet-"))
        if scope_region != want_region:
            # What S3 says to a request signed for the wrong region.
            return self.error(400, "AuthorizationHeaderMalformed",
                              {"x-amz-bucket-region": want_region})
        got = authz.split("Signature=")[1]
        if got != expected_signature(self.command, path, headers, want_region):
            return self.error(403, "SignatureDoesNotMatch")
        if body and headers.get("X-Amz-Content-SHA256") not in ("UNSIGNED-PAYLOAD",
                                                                 hashlib.sha256(body).hexdigest()):
            return self.error(400, "XAmzContentSHA256Mismatch")
        if bucket == "slow-bucket":
            return self.slow()
        if path.startswith("/us-bucket/framed-"):
            return self.framed_twice(path.split("?")[0].rsplit("-", 1)[1])
        if path.startswith("/us-bucket/slowdown"):
            return self.error(503, "SlowDown")
        if path.startswith("/us-bucket/delete-marked"):
            # What S3 answers a read of a key whose newest version is a delete marker.
            return self.error(404, "NoSuchKey", {"x-amz-delete-marker": "true",
                                                 "x-amz-version-id": MARKER})
        if bucket.startswith(SLOW_REDIRECT) and self.command == "DELETE":
            self.send_response(204)
            self.send_header("x-amz-request-id", "STANDIN")
            self.end_headers()
            return
        if bucket.startswith(SLOW_REDIRECT) and "list-type=2" in path:
            return self.reply(200, ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
                                    "<Name>%s</Name><IsTruncated>false</IsTruncated><Contents>"
                                    "<Key>only</Key><Size>1</Size></Contents></ListBucketResult>"
                                    % bucket).encode(), {"Content-Type": "application/xml"})
        if bucket == "eu-listed" and "list-type=2" in path:
            with self.server.lock:
                fail = self.server.list_failures > 0
                self.server.list_failures -= fail
            if fail:
                return self.error(503, "SlowDown")
            keys = "".join("<Contents><Key>p/%d</Key><Size>%d</Size></Contents>" % (i, len(OBJECT))
                           for i in range(2))
            return self.reply(200, ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
                                    "<IsTruncated>false</IsTruncated>%s</ListBucketResult>"
                                    % keys).encode(), {"Content-Type": "application/xml"})
        etag = '"%s"' % hashlib.md5(OBJECT).hexdigest()
        h = {"ETag": etag, "Content-Type": "application/octet-stream",
             "x-amz-bucket-region": want_region, "x-amz-meta-origin": "stand-in"}
        im = self.headers.get("If-Match")
        if im and im != etag:
            return self.error(412, "PreconditionFailed")
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            a, b = int(a), min(int(b) if b else len(OBJECT) - 1, len(OBJECT) - 1)
            h["Content-Range"] = "bytes %d-%d/%d" % (a, b, len(OBJECT))
            return self.reply(206, OBJECT[a:b + 1], h)
        self.reply(200, OBJECT, h)

    def redirect_head(self, region, length=None):
        """The wrong region's answer up to its body's first bytes (a Content-Length
        only when given); the connection closes after it."""
        self.send_response(400)
        self.send_header("x-amz-bucket-region", region)
        self.send_header("Content-Type", "application/xml")
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.write(b"<Error><Code>AuthorizationHeaderMalformed</Code>")
        self.wfile.flush()

    def endless_redirect(self, region):
        """The wrong region's answer, its body going on (for 60 s at most)
        until larder hangs up."""
        end = time.monotonic() + 60
        try:
            self.redirect_head(region)
            while time.monotonic() < end:
                self.wfile.write(b"<Pad>" + b"p" * 65536 + b"</Pad>")
                self.wfile.flush()
        except OSError:
            pass

    def slow_redirect(self, region, quiet):
        """The wrong region's answer, its length a megabyte: its first bytes,
        then a byte every 0.2 s, or (quiet) nothing more, for 60 s at most
        or until larder hangs up."""
        end = time.monotonic() + 60
        try:
            self.redirect_head(region, 1 << 20)
            while time.monotonic() < end:
                time.sleep(0.2)
                if not quiet:
                    self.wfile.write(b"p")
                    self.wfile.flush()
        except OSError:
            pass

    def slow(self):
        """1 MiB at about 64 KiB every 50 ms; notices when larder hangs up."""
        self.send_response(200)
        self.send_header("Content-Length", str(len(OBJECT)))
        self.end_headers()
        try:
            for i in range(0, len(OBJECT), 65536):
                self.wfile.write(OBJECT[i:i + 65536])
                self.wfile.flush()
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            self.server.aborted.set()
            self.close_connection = True

    def framed_twice(self, how):
        """An answer whose length is stated two ways, as a broken origin or
        a box on the way may send it: curl reads the body by the
        Transfer-Encoding, or by the last of two Content-Lengths."""
        if how == "chunked":
            head = "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"
            body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(FRAMED), FRAMED)
        else:
            head = "Content-Length: 5\r\nContent-Length: %d\r\n" % len(FRAMED)
            body = FRAMED
        self.wfile.write(("HTTP/1.1 200 OK\r\nx-amz-request-id: STANDIN\r\n%s"
                          "ETag: \"framed\"\r\nConnection: close\r\n\r\n" % head).encode()
                         + body)
        self.close_connection = True

    do_GET = do_HEAD = do_PUT = do_DELETE = do_POST = handle_one


class StandInLarder:
    """A larder in front of the stand-in (cls.larder, cls.origin), both
    stopped after the class; the larder must exit cleanly."""

    @classmethod
    def tearDownClass(cls):
        code = cls.larder.stop()
        san = cls.larder.sanitizer_text()
        cls.larder.cleanup()
        cls.origin.shutdown()
        assert code == 0 and not san, "larder exit %r; sanitizers: %s" % (code, san)


class StandInCase(StandInLarder, harness.S3Asserts, unittest.TestCase):
    """A larder with EXTRA_ENV in front of the stand-in; the tests are the subclasses'."""
    CONFIG = "[bucket us-bucket]\nregion = us-east-1\n"
    EXTRA_ENV = {}

    @classmethod
    def setUpClass(cls):
        cls.origin = StandIn()
        cls.larder = harness.Larder(env=dict({
            "LARDER_UPSTREAM_URL": cls.origin.url,
            "AWS_ACCESS_KEY_ID": UP_KEY,
            "AWS_SECRET_ACCESS_KEY": UP_SECRET,
            "LARDER_UPSTREAM_REGION": "us-east-1",
            "LARDER_UPSTREAM_TIMEOUT": "3",
        }, **cls.EXTRA_ENV), config_text=cls.CONFIG).start()
        cls.s3 = cls.larder.client()

    def since(self, mark):
        return self.origin.requests()[mark:]

    def delete_marker_answers(self):
        """Three reads of a key whose newest version is a delete marker, each answered as S3
        does (404 NoSuchKey naming the marker); returns the stand-in's requests for it."""
        mark = len(self.origin.requests())
        for attempt in range(3):
            with self.subTest(attempt=attempt):
                r = harness.signed_request(self.larder.url, "GET", "/us-bucket/delete-marked")
                self.assertEqual((r.status, harness.s3_error(r.body)[0]), (404, "NoSuchKey"), r)
                self.assertEqual(r.headers.get("x-amz-delete-marker"), "true", r.headers)
                self.assertEqual(r.headers.get("x-amz-version-id"), MARKER, r.headers)
        return [q for q in self.since(mark) if q[1].startswith("/us-bucket/delete-marked")]


class UpstreamBehaviour(StandInCase):
    """404s not remembered (the default): every answer is S3's own."""

    def test_region_learnt_and_retried(self):
        mark = len(self.origin.requests())
        body = self.s3.get_object(Bucket="eu-bucket", Key="first")["Body"].read()
        self.assertEqual(body, OBJECT)
        seen = self.since(mark)
        self.assertEqual([r[2] for r in seen], ["us-east-1", "eu-west-1"],
                         "one wrong-region attempt, then the bucket's region")
        mark = len(self.origin.requests())
        self.s3.head_object(Bucket="eu-bucket", Key="second")
        self.assertEqual([r[2] for r in self.since(mark)], ["eu-west-1"],
                         "the region is remembered")

    def test_a_wrong_region_answer_that_never_ends(self):
        # The answer that names the bucket's region is read to its end
        # before the request goes again, signed for that region: one whose
        # body never ended held the request for as long as it came.
        mark = len(self.origin.requests())
        r = harness.signed_request(self.larder.url, "GET", "/eu-endless/obj", timeout=20)
        self.assertEqual((r.status, r.body == OBJECT), (200, True), r)
        self.assertEqual([q[2] for q in self.since(mark)], ["us-east-1", "eu-west-1"])

    def test_upstream_connections_reused(self):
        mark = len(self.origin.requests())
        for i in range(12):
            self.s3.get_object(Bucket="us-bucket", Key="k%d" % i)["Body"].read()
        ports = {r[3] for r in self.since(mark)}
        # Two workers, each with its own connection cache.
        self.assertLessEqual(len(ports), 2, ports)

    def test_headers_forwarded_and_hop_by_hop_dropped(self):
        mark = len(self.origin.requests())
        # A versioned read is passed through (not answered from the cache):
        # the client's own headers travel upstream.
        url = "%s/us-bucket/hdrs?versionId=v1" % self.larder.url
        h = harness.sign_headers("GET", url, harness.CLIENT_KEY, harness.CLIENT_SECRET,
                                 {"x-amz-meta-a": "1", "Range": "bytes=0-9",
                                  "If-None-Match": '"zz"'})
        h["Connection"] = "keep-alive"
        h["Proxy-Authorization"] = "Basic c2VjcmV0"
        h["TE"] = "trailers"
        status, rh, _ = harness.http_request(self.larder.url, "GET", "/us-bucket/hdrs?versionId=v1",
                                             h)
        self.assertEqual(status, 206)
        self.assertEqual(rh.get("x-larder-cache"), "bypass")
        self.assertEqual(rh.get("x-amz-meta-origin"), "stand-in")
        self.assertIn("x-larder-request-id", rh)
        got = {k.lower(): v for k, v in self.since(mark)[-1][4].items()}
        self.assertEqual(got.get("x-amz-meta-a"), "1")
        self.assertEqual(got.get("range"), "bytes=0-9")
        self.assertEqual(got.get("if-none-match"), '"zz"')
        for dropped in ("proxy-authorization", "te"):
            self.assertNotIn(dropped, got)
        self.assertTrue(got["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDSTANDIN/"))

    def test_upstream_error_passes_through(self):
        status, rh, body = harness.http_request(
            self.larder.url, "GET", "/us-bucket/slowdown",
            harness.sign_headers("GET", self.larder.url + "/us-bucket/slowdown",
                                 harness.CLIENT_KEY, harness.CLIENT_SECRET))
        self.assertEqual(status, 503)
        self.assertEqual(harness.s3_error(body), ("SlowDown", "STANDIN"))
        self.assertEqual(rh.get("x-amz-request-id"), "STANDIN")

    def test_delete_marker_is_told(self):
        self.assertEqual(len(self.delete_marker_answers()), 3)

    def framed_answers(self, query):
        """larder's answer to the chunked one of the objects framed twice, checked whole, then
        its answer to the one with two Content-Lengths, checked never cut short and returned."""
        r = harness.signed_request(self.larder.url, "GET", "/us-bucket/framed-chunked" + query)
        self.assertEqual((r.status, r.body, r.complete), (200, FRAMED, True), r)
        r = harness.signed_request(self.larder.url, "GET", "/us-bucket/framed-twice" + query)
        self.assertFalse(r.complete and r.body != FRAMED,
                         "a short body delivered as the whole answer: %r" % r.body)
        return r

    def test_answer_framed_twice_is_never_cut_short(self):
        # larder took the first Content-Length for the client's answer
        # while curl read the body by the Transfer-Encoding (or the last
        # Content-Length): the client got 5 of its bytes, complete-looking.
        r = self.framed_answers("?versionId=v")  # a version: the pass-through
        self.assertEqual(r.status, 200, r)

    def test_cache_never_learns_a_size_from_an_answer_framed_twice(self):
        # A cached read learns an object from its first answer (here a 200, the whole object):
        # its size is its body's length only when the framing states one. It took the first
        # Content-Length, 5, and the read failed (503). Framed two ways, it is not cached:
        # the client gets upstream's answer as the pass-through reads it.
        r = self.framed_answers("")
        self.assertNotEqual(r.status, 503, r)
        self.assertNotEqual(r.headers.get("content-length"), "5")

    def test_client_disconnect_cancels_upstream(self):
        self.origin.aborted.clear()
        s = harness.signed_socket(self.larder, "GET", "/slow-bucket/obj")
        head = s.recv(65536)
        s.close()
        self.assertTrue(head.startswith(b"HTTP/1.1 200"), head[:300])
        # The origin needs about 0.8 s to send it all; it must see the hang-up first.
        self.assertTrue(self.origin.aborted.wait(5), "upstream transfer was not cancelled")


class SlowWrongRegionAnswer(StandInCase):
    """The wrong region's answer (400 naming x-amz-bucket-region) is read
    before the request goes again, signed for the bucket's region. It was
    read for at most 64 KiB but for any time: one whose body trickled, or
    went quiet, held the client's request until libcurl's stall rule
    (LARDER_UPSTREAM_TIMEOUT, 30 s by default) cut it, and one trickled
    faster than a byte a second to a request other than a GET for as long
    as it came. Read for at most 2 s after its headers too, the request is
    then sent again all the same: the client gets the bucket's answer in a
    few seconds, for a cached GET and for what is passed through."""
    EXTRA_ENV = {"LARDER_UPSTREAM_TIMEOUT": "30"}  # the default stall rule, said out

    def answered_soon(self, method, bucket, path):
        """larder's answer to a request of bucket, after checking it came
        within 10 s, from one wrong-region attempt and one in the bucket's."""
        mark = len(self.origin.requests())
        began = time.monotonic()
        r = harness.signed_request(self.larder.url, method, path, timeout=40)
        took = time.monotonic() - began
        self.assertLess(took, 10, "answered after %.1f s: %r" % (took, r))
        seen = [q[2] for q in self.since(mark) if q[1].split("?")[0].split("/")[1] == bucket]
        self.assertEqual(seen, ["us-east-1", "eu-west-1"],
                         "one wrong-region attempt, then the bucket's region")
        return r

    def cached_get(self, bucket):
        r = self.answered_soon("GET", bucket, "/%s/obj" % bucket)
        self.assertEqual((r.status, r.complete, r.body == OBJECT), (200, True, True), r)
        self.assertEqual(r.cache, "miss", r)  # from the cache's fetch, not passed through

    def delete(self, bucket):
        r = self.answered_soon("DELETE", bucket, "/%s/obj" % bucket)
        self.assertEqual((r.status, r.complete, r.body), (204, True, b""), r)

    def listing(self, bucket):
        r = self.answered_soon("GET", bucket, "/%s?list-type=2" % bucket)
        self.assertEqual((r.status, r.complete), (200, True), r)
        self.assertIn(b"<Key>only</Key>", r.body, r)

    def test_cached_get_trickled(self):
        self.cached_get("eu-trickle-get")

    def test_cached_get_quiet(self):
        self.cached_get("eu-quiet-get")

    def test_delete_trickled(self):
        self.delete("eu-trickle-delete")

    def test_delete_quiet(self):
        self.delete("eu-quiet-delete")

    def test_listing_trickled(self):
        self.listing("eu-trickle-list")

    def test_listing_quiet(self):
        self.listing("eu-quiet-list")


class RememberedDeleteMarker(StandInCase):
    """With 404s remembered (LARDER_NEGATIVE_TTL), a remembered delete marker is
    still told: S3's answer names it, and so must every answer given for it."""
    EXTRA_ENV = {"LARDER_NEGATIVE_TTL": "60"}

    def test_delete_marker_is_told(self):
        self.assertEqual(len(self.delete_marker_answers()), 1)


class PrefetchListing(StandInLarder, unittest.TestCase):
    """A warming job's listing is an upstream request like the others: it
    learns its bucket's region from S3's answer and retries a SlowDown."""
    TOKEN = "listing-test-token"

    @classmethod
    def setUpClass(cls):
        cls.origin = StandIn()
        cls.admin_port = harness.free_port()
        cls.larder = harness.Larder(env={
            "LARDER_UPSTREAM_URL": cls.origin.url,
            "AWS_ACCESS_KEY_ID": UP_KEY,
            "AWS_SECRET_ACCESS_KEY": UP_SECRET,
            "LARDER_UPSTREAM_REGION": "us-east-1",
            "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % cls.admin_port,
            "LARDER_ADMIN_TOKEN": cls.TOKEN,
        }).start()

    def admin(self, method, path, body=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.admin_port, path),
                                     data=json.dumps(body).encode() if body else None,
                                     method=method)
        req.add_header("Authorization", "Bearer " + self.TOKEN)
        if body:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())

    def test_listing_learns_region_and_retries(self):
        self.origin.list_failures = 1
        mark = len(self.origin.requests())
        st, r = self.admin("POST", "/admin/prefetch", {"bucket": "eu-listed", "prefix": "p/"})
        self.assertEqual(st, 202, r)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st, info = self.admin("GET", "/admin/jobs/" + r["job"])
            if info["state"] in ("done", "failed", "cancelled"):
                break
            time.sleep(0.1)
        self.assertEqual((info["state"], info["objects_done"], info["errors"]), ("done", 2, 0),
                         info)
        lists = [q[2] for q in self.origin.requests()[mark:] if "list-type=2" in q[1]]
        self.assertEqual(lists, ["us-east-1", "eu-west-1", "eu-west-1"],
                         "signed for the default region, sent again for the bucket's, "
                         "then retried after the SlowDown")


class UnreachableUpstream(harness.S3Asserts, unittest.TestCase):
    def test_unreachable_is_503(self):
        dead = harness.free_port()
        larder = harness.Larder(env={
            "LARDER_UPSTREAM_URL": "http://127.0.0.1:%d" % dead,
            "AWS_ACCESS_KEY_ID": UP_KEY, "AWS_SECRET_ACCESS_KEY": UP_SECRET,
        }).start()
        try:
            self.assertS3Error(lambda: larder.client().get_object(Bucket="any-bucket", Key="k"),
                               503, "ServiceUnavailable")
        finally:
            code = larder.stop()
            san = larder.sanitizer_text()
            larder.cleanup()
        self.assertEqual(code, 0)
        self.assertEqual(san, "")


class HungNameLookup(unittest.TestCase):
    """The upstream's name does not resolve: its DNS server never answers (a
    mount namespace whose /etc/resolv.conf names a UDP socket that reads
    nothing). A client that leaves while its request waits on the lookup must
    not stall the others on its worker: libcurl joined its resolver thread
    when larder dropped the transfer, holding the worker's loop until the
    lookup gave up (4 s here, 5 s x 2 attempts by default)."""
    LOOKUP_S = 4

    def setUp(self):
        harness.need_mount_namespace(self)
        self.tmp = tempfile.mkdtemp(prefix="larder-dns-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(self.dns.close)
        try:
            self.dns.bind(("127.0.0.2", 53))  # resolv.conf names no port
        except OSError as e:
            self.skipTest("cannot take 127.0.0.2:53 for a silent DNS server: %s" % e)
        resolv = os.path.join(self.tmp, "resolv.conf")
        with open(resolv, "w") as f:
            f.write("nameserver 127.0.0.2\noptions timeout:%d attempts:1\n" % self.LOOKUP_S)
        wrapper = harness.bind_mount_wrapper(os.path.join(self.tmp, "larder-with-silent-dns"),
                                             resolv, "/etc/resolv.conf")
        self.larder = harness.Larder(binary=wrapper, env={
            "LARDER_UPSTREAM_URL": "http://upstream.larder-dns.test:9000",
            "AWS_ACCESS_KEY_ID": UP_KEY, "AWS_SECRET_ACCESS_KEY": UP_SECRET,
            "LARDER_WORKERS": "1", "LARDER_UPSTREAM_RETRIES": "0"}).start()
        self.addCleanup(self.larder.cleanup)

    def test_a_client_leaving_a_lookup_does_not_stall_the_worker(self):
        # A pass-through (versionId): leaving cancels its transfer.
        s = harness.signed_socket(self.larder, "GET", "/any-bucket/k?versionId=null")
        time.sleep(0.5)  # its lookup has started
        s.close()
        time.sleep(0.2)
        t0 = time.monotonic()
        r = harness.signed_request(self.larder.url, "GET", "/any-bucket/k",
                                   secret="not-the-secret-0123456789", timeout=30)
        took = time.monotonic() - t0
        self.assertEqual(r.status, 403)
        self.assertLess(took, 1.5, "a request that needs no upstream waited on another's lookup")
        # A cold read's lookup (a fetch goes on for the cache when its reader leaves)
        # is dropped at the stop.
        s = harness.signed_socket(self.larder, "GET", "/any-bucket/k")
        time.sleep(0.5)
        s.close()
        t0 = time.monotonic()
        self.assertEqual(self.larder.stop(), 0)
        self.assertLess(time.monotonic() - t0, 2, "the stop waited on the lookup")
        self.assertEqual(self.larder.sanitizer_text(), "")


if __name__ == "__main__":
    unittest.main()
