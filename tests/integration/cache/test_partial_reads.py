"""What a cold partial read costs upstream: a small range far into a large object.

Training jobs read parts of shards at random places (a tar member, an HDF5 or
zarr chunk, a Parquet column). The first read of an object that is not known
yet must learn its size and ETag from upstream; it learns them from the
answer for the chunk its range starts in, so the read costs one GET, not
chunk 0's as well (which doubled its upstream bytes and added a round trip
before its first byte: docs/cache.md, "Chunks and metadata"). Counted from
the moto request log (harness.Upstream): only larder's requests for the key.
"""
import random

import harness
from harness import LarderCase

MiB = 1024 * 1024
C = MiB  # LARDER_CHUNK_SIZE
BUCKET = "partial-reads"


def blob(seed, n):
    return random.Random(seed).randbytes(n)


class ColdRanges(LarderCase):
    LARDER_ENV = {"LARDER_CHUNK_SIZE": "1MiB", "LARDER_RAM_CACHE_SIZE": "64MiB",
                  "LARDER_METADATA_TTL": "300"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)

    def put(self, key, data):
        self.direct.put_object(Bucket=BUCKET, Key=key, Body=data)

    def get(self, key, rng):
        return harness.signed_request(self.larder.url, "GET", harness.key_path(BUCKET, key),
                                      headers={"Range": rng} if rng else None)

    def gets(self, key, since):
        path = harness.key_path(BUCKET, key)
        return [r for r in self.upstream.from_larder(since)
                if r["method"] == "GET" and r["target"].partition("?")[0] == path]

    @staticmethod
    def range_of(rec):
        return dict((k.lower(), v) for k, v in rec["headers"]).get("range")

    def test_small_range_far_into_a_cold_object_costs_one_chunk(self):
        data = blob(1, 6 * C)
        self.put("shard-0.tar", data)
        mark = self.upstream.mark()
        first = 4 * C + 123456
        r = self.get("shard-0.tar", "bytes=%d-%d" % (first, first + 4095))
        self.assertEqual(r.status, 206, r)
        self.assertEqual(r.body, data[first:first + 4096])
        self.assertEqual(r.headers["content-range"], "bytes %d-%d/%d" % (first, first + 4095,
                                                                           len(data)))
        self.assertEqual(r.cache, "miss")
        sent = self.gets("shard-0.tar", mark)
        # One GET, for the chunk the range is in: not chunk 0 first, which
        # the reader never asked for (main sent both, 2 MiB for 4 KiB).
        self.assertEqual([self.range_of(g) for g in sent],
                         ["bytes=%d-%d" % (4 * C, 5 * C - 1)], sent)
        self.assertEqual(sum(g["bytes_out"] for g in sent), C)
        # The object is known and that chunk is held: the next read of it
        # is a hit, and a read of chunk 0 costs chunk 0, with If-Match.
        mark = self.upstream.mark()
        r = self.get("shard-0.tar", "bytes=%d-%d" % (4 * C, 4 * C + 99))
        self.assertEqual((r.status, r.cache, r.body), (206, "hit", data[4 * C:4 * C + 100]))
        self.assertEqual(self.gets("shard-0.tar", mark), [])
        r = self.get("shard-0.tar", "bytes=10-19")
        self.assertEqual((r.status, r.body), (206, data[10:20]))
        sent = self.gets("shard-0.tar", mark)
        self.assertEqual([self.range_of(g) for g in sent], ["bytes=0-%d" % (C - 1)], sent)
        self.assertTrue(all(dict((k.lower(), v) for k, v in g["headers"]).get("if-match")
                            for g in sent), sent)

    def test_range_in_a_short_last_chunk(self):
        data = blob(2, 2 * C + 1000)
        self.put("short-tail", data)
        mark = self.upstream.mark()
        r = self.get("short-tail", "bytes=%d-" % (2 * C + 10))
        self.assertEqual((r.status, r.body), (206, data[2 * C + 10:]))
        sent = self.gets("short-tail", mark)
        self.assertEqual([self.range_of(g) for g in sent],
                         ["bytes=%d-%d" % (2 * C, 3 * C - 1)], sent)
        # Then the whole object, from the two chunks not held and the one held.
        r = self.get("short-tail", None)
        self.assertEqual((r.status, r.body), (200, data))
        self.assertEqual(len(self.gets("short-tail", mark)), 3)

    def test_range_past_the_end_of_a_cold_object(self):
        # The chunk asked for is past the end: S3's 416 for it, then chunk 0
        # as any first read, and the client gets S3's InvalidRange.
        data = blob(3, C + 5)
        self.put("too-short", data)
        for rng in ("bytes=%d-" % (5 * C), "bytes=%d-%d" % (C + 5, C + 9)):
            r = self.get("too-short", rng)
            self.assertEqual(r.status, 416, (rng, r))
            self.assertEqual(harness.s3_error(r.body)[0], "InvalidRange", r)
            self.assertEqual(r.headers["content-range"], "bytes */%d" % len(data))
        r = self.get("too-short", "bytes=%d-" % C)
        self.assertEqual((r.status, r.body), (206, data[C:]))

    def test_suffix_of_a_cold_object_costs_its_last_chunk(self):
        # bytes=-n (a Parquet footer read without the size) of at most a
        # chunk asks for the last chunk's worth of bytes, bytes=-chunk, and
        # keeps the last chunk of them: one GET, not chunk 0 first.
        data = blob(5, 5 * C + 1000)
        self.put("table.parquet", data)
        mark = self.upstream.mark()
        for n in (8, 1000, 65536):
            r = self.get("table.parquet", "bytes=-%d" % n)
            self.assertEqual((r.status, r.body), (206, data[-n:]), n)
        # the footer's bytes=-65536 starts deep in chunk 4: that chunk's
        # own GETs, from its first byte and (at once) up to it (test_split_fill);
        # the second may reach the origin after the answer: counted once the
        # whole object was read, which waits for chunk 4 and fetches 0-3
        r = self.get("table.parquet", None)
        self.assertEqual((r.status, r.body), (200, data))
        sent = self.gets("table.parquet", mark)
        a = len(data) - 65536
        self.assertEqual(sorted(self.range_of(g) for g in sent),
                         sorted(["bytes=-%d" % C, "bytes=%d-%d" % (a, 5 * C - 1),
                                 "bytes=%d-%d" % (4 * C, a - 1)] +
                                ["bytes=%d-%d" % (i * C, (i + 1) * C - 1) for i in range(4)]),
                         sent)
        # A suffix longer than a chunk, and one longer than a small object:
        # learnt from chunk 0 / whole, as before.
        self.put("small.parquet", data[:5000])
        self.put("long-suffix", data)
        mark = self.upstream.mark()
        r = self.get("small.parquet", "bytes=-9000")
        self.assertEqual((r.status, r.body), (206, data[:5000]))
        self.assertEqual([self.range_of(g) for g in self.gets("small.parquet", mark)],
                         ["bytes=-%d" % C])
        r = self.get("long-suffix", "bytes=-%d" % (C + 1))
        self.assertEqual((r.status, r.body), (206, data[-(C + 1):]))
        self.assertEqual(self.range_of(self.gets("long-suffix", mark)[0]), "bytes=0-%d" % (C - 1))

    def test_concurrent_cold_ranges_of_one_object_share_its_learning(self):
        # Readers of one cold object at different places: one learns it
        # (with the chunk its range is in), the others wait for that and
        # fetch their own chunks, each once.
        import concurrent.futures
        data = blob(4, 8 * C)
        self.put("many", data)
        mark = self.upstream.mark()
        starts = [k * C + 777 for k in (5, 2, 7, 5, 2)]
        with concurrent.futures.ThreadPoolExecutor(len(starts)) as pool:
            res = list(pool.map(lambda a: self.get("many", "bytes=%d-%d" % (a, a + 65535)),
                                starts))
        for a, r in zip(starts, res):
            self.assertEqual((r.status, r.body), (206, data[a:a + 65536]))
        sent = self.gets("many", mark)
        ranges = sorted(self.range_of(g) for g in sent)
        self.assertEqual(ranges, sorted("bytes=%d-%d" % (k * C, (k + 1) * C - 1)
                                        for k in (2, 5, 7)), sent)
