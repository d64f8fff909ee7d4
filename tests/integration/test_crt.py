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
import unittest
import xml.etree.ElementTree as ET

import harness
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
        missing = have_awscrt()
        if missing:
            if os.environ.get("CI") == "true":
                raise AssertionError(missing + ": scripts/deps.sh installs it")
            raise unittest.SkipTest(missing + " (scripts/deps.sh installs it)")
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
        # and again, now from the cache
        n = len(self.larder.access_records())
        res = self.crt("download")
        self.assertEqual(res["sha256"], sha(self.data), res["_out"])

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
