"""Objects larger than 4 GiB (ML datasets' multi-GB tar shards), read by range.

Against fault_origin.FaultOrigin serving synthetic objects (put_synthetic:
their bytes are computed from their offset, so 6 GiB cost no memory), with
the shipped 8 MiB chunks and small tiers (RAM 64 MiB, NVMe 128 MiB), so
chunks go through both. Every answer is checked against S3's reading of the
range: status, Content-Range, Content-Length and the bytes, cold and warm, at
2^31, 2^32 and the end; and part numbers, pass-through, a fetch resumed past
4 GiB and the access log's byte counts. Ranges only: a whole GET of 4 GiB
takes too long for the suite.
"""
import time
import unittest

import harness
from fault_origin import (BLOCK, FaultOrigin, SyntheticBytes, parse_range, synthetic_block,
                          synthetic_bytes)
from test_cache_faults import BUCKET, FaultCase, fetch, origin_client

MiB = 1024 * 1024
GiB = 1024 * MiB
SEED = b"big-objects"
SIZES = {
    "shard-4g": 4 * GiB + 12345,
    "shard-6g": 6 * GiB,
    "parts-4g": 4 * GiB + 12345,
    "no-etag-4g": 4 * GiB + 12345,
}
# parts-4g as uploaded: 1024 parts of 4 MiB, then one of 12345 bytes (past 2^32)
PARTS = [4 * MiB] * 1024 + [12345]


def ranges_of(size):
    """Range headers around 2^31, 2^32 and the end of an object of size bytes."""
    return [
        "bytes=0-9",
        "bytes=%d-%d" % (2 ** 31 - 8, 2 ** 31 + 8),
        "bytes=%d-%d" % (2 ** 31 - 1, 2 ** 31),
        "bytes=4294967290-4294967300",
        "bytes=%d-%d" % (2 ** 32 - 1, 2 ** 32),
        "bytes=%d-%d" % (2 ** 32, 2 ** 32),
        "bytes=%d-" % max(2 ** 32, size - 12345),  # open-ended, past 4 GiB
        "bytes=%d-" % (size - 1),
        "bytes=%d-%d" % (size - 5, size + 100),
        "bytes=-10",
        "bytes=-100000",
        "bytes=%d-" % size,
        "bytes=%d-" % 2 ** 33,
    ]


class SyntheticObjects(unittest.TestCase):
    """The origin's synthetic objects themselves, no larder involved."""

    def test_bytes_follow_their_offset(self):
        data = SyntheticBytes(6 * GiB, SEED)
        self.assertEqual(len(data), 6 * GiB)
        at = 2 ** 32 - 5
        piece = data[at:at + 10]  # across a block boundary
        self.assertEqual(piece, synthetic_block(SEED, at // BLOCK)[-5:]
                         + synthetic_block(SEED, at // BLOCK + 1)[:5])
        view = data[2 ** 32:]  # large: a view, not bytes
        self.assertEqual(len(view), 2 * GiB)
        self.assertEqual(view[:7], data[2 ** 32:2 ** 32 + 7])

    def test_served_with_s3_headers(self):
        origin = FaultOrigin().start()
        self.addCleanup(origin.stop)
        etag = origin.put_synthetic("self-big", "o", 4 * GiB + 12345, SEED)
        s3 = origin_client(origin)
        head = s3.head_object(Bucket="self-big", Key="o")
        self.assertEqual((head["ContentLength"], head["ETag"]), (4 * GiB + 12345, etag))
        got = s3.get_object(Bucket="self-big", Key="o", Range="bytes=-12346")
        self.assertEqual(got["ContentRange"], "bytes %d-%d/%d" % (2 ** 32 - 1, 4 * GiB + 12344,
                                                                  4 * GiB + 12345))
        self.assertEqual(got["Body"].read(), synthetic_bytes(SEED, 2 ** 32 - 1, 12346))


class BigObjects(FaultCase):
    EXTRA_ENV = {"LARDER_READAHEAD": "0", "LARDER_CHUNK_SIZE": "8MiB",
                 "LARDER_RAM_CACHE_SIZE": "64MiB", "LARDER_DISK_CACHE_SIZE": "128MiB"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for key, size in SIZES.items():
            cls.origin.put_synthetic(BUCKET, key, size, SEED,
                                     parts=PARTS if key == "parts-4g" else None)
        cls.origin.answer_etag[(BUCKET, "no-etag-4g")] = None

    def assertRange(self, key, rng, method="GET", what=""):
        """key's answer to rng is S3's: status, Content-Range, Content-Length, bytes."""
        size = SIZES[key]
        r = self.get(key, {"Range": rng} if rng else None, method=method)
        where = "%s %s %s %s: %r" % (what, method, key, rng, r)
        want = parse_range(rng, size) if rng else None
        if want == "unsatisfiable":
            self.assertEqual(r.status, 416, where)
            self.assertEqual(r.headers.get("content-range"), "bytes */%d" % size, where)
            return r
        first, last = (0, size - 1) if want is None else want
        self.assertEqual(r.status, 200 if want is None else 206, where)
        if want is not None:
            self.assertEqual(r.headers.get("content-range"),
                             "bytes %d-%d/%d" % (first, last, size), where)
        self.assertEqual(r.headers.get("content-length"), str(last - first + 1), where)
        if method == "GET":
            self.assertTrue(r.complete, where)
            self.assertTrue(r.body == synthetic_bytes(SEED, first, last - first + 1),
                            "wrong bytes: " + where)
        return r

    def test_ranges_around_2_31_2_32_and_the_end_cold_and_warm(self):
        for key in ("shard-4g", "shard-6g"):
            for what in ("cold", "warm"):
                for rng in ranges_of(SIZES[key]):
                    self.assertRange(key, rng, "HEAD", what)
                    self.assertRange(key, rng, "GET", what)
            self.assertRange(key, None, "HEAD")

    def test_a_range_read_again_is_a_hit_with_nothing_upstream(self):
        rng = "bytes=%d-%d" % (2 ** 32 - 3, 2 ** 32 + 3)
        self.assertRange("shard-6g", rng)
        # the answer went out with the first bytes of chunk 512: the rest
        # may still be on its way (a read meanwhile is a miss), and chunk
        # 511, whose last 3 bytes it starts with, is filled as two parts
        # (a range deep in it), its start asked for just after
        deadline, seen = time.monotonic() + 20, -1
        while seen != self.origin.mark() and time.monotonic() < deadline:
            seen = self.origin.mark()
            self.assertTrue(self.origin.wait_idle(10))
            time.sleep(0.5)
        mark = self.origin.mark()
        r = self.assertRange("shard-6g", rng)
        self.assertEqual(r.cache, "hit", r)
        self.assertEqual(self.origin.gets(BUCKET, "shard-6g", since=mark), [])

    def part(self, n, method):
        path = harness.key_path(BUCKET, "parts-4g") + "?partNumber=%d" % n
        return fetch(self.larder.url, method, path)

    def test_part_numbers_past_4_gib(self):
        for n in (1, 512, 513, 1024, 1025):
            first = sum(PARTS[:n - 1])
            last = first + PARTS[n - 1] - 1
            for method in ("HEAD", "GET", "HEAD"):
                # GET reads the whole part: at most 4 MiB here
                r = self.part(n, method)
                where = "part %d %s: %r" % (n, method, r)
                self.assertEqual(r.status, 206, where)
                self.assertEqual(r.headers.get("content-range"),
                                 "bytes %d-%d/%d" % (first, last, SIZES["parts-4g"]), where)
                self.assertEqual(r.headers.get("content-length"), str(last - first + 1), where)
                self.assertEqual(r.headers.get("x-amz-mp-parts-count"), str(len(PARTS)), where)
                if method == "GET":
                    self.assertTrue(r.body == synthetic_bytes(SEED, first, last - first + 1),
                                    "wrong bytes: " + where)
        r = self.part(len(PARTS) + 1, "HEAD")
        self.assertEqual(r.status, 416, r)

    def test_pass_through_ranges_past_4_gib(self):
        """No ETag: not cached, the ranges go to the origin as they are."""
        for rng in ("bytes=4294967290-4294967300", "bytes=-5", "bytes=%d-" % 2 ** 32,
                    "bytes=%d-" % SIZES["no-etag-4g"]):
            r = self.assertRange("no-etag-4g", rng)
            self.assertEqual(r.cache, "bypass", r)

    def test_a_fetch_cut_past_4_gib_resumes_where_it_stopped(self):
        at = 2 ** 32 + 8 * MiB  # chunk 513's first byte
        self.assertRange("shard-6g", "bytes=0-0")  # its metadata (chunk 0) is known
        mark = self.origin.mark()
        self.origin.drop_next(50, key="shard-6g",
                              rng="bytes=%d-%d" % (at + 5 * MiB, at + 8 * MiB - 1))
        self.assertRange("shard-6g", "bytes=%d-%d" % (at + 5 * MiB, at + 5 * MiB + 99))
        ranges = [g["range"] for g in self.origin.gets(BUCKET, "shard-6g", since=mark)]
        # Deep in its chunk: fetched from the range's first byte, and up to
        # it at once (test_split_fill); the first of those, cut inside the
        # range read, resumes where it stopped.
        self.assertEqual(sorted(ranges), sorted(["bytes=%d-%d" % (at + 5 * MiB, at + 8 * MiB - 1),
                                                 "bytes=%d-%d" % (at + 5 * MiB + 50,
                                                                  at + 8 * MiB - 1),
                                                 "bytes=%d-%d" % (at, at + 5 * MiB - 1)]))

    def test_access_log_counts_bytes_past_4_gib(self):
        r = self.assertRange("shard-4g", "bytes=%d-" % 2 ** 32)
        rid = r.headers["x-amz-request-id"]
        deadline = time.monotonic() + 10  # written once the answer is done
        while True:
            recs = [x for x in self.larder.access_records() if x.get("id") == rid]
            if recs or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(len(recs), 1, recs)
        self.assertEqual(recs[0]["status"], "206")
        self.assertEqual(recs[0]["bytes_out"], "12345")


if __name__ == "__main__":
    unittest.main()
