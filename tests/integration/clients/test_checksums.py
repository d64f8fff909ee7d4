"""x-amz-checksum-mode: ENABLED on the first read of a cold object.

Current SDKs (boto3 since botocore 1.36, the JavaScript SDK) send the mode on
every GetObject. S3 answers a whole-object GET with the mode with the object's
x-amz-checksum-* headers (a multipart object's composite value ends in "-N",
which clients do not validate), and a range with none. larder learns such an
object with one whole-object GET (no Range) that also fills chunk 0, so the
first reader already gets S3's headers, with no HEAD and no second request for
an object of one chunk; later readers get them from the cache.
"""
import json
import os
import threading
import time

from harness import LarderCase, key_path, signed_request
from test_admin import AdminCase  # LARDER_CHUNK_SIZE 1MiB, as C here

MiB = 1 << 20
C = MiB  # LARDER_CHUNK_SIZE
MODE = {"x-amz-checksum-mode": "ENABLED"}


def sums(headers):
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-amz-checksum-")}


class FirstReadChecksums(LarderCase):
    LARDER_ENV = {"LARDER_CHUNK_SIZE": "1MiB"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.bucket = "first-read-sums"
        cls.direct.create_bucket(Bucket=cls.bucket)

    def via_larder(self, method, key, headers=None):
        return signed_request(self.larder.url, method, key_path(self.bucket, key), headers)

    def via_moto(self, method, key, headers=None):
        return signed_request(self.upstream.url, method, key_path(self.bucket, key), headers,
                              key=self.upstream.access_key, secret=self.upstream.secret_key)

    def put(self, key, data):
        self.direct.put_object(Bucket=self.bucket, Key=key, Body=data, ChecksumAlgorithm="CRC32")

    def upstream_reads(self, mark):
        return [(r["method"], dict(r["headers"]).get("range"),
                 dict(r["headers"]).get("x-amz-checksum-mode"))
                for r in self.upstream.from_larder(mark)]

    def check_first_and_second(self, key, data, method="GET"):
        theirs = self.via_moto(method, key, MODE)
        self.assertTrue(sums(theirs.headers), "moto gave no checksum: %r" % theirs)
        mark = self.upstream.mark()
        r = self.via_larder(method, key, MODE)
        self.assertEqual(r.status, 200, r)
        if method == "GET":
            self.assertTrue(r.body == data)
        self.assertEqual(sums(r.headers), sums(theirs.headers), r)
        reads = self.upstream_reads(mark)
        # one whole-object GET with the mode; never a HEAD
        self.assertEqual(reads[0], ("GET", None, "ENABLED"), reads)
        self.assertNotIn("HEAD", [m for m, _, _ in reads], reads)
        mark = self.upstream.mark()
        for m in ("GET", "HEAD"):
            r = self.via_larder(m, key, MODE)
            self.assertEqual((r.status, r.cache), (200, "hit"), r)
            self.assertEqual(sums(r.headers), sums(theirs.headers), "%s %r" % (m, r))
        self.assertEqual(self.upstream_reads(mark), [], "a hit went upstream")
        return reads

    def test_small_object_raw_get(self):
        data = os.urandom(300000)
        self.put("small", data)
        reads = self.check_first_and_second("small", data)
        self.assertEqual(len(reads), 1, reads)

    def test_small_object_head_first(self):
        """A CRT validating checksums sends HEAD first: the same one GET."""
        data = os.urandom(5000)
        self.put("small-head", data)
        reads = self.check_first_and_second("small-head", data, "HEAD")
        self.assertEqual(len(reads), 1, reads)

    def test_small_object_boto3(self):
        data = os.urandom(200000)
        self.put("boto", data)
        crc = self.direct.head_object(Bucket=self.bucket, Key="boto",
                                      ChecksumMode="ENABLED")["ChecksumCRC32"]
        mark = self.upstream.mark()
        got = self.s3.get_object(Bucket=self.bucket, Key="boto", ChecksumMode="ENABLED")
        self.assertEqual(got.get("ChecksumCRC32"), crc)
        self.assertTrue(got["Body"].read() == data)  # validated by botocore on the way
        self.assertEqual(self.upstream_reads(mark), [("GET", None, "ENABLED")])
        # boto3 without response validation: the same bytes, from the cache
        plain = self.larder.client(response_checksum_validation="when_required")
        mark = self.upstream.mark()
        self.assertTrue(plain.get_object(Bucket=self.bucket, Key="boto")["Body"].read() == data)
        self.assertEqual(self.upstream_reads(mark), [])

    def test_object_of_several_chunks(self):
        data = os.urandom(3 * C + 12345)
        self.put("big", data)
        reads = self.check_first_and_second("big", data)
        # chunk 0 from the whole GET; the others as ranges, once each
        self.assertEqual(sorted(rg for _, rg, _ in reads[1:]),
                         ["bytes=%d-%d" % (i * C, min((i + 1) * C, len(data)) - 1)
                          for i in (1, 2, 3)], reads)

    def test_multipart_object(self):
        key = "mp"
        up = self.direct.create_multipart_upload(Bucket=self.bucket, Key=key,
                                                 ChecksumAlgorithm="CRC32")
        parts = [os.urandom(5 * MiB), os.urandom(300000)]
        done = []
        for n, p in enumerate(parts, 1):
            a = self.direct.upload_part(Bucket=self.bucket, Key=key, UploadId=up["UploadId"],
                                        PartNumber=n, Body=p, ChecksumAlgorithm="CRC32")
            done.append({"PartNumber": n, "ETag": a["ETag"], "ChecksumCRC32": a["ChecksumCRC32"]})
        self.direct.complete_multipart_upload(Bucket=self.bucket, Key=key,
                                              UploadId=up["UploadId"],
                                              MultipartUpload={"Parts": done})
        data = b"".join(parts)
        self.check_first_and_second(key, data)
        theirs = self.via_moto("GET", key, MODE)
        self.assertRegex(theirs.headers.get("x-amz-checksum-crc32", ""), "-2$", theirs)
        # boto3 skips validating a composite checksum: the bytes are right
        got = self.s3.get_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        self.assertTrue(got["Body"].read() == data)

    def test_range_with_mode(self):
        """A range gets no checksum, as at S3; the object is learnt as before (a range)."""
        data = os.urandom(2 * C + 7)
        self.put("ranged", data)
        rng = dict(MODE, Range="bytes=100-199")
        theirs = self.via_moto("GET", "ranged", rng)
        self.assertEqual((theirs.status, sums(theirs.headers)), (206, {}), theirs)
        mark = self.upstream.mark()
        r = self.via_larder("GET", "ranged", rng)
        self.assertEqual((r.status, sums(r.headers), r.body), (206, {}, data[100:200]), r)
        self.assertEqual(self.upstream_reads(mark), [("GET", "bytes=0-%d" % (C - 1), None)])

    def test_coalesced_readers_all_get_them(self):
        data = os.urandom(400000)
        self.put("together", data)
        theirs = sums(self.via_moto("GET", "together", MODE).headers)
        mark = self.upstream.mark()
        out = [None] * 6

        def read(i):
            out[i] = self.via_larder("GET", "together", MODE)

        ts = [threading.Thread(target=read, args=(i,)) for i in range(len(out))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for r in out:
            self.assertEqual((r.status, sums(r.headers)), (200, theirs), r)
            self.assertTrue(r.body == data)
        self.assertEqual(self.upstream_reads(mark), [("GET", None, "ENABLED")])

    def test_without_mode_as_before(self):
        """A reader without the mode learns the object with a range; no checksum."""
        data = os.urandom(1000)
        self.put("nomode", data)
        mark = self.upstream.mark()
        r = self.via_larder("GET", "nomode")
        self.assertEqual((r.status, sums(r.headers)), (200, {}), r)
        self.assertEqual(self.upstream_reads(mark), [("GET", "bytes=0-%d" % (C - 1), None)])

    def test_empty_object(self):
        self.put("empty", b"")
        reads = self.check_first_and_second("empty", b"")
        self.assertEqual(len(reads), 1, reads)


class WarmedChecksums(AdminCase):
    """Objects a warm job learnt answer a later reader with the mode with
    S3's checksums, from the cache: the job learns a one-chunk object whole."""
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.bucket = "warmed-sums"
        cls.direct.create_bucket(Bucket=cls.bucket)

    def warm(self, body):
        st, _, doc = self.admin_json("POST", "/admin/prefetch", body=json.dumps(body))
        self.assertEqual(st, 202, doc)
        deadline = time.monotonic() + 30
        while True:
            _, _, j = self.admin_json("GET", "/admin/jobs/" + doc["job"])
            if j["state"] not in ("listing", "warming") or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(j["state"], "done", j)

    def test_warmed_objects_answer_with_their_checksums(self):
        objs = {"listed/a": os.urandom(3000), "listed/b": os.urandom(70000),
                "keyed/c": os.urandom(5000)}
        for k, v in objs.items():
            self.direct.put_object(Bucket=self.bucket, Key=k, Body=v, ChecksumAlgorithm="CRC32")
        self.warm({"bucket": self.bucket, "prefix": "listed/"})
        self.warm({"bucket": self.bucket, "keys": ["keyed/c"]})
        theirs = {k: signed_request(self.upstream.url, "GET", key_path(self.bucket, k), MODE,
                                    key=self.upstream.access_key,
                                    secret=self.upstream.secret_key) for k in objs}
        mark = self.upstream.mark()
        for k, v in objs.items():
            self.assertTrue(sums(theirs[k].headers), theirs[k])
            r = signed_request(self.larder.url, "GET", key_path(self.bucket, k), MODE)
            self.assertEqual((r.status, r.cache), (200, "hit"), r)
            self.assertTrue(r.body == v)
            self.assertEqual(sums(r.headers), sums(theirs[k].headers), k)
        self.assertEqual([x for x in self.upstream.from_larder(mark)], [], "a hit went upstream")

    def test_a_listed_object_of_several_chunks_is_still_learnt_with_ranges(self):
        data = os.urandom(C + 1000)
        self.direct.put_object(Bucket=self.bucket, Key="big/x", Body=data,
                               ChecksumAlgorithm="CRC32")
        mark = self.upstream.mark()
        self.warm({"bucket": self.bucket, "prefix": "big/"})
        gets = [(r["method"], dict(r["headers"]).get("range"))
                for r in self.upstream.from_larder(mark) if r["method"] == "GET"
                and r["target"].partition("?")[0] == key_path(self.bucket, "big/x")]
        self.assertEqual(sorted(gets), sorted([("GET", "bytes=0-%d" % (C - 1)),
                                               ("GET", "bytes=%d-%d" % (C, C + 999))]), gets)
