"""The test upstream enforces SigV4, counts requests, and the independent
verifier catches what moto does not check; the harness hands out each port
once. Runs without larder."""
import datetime
import hashlib
import threading
import unittest
from unittest import mock

import requests

import harness
import sigv4check
from harness import Upstream

SPECIAL_KEYS = ["a b.txt", "a+b", "100%", "x~y", "a//b", "dir/", "données/日本語 ü.txt",
                "k!$&'()*,:;=@", "a%2Fb", "k" * 1024]


class UpstreamEnforces(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = Upstream().start()
        cls.good = cls.up.client()
        cls.bad = cls.up.client(secret="not-the-secret")
        cls.good.create_bucket(Bucket="harness")
        cls.good.put_object(Bucket="harness", Key="obj", Body=b"hello")

    @classmethod
    def tearDownClass(cls):
        cls.up.cleanup()

    def expect(self, fn, status, code=None):
        from botocore.exceptions import ClientError
        with self.assertRaises(ClientError) as cm:
            fn()
        r = cm.exception.response
        self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], status, r)
        if code:
            self.assertEqual(r["Error"]["Code"], code, r)

    def test_correct_signature_accepted(self):
        self.assertEqual(self.good.get_object(Bucket="harness", Key="obj")["Body"].read(), b"hello")

    def test_wrong_secret_rejected_for_every_operation(self):
        b = self.bad
        ops = {
            "list_buckets": lambda: b.list_buckets(),
            "list_objects_v2": lambda: b.list_objects_v2(Bucket="harness"),
            "put_object": lambda: b.put_object(Bucket="harness", Key="obj", Body=b"x"),
            "get_object": lambda: b.get_object(Bucket="harness", Key="obj"),
            "delete_object": lambda: b.delete_object(Bucket="harness", Key="obj"),
            "create_multipart_upload": lambda: b.create_multipart_upload(Bucket="harness", Key="m"),
            "copy_object": lambda: b.copy_object(Bucket="harness", Key="c", CopySource="harness/obj"),
            "delete_objects": lambda: b.delete_objects(Bucket="harness",
                                                       Delete={"Objects": [{"Key": "obj"}]}),
            "create_bucket": lambda: b.create_bucket(Bucket="harness2"),
        }
        for name, fn in ops.items():
            with self.subTest(op=name):
                self.expect(fn, 403, "SignatureDoesNotMatch")
        self.expect(lambda: b.head_object(Bucket="harness", Key="obj"), 403)
        # nothing was changed by the rejected writes
        self.assertEqual(self.good.get_object(Bucket="harness", Key="obj")["Body"].read(), b"hello")

    def test_unknown_key_and_unsigned_rejected(self):
        other = harness.make_s3_client(self.up.url, "AKIAUNKNOWNUNKNOWN00", "x")
        self.expect(lambda: other.get_object(Bucket="harness", Key="obj"), 403, "InvalidAccessKeyId")
        r = requests.get(self.up.url + "/harness/obj", timeout=10)
        self.assertEqual(r.status_code, 403)
        # An unsigned bucket-level request makes moto's check raise KeyError
        # ('Authorization'): a 500, still a refusal.
        r = requests.get(self.up.url + "/harness?list-type=2", timeout=10)
        self.assertIn(r.status_code, (403, 500))
        self.assertNotIn(b"ListBucketResult", r.content)

    def test_request_count(self):
        m = self.up.mark()
        self.good.head_object(Bucket="harness", Key="obj")
        self.good.list_objects_v2(Bucket="harness")
        reqs = self.up.requests(m)
        self.assertEqual(len(reqs), 2, reqs)
        self.assertEqual([r["method"] for r in reqs], ["HEAD", "GET"])
        self.assertEqual(reqs[0]["status"], 200)
        self.up.assert_signed_correctly(self, m)  # direct requests are filtered out ...
        self.assertEqual(self.up.from_larder(m), [])
        for r in reqs:  # ... but each was verified as correct
            self.assertTrue(r["sig"]["ok"], r)

    def test_special_keys_round_trip_and_still_enforced(self):
        for key in SPECIAL_KEYS:
            with self.subTest(key=key[:40]):
                self.good.put_object(Bucket="harness", Key=key, Body=key.encode())
                self.assertEqual(self.good.get_object(Bucket="harness", Key=key)["Body"].read(),
                                 key.encode())
                self.expect(lambda: self.bad.get_object(Bucket="harness", Key=key), 403,
                            "SignatureDoesNotMatch")
        listed = set()
        for page in self.good.get_paginator("list_objects_v2").paginate(Bucket="harness"):
            listed.update(o["Key"] for o in page.get("Contents", []))
        for key in SPECIAL_KEYS:
            self.assertIn(key, listed)

    def test_ranged_gets_answer_as_moto_does(self):
        # The double reads a ranged GET's bytes in place (moto_upstream.py):
        # every form of range, in a small object and in one moto spools to
        # disk, answers the bytes, status and Content-Range moto would.
        small = bytes(range(256)) * 4
        big = hashlib.sha256(b"big").digest() * (20 * 1024 * 1024 // 32 + 7)
        for key, data in (("small", small), ("big", big)):
            self.good.put_object(Bucket="harness", Key=key, Body=data)
            n = len(data)
            cases = [("bytes=0-0", 0, 0), ("bytes=5-99", 5, 99), ("bytes=%d-" % (n - 3), n - 3, n - 1),
                     ("bytes=-7", n - 7, n - 1), ("bytes=10-%d" % (n * 2), 10, n - 1),
                     ("bytes=-%d" % (n * 2), 0, n - 1)]
            if n > 9 * 1024 * 1024:
                cases.append(("bytes=8388608-16777215", 8388608, 16777215))
            for spec, first, last in cases:
                with self.subTest(key=key, range=spec):
                    r = self.good.get_object(Bucket="harness", Key=key, Range=spec)
                    self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], 206)
                    self.assertEqual(r["ContentRange"], "bytes %d-%d/%d" % (first, last, n))
                    self.assertEqual(r["Body"].read(), data[first:last + 1])
            with self.subTest(key=key, range="multi"):
                r = self.good.get_object(Bucket="harness", Key=key, Range="bytes=0-1,4-5")
                self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], 200)
                self.assertEqual(r["Body"].read(), data)
            with self.subTest(key=key, range="past the end"):
                self.expect(lambda: self.good.get_object(Bucket="harness", Key=key,
                                                         Range="bytes=%d-" % n), 416, "InvalidRange")
            with self.subTest(key=key, range="whole"):
                self.assertEqual(self.good.get_object(Bucket="harness", Key=key)["Body"].read(), data)

    def test_put_etag_is_the_md5_while_the_object_is_read(self):
        # moto computes a new object's ETag reading its buffer without the lock that a GET
        # reads it under; the double takes the lock (moto_upstream.py). Unpatched, 38 of 561
        # PUTs here answered an ETag that was not the MD5 of their bytes.
        stop = threading.Event()

        def reader():
            c = self.up.client()
            while not stop.is_set():
                try:
                    c.get_object(Bucket="harness", Key="raced", Range="bytes=1000-1001")["Body"].read()
                except Exception:  # not there yet
                    pass

        readers = [threading.Thread(target=reader) for _ in range(6)]
        for t in readers:
            t.start()
        wrong = []
        try:
            for v in range(150):
                body = hashlib.sha256(b"%d" % v).digest() * 8000
                etag = self.good.put_object(Bucket="harness", Key="raced", Body=body)["ETag"]
                if etag != '"%s"' % hashlib.md5(body).hexdigest():
                    wrong.append(v)
        finally:
            stop.set()
            for t in readers:
                t.join()
        self.assertEqual(wrong, [])

    def test_not_modified_carries_last_modified(self):
        # As S3's does (moto_upstream.py puts back what werkzeug drops).
        from botocore.exceptions import ClientError
        head = self.good.head_object(Bucket="harness", Key="obj")
        lm = head["ResponseMetadata"]["HTTPHeaders"]["last-modified"]
        for op in (self.good.get_object, self.good.head_object):
            with self.subTest(op=op.__name__):
                with self.assertRaises(ClientError) as cm:
                    op(Bucket="harness", Key="obj", IfNoneMatch=head["ETag"])
                r = cm.exception.response["ResponseMetadata"]
                self.assertEqual(r["HTTPStatusCode"], 304)
                self.assertEqual(r["HTTPHeaders"].get("last-modified"), lm)
                self.assertEqual(r["HTTPHeaders"].get("etag"), head["ETag"])

    def test_verifier_flags_skewed_clock_that_moto_accepts(self):
        when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=20)
        url = self.up.url + "/harness/obj"
        h = harness.sign_headers("GET", url, self.up.access_key, self.up.secret_key, when=when)
        m = self.up.mark()
        r = requests.get(url, headers=h, timeout=10)
        self.assertEqual(r.status_code, 200)  # moto does not check the clock
        rec = self.up.requests(m)[0]
        self.assertFalse(rec["sig"]["ok"])
        self.assertEqual(rec["sig"]["reason"], "request time too skewed")

    def test_verifier_flags_body_not_matching_hash_that_moto_accepts(self):
        url = self.up.url + "/harness/tampered"
        h = harness.sign_headers("PUT", url, self.up.access_key, self.up.secret_key, body=b"signed")
        m = self.up.mark()
        r = requests.put(url, headers=h, data=b"sneaky", timeout=10)
        self.assertEqual(r.status_code, 200)  # moto trusts x-amz-content-sha256
        rec = self.up.requests(m)[0]
        self.assertTrue(rec["sig"]["ok"])
        self.assertIs(rec["body_sha_ok"], False)


class MotoCanonicalUriBug(unittest.TestCase):
    """Unpatched moto rejects correctly signed requests for keys with '+',
    '%', sub-delimiters or non-ASCII; this is why moto_upstream.py fixes it."""

    @classmethod
    def setUpClass(cls):
        cls.up = Upstream(moto_canonical_uri="werkzeug").start()
        cls.good = cls.up.client()
        cls.good.create_bucket(Bucket="harness")

    @classmethod
    def tearDownClass(cls):
        cls.up.cleanup()

    def test_unpatched_moto_misjudges_encoded_keys(self):
        from botocore.exceptions import ClientError
        self.good.put_object(Bucket="harness", Key="plain key~", Body=b"ok")
        for key in ["a+b", "100%", "données/ü", "k!$&'()*,:;=@"]:
            with self.subTest(key=key):
                m = self.up.mark()
                with self.assertRaises(ClientError) as cm:
                    self.good.put_object(Bucket="harness", Key=key, Body=b"x")
                self.assertEqual(cm.exception.response["Error"]["Code"], "SignatureDoesNotMatch")
                self.assertTrue(self.up.requests(m)[0]["sig"]["ok"],
                                "the independent verifier accepts what moto rejected")


class VerifierAgreesWithBotocore(unittest.TestCase):
    def test_botocore_signatures_verify(self):
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        for key in SPECIAL_KEYS:
            with self.subTest(key=key[:40]):
                path = harness.key_path("bkt", key)
                url = "http://127.0.0.1:1" + path + "?x-id=GetObject&prefix=a%2Fb%20c"
                req = AWSRequest(method="GET", url=url, headers={"x-amz-meta-a": "  b   c "})
                req.headers["X-Amz-Content-SHA256"] = hashlib.sha256(b"").hexdigest()
                S3SigV4Auth(Credentials("AK", "SK"), "s3", "us-east-1").add_auth(req)
                hdrs = [(k, v) for k, v in req.headers.items()] + [("host", "127.0.0.1:1")]
                target = url.split("127.0.0.1:1", 1)[1]
                ok = sigv4check.verify("GET", target, hdrs, {"AK": "SK"}.get)
                self.assertTrue(ok, ok)
                self.assertFalse(sigv4check.verify("GET", target, hdrs, {"AK": "SX"}.get))
                self.assertFalse(sigv4check.verify("PUT", target, hdrs, {"AK": "SK"}.get))
                self.assertTrue(sigv4check.wire_path_is_canonical(target.split("?")[0]))


if __name__ == "__main__":
    unittest.main()


class FreePorts(unittest.TestCase):
    def test_a_port_is_handed_out_once(self):
        # The kernel may offer a port again while the process it went to has
        # not bound it yet (a cluster test's nodes take all their ports
        # before any starts): free_port must not hand it out twice.
        offered = iter([7, 7, 9])  # never offered by the kernel's ephemeral range

        class FakeSocket:
            def __init__(self, *a):
                self.port = next(offered)

            def __enter__(self):
                return self

            def __exit__(self, *a):
                return False

            def bind(self, addr):
                pass

            def getsockname(self):
                return ("127.0.0.1", self.port)

        with mock.patch.object(harness.socket, "socket", FakeSocket):
            self.assertEqual([harness.free_port(), harness.free_port()], [7, 9])
