"""The AWS Common Runtime S3 client (python3-awscrt) through larder (docs/clients.md).

The CRT is what the AWS CLI v2, boto3's CRT transfer manager, Mountpoint and
s3torchconnector read and write S3 with. The Debian package (awscrt 0.16.8)
runs under Debian's /usr/bin/python3 as clients/crt_ops.py: a multipart upload
of several parts, a parallel ranged download compared byte for byte, a ranged
GET, a missing key and a wrong secret. What current CRT versions send that
this one does not (GET ?partNumber=1 first, HEAD first with checksum
validation, If-Match on later parts, the part count from a multipart ETag,
416 with ActualObjectSize for an empty object) is sent by hand, signed as the
CRT signs it, in CrtRequests.

scripts/deps.sh installs python3-awscrt; without it the test skips, except
under CI=true, where it fails.
"""
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import xml.etree.ElementTree as ET

import harness
import test_cache_faults as tcf
from harness import CLIENT_KEY, CLIENT_SECRET, LarderCase, key_path, signed_request

MiB = 1024 * 1024
DEBIAN_PYTHON = "/usr/bin/python3"
SCRIPT = os.path.join(harness.HERE, "clients", "crt_ops.py")


def have_awscrt():
    if not os.access(DEBIAN_PYTHON, os.X_OK):
        return "%s is missing" % DEBIAN_PYTHON
    r = subprocess.run([DEBIAN_PYTHON, "-c", "import awscrt.s3"], capture_output=True)
    return None if r.returncode == 0 else "python3-awscrt is not installed for %s" % DEBIAN_PYTHON


def sha(data):
    return hashlib.sha256(data).hexdigest()


class CrtClient(LarderCase):
    """awscrt.s3.S3Client, as its users drive it."""

    @classmethod
    def setUpClass(cls):
        harness.need_client(have_awscrt(), " (scripts/deps.sh installs it)")
        if os.geteuid() != 0:
            raise unittest.SkipTest("awscrt 0.16.8 connects to port 80 whatever the Host "
                                    "header says: larder must listen there, which needs root")
        if not os.access(harness.larder_binary(), os.X_OK):
            raise unittest.SkipTest("larder binary not built: " + harness.larder_binary())
        # The CRT of this version ignores the port of the Host header and
        # connects to 80: larder listens on port 80 of an address of its own
        # in 127/8, so no other server there is in the way.
        host = "127.%d.%d.%d" % tuple(random.randrange(1, 255) for _ in range(3))
        cls.upstream = harness.Upstream().start()
        try:
            cls.larder = harness.Larder(cls.upstream, host=host, port=80).start()
        except BaseException:
            cls.upstream.cleanup()
            raise
        cls.s3 = cls.larder.client()
        cls.direct = cls.upstream.client()
        cls.tmp = tempfile.mkdtemp(prefix="larder-crt-")
        cls.bucket = "crt-client"
        cls.s3.create_bucket(Bucket=cls.bucket)
        # 3 parts of 8 MiB and a short fourth: the CRT uploads it in parts of
        # part_size and downloads it as parallel ranged GETs of that size.
        cls.data = os.urandom(3 * 8 * MiB + 12345)
        cls.src = os.path.join(cls.tmp, "big.bin")
        with open(cls.src, "wb") as f:
            f.write(cls.data)
        cls.uploaded = cls.crt_class("upload", CRT_FILE=cls.src)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)
        super().tearDownClass()

    @classmethod
    def crt_class(cls, op, **env):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LARDER_"))}
        e.update(S3_ENDPOINT=cls.larder.url, S3_BUCKET=cls.bucket, CRT_OP=op,
                 AWS_ACCESS_KEY_ID=CLIENT_KEY, AWS_SECRET_ACCESS_KEY=CLIENT_SECRET,
                 CRT_PART_SIZE=str(8 * MiB))
        e.update(env)
        r = subprocess.run([DEBIAN_PYTHON, SCRIPT], env=e, capture_output=True, timeout=180,
                           stdin=subprocess.DEVNULL)
        out = r.stdout.decode("utf-8", "replace").strip().splitlines()
        try:
            res = json.loads(out[-1])
        except (IndexError, ValueError):
            res = {"ok": False}
        res["_exit"] = r.returncode
        res["_out"] = ("--- stdout\n%s\n--- stderr\n%s\n--- larder access log (tail)\n%s"
                       % ("\n".join(out)[-3000:], r.stderr.decode("utf-8", "replace")[-3000:],
                          "\n".join(cls.larder.access_log().splitlines()[-20:])))
        return res

    def crt(self, op, **env):
        res = self.crt_class(op, **env)
        self.assertTrue(res.get("ok") and res["_exit"] == 0, res["_out"])
        return res

    def access_since(self, n):
        return self.larder.access_records()[n:]

    def test_multipart_upload(self):
        res = self.uploaded
        self.assertTrue(res.get("ok"), res["_out"])
        head = self.direct.head_object(Bucket=self.bucket, Key="big.bin")
        self.assertEqual(head["ContentLength"], len(self.data))
        self.assertTrue(head["ETag"].endswith('-4"'), "not uploaded in 4 parts: %s" % head["ETag"])
        got = self.direct.get_object(Bucket=self.bucket, Key="big.bin")["Body"].read()
        self.assertEqual(sha(got), sha(self.data))
        self.upstream.assert_signed_correctly(self)

    def test_parallel_ranged_download(self):
        n = len(self.larder.access_records())
        res = self.crt("download")
        self.assertEqual(res["length"], len(self.data), res["_out"])
        self.assertEqual(res["sha256"], sha(self.data))
        gets = [r for r in self.access_since(n) if r.get("method") == "GET"]
        self.assertGreaterEqual(len(gets), 4, "the CRT did not download in parts: %s" % gets)
        # and again, now from the cache: every part a hit, nothing upstream
        n = len(self.larder.access_records())
        mark = self.upstream.mark()
        res = self.crt("download")
        self.assertEqual(res["sha256"], sha(self.data), res["_out"])
        gets = [r for r in self.access_since(n) if r.get("method") == "GET"]
        self.assertEqual({r.get("cache") for r in gets}, {"hit"}, gets)
        self.assertEqual(self.upstream.from_larder(mark), [])

    def test_ranged_get(self):
        res = self.crt("range", CRT_RANGE="bytes=1000-8389607")
        self.assertEqual(res["status"], 206, res["_out"])
        self.assertEqual(res["length"], 8389607 - 1000 + 1)
        self.assertEqual(res["sha256"], sha(self.data[1000:8389608]))
        self.assertEqual(res["headers"].get("content-range"),
                         "bytes 1000-8389607/%d" % len(self.data))

    def test_missing_key(self):
        res = self.crt("missing")
        self.assertEqual(res["code"], "NoSuchKey", res["_out"])

    def test_wrong_secret(self):
        res = self.crt("wrong_secret")
        self.assertEqual(res["code"], "SignatureDoesNotMatch", res["_out"])


class CrtRequests(tcf.FaultCase):
    """What current CRTs send that awscrt 0.16.8 does not, by hand, through
    larder to an origin with S3's semantics (fault_origin: moto answers
    ?partNumber with the whole object). Chunks are 1 MiB here."""

    def setUp(self):
        super().setUp()
        # objects of the test's own, so each test starts cold
        self.p = self._testMethodName + "/"
        self.small = os.urandom(3000)
        self.origin.put(tcf.BUCKET, self.p + "small.bin", self.small)
        self.sizes = [2 * MiB + 1, 2 * MiB, 1000]
        self.multi = os.urandom(sum(self.sizes))
        self.multi_etag = self.origin.put(tcf.BUCKET, self.p + "multi.bin", self.multi,
                                          parts=self.sizes)
        self.origin.put(tcf.BUCKET, self.p + "empty.bin", b"")

    def path(self, key):
        return key_path(tcf.BUCKET, self.p + key)

    def part(self, key, n, method="GET", headers=None):
        return self.fetch(method, "%s?partNumber=%d" % (self.path(key), n), headers)

    def fetch(self, method, path, headers=None):
        return tcf.fetch(self.larder.url, method, path, headers)

    def part_gets(self, key, since):
        return [g for g in self.origin.gets(tcf.BUCKET, self.p + key, since)
                if "partNumber" in g["query"]]

    def assertPart(self, r, key, n, data, bounds, count=None, head=False):
        first, last = bounds
        self.assertEqual(r.status, 206, "%s part %d: %r" % (key, n, r))
        self.assertEqual(r.headers.get("content-range"),
                         "bytes %d-%d/%d" % (first, last, len(data)), r)
        self.assertEqual(r.headers.get("content-length"), str(last - first + 1), r)
        self.assertEqual(r.headers.get("x-amz-mp-parts-count"), count, r)
        self.assertEqual(r.headers.get("etag"), self.origin.get(tcf.BUCKET, self.p + key).etag,
                         r)
        if not head:
            self.assertTrue(r.body == data[first:last + 1], "%s part %d: wrong bytes" % (key, n))

    def bounds(self, n):
        first = sum(self.sizes[:n - 1])
        return first, first + self.sizes[n - 1] - 1

    def test_part_number_small_object(self):
        """A current CRT's first request for an object: GET ?partNumber=1."""
        for method in ("GET", "HEAD", "GET"):
            r = self.part("small.bin", 1, method)
            self.assertPart(r, "small.bin", 1, self.small, (0, 2999), head=method == "HEAD")

    def test_part_number_multipart(self):
        for n in (1, 2, 3):
            self.assertPart(self.part("multi.bin", n), "multi.bin", n, self.multi, self.bounds(n),
                            "3")
        self.assertPart(self.part("multi.bin", 2, "HEAD"), "multi.bin", 2, self.multi,
                        self.bounds(2), "3", head=True)
        r = self.part("multi.bin", 4)
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (416, "InvalidPartNumber"), r)
        r = self.part("multi.bin", 1, headers={"Range": "bytes=0-9"})
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (400, "InvalidRequest"), r)

    def test_part_number_from_cache(self):
        """Once a part's range is known (its first answer from upstream), the
        next GET/HEAD ?partNumber of it is the cache's, with S3's headers: a
        hit at once for a small object (its bytes came with the metadata), a
        hit once the part's chunks are in for a part of a multipart object."""
        for key, n, data, bounds, count in (("small.bin", 1, self.small, (0, 2999), None),
                                            ("multi.bin", 2, self.multi, self.bounds(2), "3")):
            first = self.part(key, n)
            self.assertPart(first, key, n, data, bounds, count)
            mark = self.origin.mark()
            # The first read's metadata fetch brings a small object's bytes
            # alongside the pass-through's answer; until that fetch lands, a
            # read joins it (a miss that sends nothing upstream). Under load it
            # can land after the client has its answer: read until the hit.
            deadline = time.monotonic() + 10
            while True:
                second = self.part(key, n)
                self.assertPart(second, key, n, data, bounds, count)
                if key != "small.bin" or second.cache == "hit" or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if key == "small.bin":
                self.assertEqual(second.cache, "hit", second)
            quiet = self.origin.mark()
            for method in ("GET", "HEAD"):
                r = self.part(key, n, method)
                self.assertPart(r, key, n, data, bounds, count, head=method == "HEAD")
                self.assertEqual(r.cache, "hit", "%s %s part %d: %r" % (method, key, n, r))
            self.assertEqual(self.part_gets(key, mark), [], "a known part went upstream")
            self.assertEqual(self.origin.requests(quiet), [], "a hit went upstream")
            # and a conditional on it as S3 evaluates one
            r = self.part(key, n, headers={"If-None-Match": first.headers["etag"]})
            self.assertEqual(r.status, 304, r)
            r = self.part(key, n, headers={"If-Match": '"0123456789abcdef0123456789abcdef"'})
            self.assertEqual((r.status, harness.s3_error(r.body)[0]), (412, "PreconditionFailed"))

    def test_head_first_then_if_match_parts(self):
        """HEAD first (checksum validation on), then ranged parts each with
        If-Match on the ETag it saw; a changed object fails the part with 412."""
        h = self.fetch("HEAD", self.path("multi.bin"))
        self.assertEqual(h.status, 200, h)
        self.assertEqual(h.headers.get("content-length"), str(len(self.multi)))
        etag = h.headers["etag"]
        self.assertEqual(etag, self.multi_etag)
        got = b""
        for first in range(0, len(self.multi), 2 * MiB):
            last = min(first + 2 * MiB, len(self.multi)) - 1
            r = self.fetch("GET", self.path("multi.bin"),
                           {"Range": "bytes=%d-%d" % (first, last), "If-Match": etag})
            self.assertEqual(r.status, 206, r)
            got += r.body
        self.assertTrue(got == self.multi, "the parts put together differ")
        r = self.fetch("GET", self.path("multi.bin"),
                       {"Range": "bytes=0-9", "If-Match": '"0123456789abcdef0123456789abcdef-3"'})
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (412, "PreconditionFailed"), r)

    def test_object_replaced_upstream_then_head_first(self):
        """The object replaced at S3 since larder learnt it (within the
        metadata TTL). A CRT validating checksums sends HEAD with the mode,
        which goes upstream (the checksums are not known) and names the new
        version; its GETs then send If-Match on that ETag. They get the new
        version: before, larder judged them against the old ETag it still
        held, so every try of the download failed with 412 until the TTL."""
        mode = {"x-amz-checksum-mode": "ENABLED"}
        r = self.fetch("GET", self.path("multi.bin"))
        self.assertEqual((r.status, r.body == self.multi), (200, True), r)
        new = os.urandom(len(self.multi) + 5)
        etag = self.origin.put(tcf.BUCKET, self.p + "multi.bin", new)
        h = self.fetch("HEAD", self.path("multi.bin"), mode)
        self.assertEqual((h.status, h.headers.get("etag")), (200, etag), h)
        self.assertEqual(h.headers.get("content-length"), str(len(new)))
        got = b""
        for first in range(0, len(new), 2 * MiB):
            last = min(first + 2 * MiB, len(new)) - 1
            r = self.fetch("GET", self.path("multi.bin"),
                           dict(mode, Range="bytes=%d-%d" % (first, last), **{"If-Match": etag}))
            self.assertEqual((r.status, r.headers.get("etag")), (206, etag), r)
            got += r.body
        self.assertTrue(got == new, "the parts put together are not the new version")

    def test_object_replaced_upstream_then_part_first(self):
        """The same for a current CRT's first request, GET ?partNumber=1 (a
        part not known yet goes upstream): it reads the size from that
        answer's Content-Range and the rest as ranges with If-Match on its
        ETag, which get the new version."""
        r = self.fetch("GET", self.path("small.bin"))
        self.assertEqual((r.status, r.body), (200, self.small), r)
        etag = self.origin.put(tcf.BUCKET, self.p + "small.bin", self.multi, parts=self.sizes)
        r = self.part("small.bin", 1)
        self.assertEqual((r.status, r.headers.get("etag")), (206, etag), r)
        got = r.body
        r = self.fetch("GET", self.path("small.bin"),
                       {"Range": "bytes=%d-" % len(got), "If-Match": etag})
        self.assertEqual((r.status, r.headers.get("etag")), (206, etag), r)
        self.assertTrue(got + r.body == self.multi, "the parts put together are not the new one")

    def test_object_deleted_upstream_then_head_first(self):
        """Deleted at S3 since larder learnt it: the HEAD with the mode that
        goes upstream gets S3's 404, and so do the reads after it, rather
        than the old object from the cache until the TTL."""
        r = self.fetch("GET", self.path("multi.bin"))
        self.assertEqual((r.status, r.body == self.multi), (200, True), r)
        self.origin.delete(tcf.BUCKET, self.p + "multi.bin")
        h = self.fetch("HEAD", self.path("multi.bin"), {"x-amz-checksum-mode": "ENABLED"})
        self.assertEqual(h.status, 404, h)
        r = self.fetch("GET", self.path("multi.bin"), {"Range": "bytes=0-9"})
        self.assertEqual((r.status, harness.s3_error(r.body)[0]), (404, "NoSuchKey"), r)

    def test_multipart_etag_carries_part_count(self):
        """A CRT reads the part count from the "-N" of a multipart ETag."""
        for method in ("HEAD", "GET", "HEAD"):
            r = self.fetch(method, self.path("multi.bin"))
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.headers.get("etag"), self.multi_etag, r)
            self.assertRegex(self.multi_etag, r'^"[0-9a-f]{32}-3"$')

    def test_empty_object_416(self):
        """A CRT's first ranged GET of an empty object gets 416; it reads the
        size from <ActualObjectSize> and finishes with an empty body."""
        for _ in range(2):  # learnt, then from the cache
            r = self.fetch("GET", self.path("empty.bin"),
                           {"Range": "bytes=0-8388607"})
            self.assertEqual(r.status, 416, r)
            root = ET.fromstring(r.body)
            self.assertEqual(root.findtext("Code"), "InvalidRange", r.body)
            self.assertEqual(root.findtext("ActualObjectSize"), "0", r.body)
            self.assertEqual(root.findtext("RangeRequested"), "bytes=0-8388607", r.body)
            self.assertEqual(r.headers.get("content-range"), "bytes */0", r)


class CrtChecksums(LarderCase):
    """x-amz-checksum-mode: ENABLED (a current CRT validating checksums sends
    HEAD first, then GETs): the object's full-object checksum headers, as S3
    gives them, on a HEAD or a whole GET; never on a range."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.bucket = "crt-checksums"
        cls.direct.create_bucket(Bucket=cls.bucket)

    def req(self, method, key, headers=None, query=""):
        return signed_request(self.larder.url, method, key_path(self.bucket, key) + query,
                              headers)

    def sums(self, r):
        return {k: v for k, v in r.headers.items() if k.startswith("x-amz-checksum-")}

    def test_checksums_learnt_from_head(self):
        data = os.urandom(300000)
        self.direct.put_object(Bucket=self.bucket, Key="obj", Body=data, ChecksumAlgorithm="CRC32")
        theirs = self.direct.head_object(Bucket=self.bucket, Key="obj", ChecksumMode="ENABLED")
        crc = theirs["ChecksumCRC32"]
        mode = {"x-amz-checksum-mode": "ENABLED"}
        # Learnt by a reader without the mode (a ranged GET, which carries no
        # checksum): none is invented for a GET with the mode. (A first reader
        # with the mode learns them: test_checksums.)
        r = self.req("GET", "obj")
        self.assertEqual((r.status, r.body == data), (200, True), r)
        r = self.req("GET", "obj", mode)
        self.assertEqual((r.status, r.cache, r.body == data), (200, "hit", True), r)
        self.assertEqual(self.sums(r), {}, r)
        # HEAD first, as a CRT validating checksums sends it: S3's headers.
        r = self.req("HEAD", "obj", mode)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sums(r).get("x-amz-checksum-crc32"), crc, r)
        mark = self.upstream.mark()
        for method in ("HEAD", "GET"):
            r = self.req(method, "obj", mode)
            self.assertEqual((r.status, r.cache), (200, "hit"), r)
            self.assertEqual(self.sums(r).get("x-amz-checksum-crc32"), crc, "%s %r" % (method, r))
        self.assertTrue(r.body == data)
        # never for a range, nor without the mode (S3 sends them only when asked)
        r = self.req("GET", "obj", dict(mode, Range="bytes=0-99"))
        self.assertEqual((r.status, r.cache, self.sums(r)), (206, "hit", {}), r)
        r = self.req("GET", "obj")
        self.assertEqual((r.status, r.cache, self.sums(r)), (200, "hit", {}), r)
        self.assertEqual(self.upstream.from_larder(mark), [], "a hit went upstream")
        # boto3 validating the checksum it is given
        got = self.s3.get_object(Bucket=self.bucket, Key="obj", ChecksumMode="ENABLED")
        self.assertEqual(got.get("ChecksumCRC32"), crc)
        self.assertTrue(got["Body"].read() == data)

    def test_object_without_checksum(self):
        plain = harness.make_s3_client(self.upstream.url, self.upstream.access_key,
                                       self.upstream.secret_key,
                                       request_checksum_calculation="when_required",
                                       user_agent_extra=harness.DIRECT_UA)
        plain.put_object(Bucket=self.bucket, Key="plain", Body=b"no checksum here")
        mode = {"x-amz-checksum-mode": "ENABLED"}
        theirs = self.direct.head_object(Bucket=self.bucket, Key="plain", ChecksumMode="ENABLED")
        self.assertNotIn("ChecksumCRC32", theirs)
        r = self.req("HEAD", "plain", mode)
        self.assertEqual((r.status, self.sums(r)), (200, {}), r)
        # learnt that there is none: the next HEAD is a hit
        r = self.req("HEAD", "plain", mode)
        self.assertEqual((r.status, r.cache, self.sums(r)), (200, "hit", {}), r)
