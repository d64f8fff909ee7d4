"""The chunked cache in front of moto: what a client reads is what S3 would answer.

Chunk size 1 MiB, so the objects here (0 B to 4 MiB) span up to four chunks.
Every answer from larder is compared byte for byte with the object and, header
by header, with what moto answers directly for the same request; where moto
departs from S3 (noted at each place) the test holds larder to S3's rules.
Upstream traffic is counted from the moto request log (harness.Upstream):
only requests larder sent for the key in question count.
"""
import base64
import concurrent.futures
import email.utils
import hashlib
import random
import shutil
import tempfile
import threading
import time
import urllib.request
import unittest
import xml.etree.ElementTree as ET
from urllib.parse import quote

import harness
from harness import LarderCase

MiB = 1024 * 1024
C = MiB  # LARDER_CHUNK_SIZE
BUCKET = "cache-data"
OTHER_BUCKET = "cache-other"
LIMITED_KEY = "LARDERLIMITEDKEY0001"
LIMITED_SECRET = "larder-limited-secret-000000000000000001"

# Headers a hit must reproduce exactly as upstream sends them.
COMPARED = ("etag", "content-length", "content-type", "last-modified", "content-range",
            "accept-ranges")


def blob(seed, n):
    return random.Random(seed).randbytes(n)


def etag_of(data):
    return '"%s"' % hashlib.md5(data).hexdigest()


class Resp(harness.Resp):
    def compared(self):
        out = {k: v for k, v in self.headers.items() if k in COMPARED}
        out.update({k: v for k, v in self.headers.items() if k.startswith("x-amz-meta-")})
        return out

    def __repr__(self):
        return "<%s cache=%s %s len=%d%s>" % (self.status, self.cache, self.compared(),
                                             len(self.body),
                                             "" if self.complete else " INCOMPLETE %r" % self.error)


def request(base, method, path, headers=None, **kw):
    return harness.signed_request(base, method, path, headers, resp_class=Resp, **kw)


def query_string(params):
    return "&".join("%s=%s" % (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
                    for k, v in sorted(params.items()))


def ranges_for(size, seed):
    """Range header values (None: no Range) for an object of `size` bytes:
    fixed edge cases around chunk boundaries and seeded random ones."""
    rnd = random.Random(seed)
    out = [None, "bytes=0-", "bytes=0-0", "bytes=-1", "bytes=%d-" % max(0, size - 1),
           "bytes=%d-%d" % (max(0, size - 10), size + 100)]
    for b in range(C, size + 1, C):
        out += ["bytes=%d-%d" % (b - 1, b), "bytes=%d-%d" % (b - 10, b + 10),
                "bytes=%d-%d" % (b - C, b - 1), "bytes=%d-" % b]
    if size > 0:
        for _ in range(8):
            a = rnd.randrange(size)
            out.append("bytes=%d-%d" % (a, rnd.randrange(a, size + C)))
        out.append("bytes=%d-" % rnd.randrange(size))
        out.append("bytes=-%d" % rnd.randrange(1, size + 10))
    # Unsatisfiable, and ignored (reversed, multi-range, another unit).
    out += ["bytes=%d-%d" % (size, size + 5), "bytes=%d-" % (size + C)]
    if size > 0:
        out += ["bytes=-0", "items=0-1"]  # multi-range: test_multi_range_on_cached_object
    if size > 5:
        out.append("bytes=5-2")
    return out


def moto_departs(size, rng):
    """Ranges moto answers unlike S3 (and RFC 7233): it reads another unit as
    bytes (206 for items=0-1; S3 ignores the header). A suffix range of an
    empty object is 200 with no bytes at S3 as at moto (test_empty_tail_read)."""
    return rng is not None and rng.startswith("items=")


def expected_slice(data, rng):
    """(status, body) S3 gives for this Range on data."""
    size = len(data)
    if rng is None:
        return 200, data
    if not rng.startswith("bytes=") or "," in rng:
        return 200, data
    a, _, b = rng[6:].partition("-")
    if a == "":
        n = int(b)
        if n == 0:
            return 416, None
        if size == 0:
            return 200, data  # a tail read of an empty object: S3's 200
        return 206, data[max(0, size - n):]
    a = int(a)
    if b != "" and int(b) < a:
        return 200, data
    if a >= size:
        return 416, None
    end = size - 1 if b == "" else min(int(b), size - 1)
    return 206, data[a:end + 1]


class CacheCase(LarderCase):
    """LarderCase with a private LARDER_CACHE_DIR and a 1 MiB chunk."""
    EXTRA_ENV = {}

    @classmethod
    def setUpClass(cls):
        cls.cache_dir = tempfile.mkdtemp(prefix="larder-cache-")
        cls.LARDER_ENV = dict({
            "LARDER_CHUNK_SIZE": "1MiB",
            "LARDER_CACHE_DIR": cls.cache_dir,
            "LARDER_RAM_CACHE_SIZE": "64MiB",
            "LARDER_DISK_CACHE_SIZE": "64MiB",
            "LARDER_METADATA_TTL": "300",
        }, **cls.EXTRA_ENV)
        try:
            super().setUpClass()
        except BaseException:
            shutil.rmtree(cls.cache_dir, ignore_errors=True)
            raise
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.direct.create_bucket(Bucket=OTHER_BUCKET)

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.cache_dir, ignore_errors=True)

    # -- helpers
    def put(self, key, data, **kw):
        kw.setdefault("ContentType", "application/x-test")
        kw.setdefault("Metadata", {"origin": "direct", "size": str(len(data))})
        return self.direct.put_object(Bucket=BUCKET, Key=key, Body=data, **kw)["ETag"]

    def via_larder(self, name, headers=None, method="GET", query=None, bucket=BUCKET, **creds):
        """creds: key=, secret= of another client key."""
        path = harness.key_path(bucket, name) + ("?" + query_string(query) if query else "")
        return request(self.larder.url, method, path, headers, **creds)

    def via_moto(self, key, headers=None, method="GET", query=None, bucket=BUCKET):
        path = harness.key_path(bucket, key) + ("?" + query_string(query) if query else "")
        return request(self.upstream.url, method, path, headers, key=self.upstream.access_key,
                       secret=self.upstream.secret_key, user_agent=harness.DIRECT_UA)

    def upstream_for(self, key, since, bucket=BUCKET):
        """Requests larder sent upstream for this object since the mark."""
        path = harness.key_path(bucket, key)
        return [r for r in self.upstream.from_larder(since)
                if r["target"].partition("?")[0] == path]

    def assertSameAsMoto(self, key, headers=None, method="GET", query=None, data=None):
        """larder and moto answer this request alike; returns larder's answer."""
        mine = self.via_larder(key, headers, method, query)
        theirs = self.via_moto(key, headers, method, query)
        what = "%s %s %s %s" % (method, key, headers, query)
        self.assertTrue(mine.complete, "%s: %r" % (what, mine))
        rng = (headers or {}).get("Range")
        if data is not None and moto_departs(len(data), rng):
            status, want = expected_slice(data, rng)
            self.assertEqual(mine.status, status, "%s (S3's answer, not moto's): %r"
                             % (what, mine))
            if method == "GET" and want is not None:
                self.assertTrue(mine.body == want, what)
            self.assertIn(mine.cache, ("hit", "miss"), "%s: %r" % (what, mine))
            return mine
        self.assertEqual(mine.status, theirs.status, "%s: larder %r, moto %r"
                         % (what, mine, theirs))
        self.assertIn(mine.cache, ("hit", "miss", "bypass"),
                      "%s: x-larder-cache missing or odd: %r" % (what, mine))
        if mine.status in (200, 206):
            self.assertEqual(mine.compared(), theirs.compared(), what)
            self.assertTrue(mine.body == theirs.body, "%s: body differs from moto's" % what)
            if data is not None and method == "GET":
                status, want = expected_slice(data, (headers or {}).get("Range"))
                self.assertEqual(mine.status, status, what)
                self.assertTrue(mine.body == want, what)
        elif mine.status == 304:
            self.assertEqual(mine.headers.get("etag"), theirs.headers.get("etag"), what)
            self.assertEqual(mine.body, b"")
        elif method == "GET":
            self.assertEqual(harness.s3_error(mine.body)[0], harness.s3_error(theirs.body)[0],
                             "%s: %s vs %s" % (what, mine.body[:300], theirs.body[:300]))
        if mine.status == 416:
            size = int(self.direct.head_object(Bucket=BUCKET, Key=key)["ContentLength"])
            self.assertEqual(mine.headers.get("content-range"), "bytes */%d" % size, what)
        return mine

    def read_all(self, key):
        r = self.via_larder(key)
        self.assertEqual((r.status, r.complete), (200, True), r)
        return r


SIZES = [("zero", 0), ("one", 1), ("chunk-1", C - 1), ("chunk", C), ("chunk+1", C + 1),
         ("3.5chunks", 3 * C + C // 2)]


class CacheReads(CacheCase):
    CONFIG_TEXT = ("[key %s]\nsecret = %s\naccess = read-only\nbuckets = %s\n"
                   % (LIMITED_KEY, LIMITED_SECRET, OTHER_BUCKET))

    def test_ranges_cold_and_warm_match_upstream(self):
        for name, size in SIZES:
            with self.subTest(size=name):
                data = blob(size, size)
                key = "ranges/" + name
                self.put(key, data)
                rngs = ranges_for(size, seed=size)
                # Cold: the first request finds nothing cached.
                first = self.assertSameAsMoto(key, {"Range": rngs[3]} if size else None,
                                              data=data)
                self.assertEqual(first.cache, "miss", first)
                for rng in rngs:
                    self.assertSameAsMoto(key, {"Range": rng} if rng else None, data=data)
                self.read_all(key)
                # Warm: every range is a hit and nothing goes upstream.
                m = self.upstream.mark()
                for rng in rngs:
                    r = self.assertSameAsMoto(key, {"Range": rng} if rng else None, data=data)
                    self.assertEqual(r.cache, "hit", "%s %s: %r" % (name, rng, r))
                self.assertEqual(self.upstream_for(key, m), [], "warm reads went upstream")

    def test_multi_range_on_cached_object(self):
        # S3 ignores a multi-range Range and answers the whole object: nothing
        # in that needs upstream when the object is cached.
        data = blob(31, C + 3)
        key = "ranges/multi"
        self.put(key, data)
        self.read_all(key)
        m = self.upstream.mark()
        for method in ("GET", "HEAD"):
            r = self.assertSameAsMoto(key, {"Range": "bytes=0-1,3-4"}, method, data=data)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.cache, "hit", "%s: %r" % (method, r))
        self.assertEqual(self.upstream_for(key, m), [])

    def test_concurrent_random_ranges(self):
        objs = {}
        for name, size in SIZES:
            data = blob(1000 + size, size)
            self.put("conc/" + name, data)
            objs["conc/" + name] = data
        jobs = []
        rnd = random.Random(7)
        for _ in range(3):  # cold, then warmer and warmer
            for key, data in objs.items():
                for rng in rnd.sample(ranges_for(len(data), rnd.randrange(1000)), 6):
                    jobs.append((key, rng))
        rnd.shuffle(jobs)

        def one(job):
            key, rng = job
            r = self.via_larder(key, {"Range": rng} if rng else None)
            status, want = expected_slice(objs[key], rng)
            if r.status != status or not r.complete or (want is not None and r.body != want):
                return "%s %s: %r (want %s, %s bytes)" % (key, rng, r, status,
                                                          None if want is None else len(want))
            if r.cache not in ("hit", "miss"):
                return "%s %s: x-larder-cache %r" % (key, rng, r.cache)
            return None
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            errors = [e for e in pool.map(one, jobs) if e]
        self.assertEqual(errors, [])
        for key, data in objs.items():
            self.read_all(key)
        m = self.upstream.mark()
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            errors = [e for e in pool.map(one, jobs[:60]) if e]
        self.assertEqual(errors, [])
        for key in objs:
            self.assertEqual(self.upstream_for(key, m), [], key)

    def test_32_cold_readers_one_upstream_get_per_chunk(self):
        data = blob(32, 4 * C)
        key = "coalesce/four-chunks"
        etag = self.put(key, data)
        m = self.upstream.mark()
        barrier = threading.Barrier(32)
        results = [None] * 32

        def reader(i):
            barrier.wait()
            results[i] = self.via_larder(key)
        threads = [threading.Thread(target=reader, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, r in enumerate(results):
            self.assertEqual((r.status, r.complete), (200, True), "reader %d: %r" % (i, r))
            self.assertTrue(r.body == data, "reader %d: wrong bytes" % i)
            self.assertEqual(r.headers.get("etag"), etag)
            self.assertIn(r.cache, ("miss", "hit"), "reader %d" % i)
        self.assertIn("miss", [r.cache for r in results])
        seen = self.upstream_for(key, m)
        self.assertEqual([r["method"] for r in seen], ["GET"] * 4,
                         "exactly one upstream GET per chunk and no HEAD: %s"
                         % [(r["method"], dict(r["headers"]).get("range"),
                             dict(r["headers"]).get("if-match")) for r in seen])
        by_start = {}
        for r in seen:
            h = dict(r["headers"])
            rng = h.get("range", "")
            self.assertTrue(rng.startswith("bytes="), "chunk fetches are ranged: %r" % rng)
            a, _, b = rng[6:].partition("-")
            by_start[int(a)] = (int(b) if b else None, h.get("if-match"))
        self.assertEqual(sorted(by_start), [0, C, 2 * C, 3 * C])
        for start, (end, if_match) in by_start.items():
            self.assertTrue(end is None or end >= start + C - 1, "chunk at %d: end %s"
                            % (start, end))
            if start == 0:
                # The very first fetch of an unknown object cannot know the ETag.
                self.assertIn(if_match, (None, etag))
            else:
                self.assertEqual(if_match, etag, "chunk at %d without If-Match" % start)
        m = self.upstream.mark()
        r = self.read_all(key)
        self.assertEqual(r.cache, "hit")
        self.assertTrue(r.body == data)
        self.assertEqual(self.upstream_for(key, m), [], "a second read went upstream")

    def test_first_read_fetches_chunk_zero_without_head(self):
        data = blob(33, 2 * C + 5)
        key = "first/read"
        etag = self.put(key, data)
        m = self.upstream.mark()
        r = self.via_larder(key, {"Range": "bytes=10-19"})
        self.assertEqual((r.status, r.body, r.cache), (206, data[10:20], "miss"))
        seen = self.upstream_for(key, m)
        self.assertEqual(seen[0]["method"], "GET", "no HEAD before the first chunk")
        self.assertEqual(dict(seen[0]["headers"]).get("range"), "bytes=0-%d" % (C - 1))
        self.assertNotIn("HEAD", [s["method"] for s in seen])
        self.assertEqual(r.headers.get("etag"), etag)

    def test_head_of_cached_object_stays_local(self):
        data = blob(34, C + 100)
        key = "head/cached"
        self.put(key, data, ContentType="text/plain", Metadata={"colour": "blue"})
        cold = self.assertSameAsMoto(key, method="HEAD")
        self.assertEqual(cold.cache, "miss")
        self.read_all(key)
        m = self.upstream.mark()
        for hdrs in (None, {"Range": "bytes=5-10"}, {"Range": "bytes=%d-" % (C + 100)}):
            r = self.assertSameAsMoto(key, hdrs, method="HEAD")
            self.assertEqual(r.cache, "hit", "%s %r" % (hdrs, r))
            self.assertEqual(r.body, b"")
        r = self.via_larder(key, method="HEAD")
        self.assertEqual(r.headers.get("x-amz-meta-colour"), "blue")
        self.assertEqual(r.headers.get("content-length"), str(C + 100))
        self.assertEqual(self.upstream_for(key, m), [], "HEAD of a cached object went upstream")

    def test_conditionals_as_s3(self):
        data = blob(35, 2 * C + 3)
        key = "cond/obj"
        etag = self.put(key, data)
        self.read_all(key)
        lm = self.direct.head_object(Bucket=BUCKET, Key=key)["LastModified"].timestamp()
        past = email.utils.formatdate(lm - 3600, usegmt=True)
        future = email.utils.formatdate(lm + 3600, usegmt=True)
        exact = email.utils.formatdate(lm, usegmt=True)
        m = self.upstream.mark()
        cases = [
            {"If-Match": etag}, {"If-Match": '"0123"'},
            {"If-None-Match": etag}, {"If-None-Match": '"0123"'},
            {"If-Modified-Since": past}, {"If-Modified-Since": future},
            {"If-Modified-Since": exact}, {"If-Unmodified-Since": past},
            {"If-Unmodified-Since": future}, {"If-Unmodified-Since": exact},
            {"If-Match": '"0123"', "If-None-Match": etag},
            {"If-None-Match": etag, "If-Modified-Since": past},
            {"If-Match": etag, "Range": "bytes=%d-%d" % (C - 2, C + 2)},
            {"If-Match": '"0123"', "Range": "bytes=0-9"},
            {"If-None-Match": etag, "Range": "bytes=0-9"},
            {"If-None-Match": '"0123"', "Range": "bytes=-9"},
            {"If-Unmodified-Since": past, "Range": "bytes=0-9"},
            {"If-Match": etag, "Range": "bytes=%d-" % (3 * C)},
            {"If-None-Match": etag, "Range": "bytes=%d-" % (3 * C)},
        ]
        for method in ("GET", "HEAD"):
            for hdrs in cases:
                with self.subTest(method=method, headers=hdrs):
                    r = self.assertSameAsMoto(key, hdrs, method=method, data=data)
                    self.assertEqual(r.cache, "hit", r)
        # Where moto departs from S3, S3's documented rules:
        # If-Match true + If-Unmodified-Since false -> 200 (moto: 412);
        # If-None-Match false + If-Modified-Since false -> 200 (moto: 304).
        for method in ("GET", "HEAD"):
            r = self.via_larder(key, {"If-Match": etag, "If-Unmodified-Since": past}, method)
            self.assertEqual((r.status, r.cache), (200, "hit"), r)
            r = self.via_larder(key, {"If-None-Match": '"0123"', "If-Modified-Since": future},
                                method)
            self.assertEqual((r.status, r.cache), (200, "hit"), r)
            if method == "GET":
                self.assertTrue(r.body == data)
        self.assertEqual(self.upstream_for(key, m), [], "conditionals on a cached object")

    def test_unsatisfiable_range_on_cached_and_empty_objects(self):
        data = blob(36, C + 1)
        self.put("unsat/obj", data)
        self.put("unsat/empty", b"")
        self.read_all("unsat/obj")
        self.read_all("unsat/empty")
        m = self.upstream.mark()
        for key, rng in (("unsat/obj", "bytes=%d-" % (C + 1)),
                         ("unsat/obj", "bytes=%d-%d" % (C + 5, C + 9)),
                         ("unsat/obj", "bytes=-0"),
                         ("unsat/empty", "bytes=0-"), ("unsat/empty", "bytes=0-10")):
            for method in ("GET", "HEAD"):
                with self.subTest(key=key, rng=rng, method=method):
                    r = self.assertSameAsMoto(key, {"Range": rng}, method)
                    self.assertEqual(r.status, 416)
                    self.assertEqual(r.cache, "hit")
        self.assertEqual(self.upstream_for("unsat/obj", m), [])
        self.assertEqual(self.upstream_for("unsat/empty", m), [])

    def test_empty_tail_read(self):
        # A suffix range of an empty object (a Parquet or tar reader's tail
        # read, "bytes=-n") is answered by S3 with 200 and no bytes, as by
        # moto (RFC 9110 14.1.1: a suffix of n > 0 bytes is satisfiable);
        # larder answered 416 InvalidRange, cold and cached, and the reader
        # failed on an object it reads directly. "bytes=-0" and any range
        # naming a first byte stay 416.
        key = "tail/empty"
        self.put(key, b"")
        for attempt in range(2):  # cold, then cached
            for rng in ("bytes=-1", "bytes=-65536", "bytes=-%d" % (2 * C)):
                for method in ("GET", "HEAD"):
                    with self.subTest(attempt=attempt, rng=rng, method=method):
                        r = self.assertSameAsMoto(key, {"Range": rng}, method, data=b"")
                        self.assertEqual((r.status, r.body), (200, b""), r)
                        self.assertEqual(r.headers.get("content-length"), "0")
                        self.assertNotIn("content-range", r.headers)
        for rng in ("bytes=-0", "bytes=0-", "bytes=0-0"):
            r = self.via_larder(key, {"Range": rng})
            self.assertEqual((r.status, harness.s3_error(r.body)[0]), (416, "InvalidRange"), rng)

    def test_response_overrides(self):
        data = blob(37, C + 10)
        key = "override/obj"
        self.put(key, data, ContentType="text/original")
        self.read_all(key)
        m = self.upstream.mark()
        q = {"response-content-type": "application/x-over",
             "response-content-disposition": 'attachment; filename="x y.bin"',
             "response-content-encoding": "identity",
             "response-content-language": "fr-CH",
             "response-cache-control": "max-age=5, private",
             "response-expires": "Thu, 01 Dec 2033 16:00:00 GMT"}
        for hdrs in (None, {"Range": "bytes=%d-%d" % (C - 3, C + 3)}):
            r = self.via_larder(key, hdrs, query=q)
            self.assertIn(r.status, (200, 206), r)
            self.assertEqual(r.cache, "hit")
            want = data if hdrs is None else data[C - 3:C + 4]
            self.assertTrue(r.body == want)
            self.assertEqual(r.headers.get("content-type"), "application/x-over")
            self.assertEqual(r.headers.get("content-disposition"), 'attachment; filename="x y.bin"')
            self.assertEqual(r.headers.get("content-encoding"), "identity")
            self.assertEqual(r.headers.get("content-language"), "fr-CH")
            self.assertEqual(r.headers.get("cache-control"), "max-age=5, private")
            self.assertEqual(r.headers.get("expires"), "Thu, 01 Dec 2033 16:00:00 GMT")
        # The overrides are per response: the cached metadata is untouched.
        r = self.via_larder(key)
        self.assertEqual((r.headers.get("content-type"), r.cache), ("text/original", "hit"))
        self.assertNotIn("content-disposition", r.headers)
        self.assertEqual(self.upstream_for(key, m), [])

    def test_response_overrides_on_a_304(self):
        """A 304 carries no representation headers (RFC 9110 15.4.5; moto's
        304, like S3's, has no Content-*): the response-content-* overrides
        are left out of it, as the object's own Content-* are. Before, they
        went out on the 304, and a cache in front updates its stored copy's
        headers from a 304's (RFC 9111 4.3.4)."""
        data = blob(39, C + 10)
        key = "override/not-modified"
        etag = self.put(key, data, ContentType="text/original")
        self.read_all(key)
        q = {"response-content-type": "application/x-over",
             "response-content-disposition": "attachment",
             "response-content-encoding": "identity",
             "response-content-language": "fr-CH"}
        representation = ("content-type", "content-disposition", "content-encoding",
                          "content-language")
        for method in ("GET", "HEAD"):
            theirs = self.via_moto(key, {"If-None-Match": etag}, method, query=q)
            mine = self.via_larder(key, {"If-None-Match": etag}, method, query=q)
            self.assertEqual((mine.status, theirs.status), (304, 304))
            self.assertEqual(mine.cache, "hit", mine)
            self.assertEqual([h for h in representation if h in theirs.headers], [], theirs)
            self.assertEqual([h for h in representation if h in mine.headers], [],
                             "%s: %s" % (method, mine.headers))
            self.assertEqual(mine.headers.get("etag"), etag)

    def test_policy_is_checked_before_the_cache(self):
        data = blob(38, 5000)
        key = "policy/secret"
        self.put(key, data)
        self.read_all(key)
        r = self.via_larder(key)
        self.assertEqual(r.cache, "hit")
        for method in ("GET", "HEAD"):
            for hdrs in (None, {"Range": "bytes=0-99"}):
                r = self.via_larder(key, hdrs, method, key=LIMITED_KEY, secret=LIMITED_SECRET)
                self.assertEqual(r.status, 403, "%s %s: %r" % (method, hdrs, r))
                self.assertNotEqual(r.cache, "hit")
                self.assertNotIn(data[:64], r.body)
                if method == "GET":
                    self.assertEqual(harness.s3_error(r.body)[0], "AccessDenied")
        # The limited key is a working key, on its own bucket.
        self.direct.put_object(Bucket=OTHER_BUCKET, Key="mine", Body=b"mine")
        r = self.via_larder("mine", bucket=OTHER_BUCKET, key=LIMITED_KEY, secret=LIMITED_SECRET)
        self.assertEqual((r.status, r.body), (200, b"mine"))

    def test_sse_c_is_passed_through(self):
        data = blob(39, 3000)
        key = "ssec/plain"
        self.put(key, data)
        self.read_all(key)
        raw = b"k" * 32
        sse = {"x-amz-server-side-encryption-customer-algorithm": "AES256",
               "x-amz-server-side-encryption-customer-key": base64.b64encode(raw).decode(),
               "x-amz-server-side-encryption-customer-key-MD5":
                   base64.b64encode(hashlib.md5(raw).digest()).decode()}
        for method in ("GET", "HEAD"):
            m = self.upstream.mark()
            r = self.via_larder(key, sse, method)
            theirs = self.via_moto(key, sse, method)
            self.assertEqual(r.status, theirs.status, "%s: larder %r, moto %r"
                             % (method, r, theirs))
            self.assertEqual(r.cache, "bypass", r)
            seen = self.upstream_for(key, m)
            self.assertEqual([s["method"] for s in seen], [method],
                             "an SSE-C request must reach upstream")
            self.assertEqual(dict(seen[0]["headers"]).get(
                "x-amz-server-side-encryption-customer-algorithm"), "AES256")

    def test_owner_and_payer_headers_go_to_s3(self):
        # S3 answers these by the bucket (its owner, whether the requester
        # pays), which a hit knows nothing of: a wrong expected owner is
        # 403 there, and a hit must not answer it with the bytes.
        data = blob(41, 2000)
        key = "owner/obj"
        self.put(key, data)
        self.read_all(key)
        for hdrs in ({"x-amz-expected-bucket-owner": "111122223333"},
                     {"x-amz-request-payer": "requester"}):
            for method in ("GET", "HEAD"):
                with self.subTest(hdrs=hdrs, method=method):
                    m = self.upstream.mark()
                    r = self.via_larder(key, hdrs, method)
                    self.assertEqual(r.cache, "bypass", r)
                    seen = self.upstream_for(key, m)
                    self.assertEqual([s["method"] for s in seen], [method])
                    name, value = next(iter(hdrs.items()))
                    self.assertEqual(dict(seen[0]["headers"]).get(name), value)
        # A presigned URL may carry them as query parameters, which S3 takes
        # as the headers.
        from botocore.auth import S3SigV4QueryAuth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        req = AWSRequest(method="GET", url=self.larder.url + harness.key_path(BUCKET, key) +
                         "?x-amz-expected-bucket-owner=111122223333")
        S3SigV4QueryAuth(Credentials(harness.CLIENT_KEY, harness.CLIENT_SECRET), "s3",
                         harness.REGION, expires=300).add_auth(req)
        m = self.upstream.mark()
        with urllib.request.urlopen(req.url, timeout=30) as resp:
            self.assertEqual(resp.headers.get("x-larder-cache"), "bypass")
        seen = self.upstream_for(key, m)
        self.assertEqual(dict(seen[0]["headers"]).get("x-amz-expected-bucket-owner"),
                         "111122223333")

    def test_uncacheable_requests_bypass(self):
        data = blob(40, 2000)
        key = "bypass/obj"
        self.put(key, data)
        self.read_all(key)
        # (partNumber is answered from the cache once its bytes are known:
        # test_crt.CrtRequests.test_part_number_from_cache)
        for what, hdrs, query in (("versionId", None, {"versionId": "null"}),):
            for method in ("GET", "HEAD"):
                with self.subTest(what=what, method=method):
                    m = self.upstream.mark()
                    r = self.via_larder(key, hdrs, method, query)
                    theirs = self.via_moto(key, hdrs, method, query)
                    self.assertEqual(r.status, theirs.status, "larder %r, moto %r" % (r, theirs))
                    self.assertEqual(r.cache, "bypass", r)
                    self.assertEqual(len(self.upstream_for(key, m)), 1)
                    if method == "GET" and r.status == 200:
                        self.assertTrue(r.body == data)

    def test_part_answered_200_keeps_the_object(self):
        # S3 answers a part of a multipart object with 206 and its range; an
        # S3-compatible store (moto here) may answer 200 with the part's length
        # and x-amz-mp-parts-count. That is not the whole object: the cached one
        # must stay (it was dropped as changed, and read again, at each part read).
        s3 = self.upstream.client()
        key = "parts/two"
        p1, p2 = blob(43, 5 * MiB), blob(44, 1000)
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=key)
        parts = [{"PartNumber": i, "ETag": s3.upload_part(Bucket=BUCKET, Key=key,
                                                          UploadId=up["UploadId"], PartNumber=i,
                                                          Body=p)["ETag"]}
                 for i, p in ((1, p1), (2, p2))]
        s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": parts})
        self.assertTrue(self.read_all(key).body == p1 + p2)
        for method in ("HEAD", "GET"):
            r = self.via_larder(key, None, method, {"partNumber": "1"})
            self.assertIn(r.status, (200, 206), r)
            m = self.upstream.mark()
            r = self.via_larder(key)
            self.assertEqual((r.status, r.cache), (200, "hit"), "after a %s of part 1" % method)
            self.assertTrue(r.body == p1 + p2)
            self.assertEqual(self.upstream_for(key, m), [])

    def test_long_metadata_names_are_replayed(self):
        # S3 bounds user metadata as a whole (2 KB), not each name.
        key = "meta/long-names"
        data = blob(42, 1000)
        names = {"n" * 300: "a", "m" * 1500: "b"}
        self.put(key, data, Metadata=names)
        for method in ("GET", "HEAD", "GET"):
            with self.subTest(method=method):
                r = self.via_larder(key, method=method)
                theirs = self.via_moto(key, method=method)
                self.assertEqual(r.status, 200, r)
                for name, value in names.items():
                    self.assertEqual(theirs.headers.get("x-amz-meta-" + name), value)
                    self.assertEqual(r.headers.get("x-amz-meta-" + name), value,
                                     "x-amz-meta- of %d characters: %r" % (len(name), r))

    def test_head_of_archived_object_is_s3s_answer(self):
        # S3 refuses a GET of an object in an archive class (403
        # InvalidObjectState) but answers its HEAD (200, with its storage
        # class): the GET that learns an object must not answer a HEAD.
        key = "archived/obj"
        self.put(key, blob(41, 3000), StorageClass="GLACIER")
        for method in ("HEAD", "GET", "HEAD"):
            with self.subTest(method=method):
                r = self.via_larder(key, method=method)
                theirs = self.via_moto(key, method=method)
                self.assertEqual(r.status, theirs.status, "larder %r, moto %r" % (r, theirs))
                self.assertEqual(r.status, 200 if method == "HEAD" else 403, r)
                if method == "HEAD":
                    self.assertEqual(r.headers.get("x-amz-storage-class"), "GLACIER", r)
                    self.assertEqual(r.headers.get("content-length"), "3000", r)
                    self.assertEqual(r.headers.get("etag"), theirs.headers.get("etag"))
                else:
                    self.assertEqual(harness.s3_error(r.body)[0], "InvalidObjectState", r)

    def test_checksum_mode_is_served_from_cache(self):
        """Current SDKs send x-amz-checksum-mode: ENABLED on every GetObject;
        larder answers it from the cache, without x-amz-checksum-* headers
        until a HEAD with the mode taught them (so the SDK skips validation),
        with the same bytes and status."""
        key = "checksum-mode/obj"
        data = bytes(random.Random(7).getrandbits(8) for _ in range(3000))
        self.put(key, data)
        self.read_all(key)
        # (a HEAD with the mode asks S3 once for the checksums, which later
        # answers carry: test_crt.CrtChecksums)
        for method in ("GET",):
            with self.subTest(method=method):
                m = self.upstream.mark()
                r = self.via_larder(key, {"x-amz-checksum-mode": "ENABLED"}, method, None)
                self.assertEqual((r.status, r.cache), (200, "hit"), r)
                self.assertEqual(self.upstream_for(key, m), [])
                self.assertFalse(any(h.startswith("x-amz-checksum-") for h in r.headers), r)
                if method == "GET":
                    self.assertTrue(r.body == data)
        # boto3 as users have it (checksum validation on): the right bytes.
        self.assertEqual(self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read(), data)

    def test_writes_through_larder_invalidate(self):
        s3 = self.s3
        v1, v2, v3 = blob(41, 2 * C + 1), blob(42, C + 7), blob(43, 3 * C)

        def cached(key, data):
            self.assertTrue(self.read_all(key).body == data)
            r = self.read_all(key)
            self.assertEqual(r.cache, "hit", key)
            self.assertTrue(r.body == data)

        def fresh(key, data, what):
            r = self.read_all(key)
            self.assertTrue(r.body == data, "%s: stale bytes after the write" % what)
            self.assertEqual(r.headers.get("etag"), etag_of(data), what)
            self.assertEqual(r.headers.get("content-length"), str(len(data)), what)
            h = self.via_larder(key, method="HEAD")
            self.assertEqual(h.headers.get("etag"), etag_of(data), what)

        key = "write/put"
        self.put(key, v1)
        cached(key, v1)
        s3.put_object(Bucket=BUCKET, Key=key, Body=v2)
        fresh(key, v2, "PUT")

        cached(key, v2)
        self.put("write/src", v3)
        s3.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": "write/src"})
        fresh(key, v3, "copy")

        cached(key, v3)
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=key)
        part = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=up["UploadId"], PartNumber=1,
                              Body=v1)
        s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": [{"PartNumber": 1,
                                                                 "ETag": part["ETag"]}]})
        r = self.read_all(key)
        self.assertTrue(r.body == v1, "multipart completion: stale bytes")
        self.assertTrue(r.headers.get("etag", "").endswith('-1"'), r)

        cached(key, v1)
        s3.delete_object(Bucket=BUCKET, Key=key)
        for method in ("GET", "HEAD"):
            r = self.via_larder(key, method=method)
            self.assertEqual(r.status, 404, "%s after DELETE: %r" % (method, r))
        self.assertEqual(harness.s3_error(self.via_larder(key).body)[0], "NoSuchKey")

        key = "write/batch"
        self.put(key, v2)
        cached(key, v2)
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": key}]})
        self.assertEqual(self.via_larder(key).status, 404, "DeleteObjects did not invalidate")


class CacheRevalidation(CacheCase):
    """A direct client changes objects behind larder's back; metadata TTL 1 s."""
    EXTRA_ENV = {"LARDER_METADATA_TTL": "1", "LARDER_READAHEAD": "0"}

    def assertOneVersion(self, r, versions, what):
        """versions: (expected body, its object's ETag) pairs; r is one of them."""
        self.assertIn(r.status, (200, 206), "%s: %r" % (what, r))
        if r.complete:
            self.assertIn(r.body, [v for v, _ in versions],
                          "%s: a mix of versions (or wrong bytes)" % what)
            etag = [e for v, e in versions if v == r.body][0]
            self.assertEqual(r.headers.get("etag"), etag,
                             "%s: ETag does not belong to the bytes" % what)
        else:
            self.assertTrue(any(v.startswith(r.body) for v, _ in versions),
                            "%s: a cut-short answer that is not a prefix of one version" % what)

    def test_direct_overwrite_served_after_ttl(self):
        for name, v1, v2 in (("same-size", blob(50, 3 * C), blob(51, 3 * C)),
                             ("shrinks", blob(52, 3 * C + 5), blob(53, C // 2)),
                             ("grows", blob(54, C - 3), blob(55, 2 * C + 9))):
            with self.subTest(name):
                key = "reval/" + name
                self.put(key, v1)
                self.assertEqual(self.read_all(key).cache, "miss")
                self.put(key, v2)
                changed = time.monotonic()
                new_seen = False
                while time.monotonic() - changed < 3.5:
                    r = self.via_larder(key)
                    self.assertOneVersion(r, [(v1, etag_of(v1)), (v2, etag_of(v2))], name)
                    self.assertIn(r.cache, ("hit", "miss"), r)
                    if r.complete and r.body == v2:
                        new_seen = True
                    elif new_seen:
                        self.fail("%s: old bytes again after the new ones were served" % name)
                    time.sleep(0.1)
                r = self.via_larder(key)
                self.assertTrue(r.complete and r.body == v2, "%s: not the new version %.1f s "
                                "after the change (TTL 1 s): %r"
                                % (name, time.monotonic() - changed, r))
                self.assertEqual(r.headers.get("content-length"), str(len(v2)))
                h = self.via_larder(key, method="HEAD")
                self.assertEqual(h.headers.get("etag"), etag_of(v2))

    def test_partially_cached_object_changed_is_never_mixed(self):
        for attempt in range(3):
            with self.subTest(attempt=attempt):
                v1, v2 = blob(60 + attempt, 4 * C), blob(70 + attempt, 4 * C)
                key = "mix/%d" % attempt
                self.put(key, v1)
                r = self.via_larder(key, {"Range": "bytes=0-99"})  # chunk 0 of v1 cached
                self.assertEqual((r.body, r.cache), (v1[:100], "miss"))
                self.put(key, v2)
                # Within the TTL larder still believes v1; chunks 1-3 come with
                # If-Match v1 and get 412. Whatever it answers is one version.
                e1, e2 = etag_of(v1), etag_of(v2)
                self.assertOneVersion(self.via_larder(key), [(v1, e1), (v2, e2)], "full read")
                r = self.via_larder(key, {"Range": "bytes=%d-%d" % (C - 50, 3 * C + 50)})
                self.assertOneVersion(r, [(v1[C - 50:3 * C + 51], e1), (v2[C - 50:3 * C + 51], e2)],
                                      "ranged read")
                time.sleep(1.2)
                r = self.via_larder(key)
                self.assertTrue(r.complete and r.body == v2, "after the TTL: %r" % r)

    def test_metadata_replaced_in_place_served_after_ttl(self):
        # A copy of an object onto itself with new metadata (how one changes
        # a Content-Type) keeps its bytes, so its ETag, but is a new object:
        # S3 answers the revalidation's If-None-Match with 304 and the new
        # Last-Modified. After the TTL a read must show the new headers.
        key = "reval/recopied"
        data = blob(81, C + 7)
        self.put(key, data, ContentType="text/before", Metadata={"v": "1"})
        self.assertEqual(self.read_all(key).headers.get("content-type"), "text/before")
        time.sleep(1.1)  # Last-Modified has whole seconds
        self.direct.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": key},
                                MetadataDirective="REPLACE", ContentType="text/after",
                                Metadata={"v": "2"})
        time.sleep(1.2)
        for method in ("GET", "HEAD"):
            r = self.assertSameAsMoto(key, method=method, data=data)
            self.assertEqual((r.status, r.headers.get("etag")), (200, etag_of(data)), r)
            self.assertEqual(r.headers.get("content-type"), "text/after", r)
            self.assertEqual(r.headers.get("x-amz-meta-v"), "2", r)

    def test_same_second_rewrite_in_a_versioned_bucket_served_after_ttl(self):
        # Put again with the same bytes and new headers within one second:
        # the same ETag and Last-Modified (whole seconds), but in a versioned
        # bucket another version id, which S3's 304 names. After the TTL a
        # read must show the new version's headers.
        bucket = "cache-versioned"
        self.direct.create_bucket(Bucket=bucket)
        self.direct.put_bucket_versioning(Bucket=bucket,
                                          VersioningConfiguration={"Status": "Enabled"})
        data = blob(82, 1000)
        for attempt in range(5):
            key = "reval/same-second-%d" % attempt
            while time.time() % 1 > 0.05:  # early in a second: all three in it
                time.sleep(0.01)
            v1 = self.direct.put_object(Bucket=bucket, Key=key, Body=data,
                                        ContentType="text/before")["VersionId"]
            r = self.via_larder(key, bucket=bucket)
            self.assertEqual(r.headers.get("content-type"), "text/before", r)
            v2 = self.direct.put_object(Bucket=bucket, Key=key, Body=data,
                                        ContentType="text/after")["VersionId"]
            lm = {self.direct.head_object(Bucket=bucket, Key=key, VersionId=v)["LastModified"]
                  for v in (v1, v2)}
            if len(lm) == 1:
                break
        else:
            self.fail("no two writes in one second in 5 tries")
        time.sleep(1.2)
        for method in ("GET", "HEAD"):
            r = self.via_larder(key, method=method, bucket=bucket)
            self.assertEqual((r.status, r.headers.get("content-type"),
                              r.headers.get("x-amz-version-id")), (200, "text/after", v2), r)

    def test_tags_changed_upstream_served_after_ttl(self):
        # Tags change neither the ETag nor Last-Modified; the 304 names the
        # new count (x-amz-tagging-count), and a read after the TTL shows it.
        for name, first, then in (("changed", "a=1", {"a": "1", "b": "2", "c": "3"}),
                                  ("added", None, {"a": "1"})):
            key = "reval/tags-" + name
            extra = {"Tagging": first} if first else {}
            self.direct.put_object(Bucket=BUCKET, Key=key, Body=b"tagged", **extra)
            r = self.via_larder(key)
            self.assertEqual(r.headers.get("x-amz-tagging-count"), "1" if first else None, r)
            self.direct.put_object_tagging(Bucket=BUCKET, Key=key, Tagging={"TagSet": [
                {"Key": k, "Value": v} for k, v in then.items()]})
            time.sleep(1.2)
            for method in ("GET", "HEAD"):
                r = self.via_larder(key, method=method)
                theirs = self.via_moto(key, method=method)
                self.assertEqual(r.headers.get("x-amz-tagging-count"),
                                 theirs.headers.get("x-amz-tagging-count"), (name, method, r))
            self.assertEqual(r.headers.get("x-amz-tagging-count"), str(len(then)), r)

    def test_deleted_upstream_is_404_after_ttl(self):
        key = "reval/deleted"
        data = blob(80, C + 1)
        self.put(key, data)
        self.read_all(key)
        self.direct.delete_object(Bucket=BUCKET, Key=key)
        time.sleep(1.5)
        r = self.via_larder(key)
        self.assertEqual(r.status, 404, r)
        self.assertEqual(harness.s3_error(r.body)[0], "NoSuchKey")


class CacheRevalidateEveryRead(CacheCase):
    """LARDER_METADATA_TTL=0 (a valid setting: revalidate on every read).
    Until audit round 14 the reader that learnt an object found what it had
    just learnt already stale, learnt it again, and so on without end: every
    GET and HEAD hung until the client gave up (tens of upstream requests a
    second meanwhile, on after the client had gone)."""
    EXTRA_ENV = {"LARDER_METADATA_TTL": "0", "LARDER_READAHEAD": "0"}

    def test_every_read_is_answered_and_sees_a_change(self):
        key = "ttl0/obj"
        v1, v2 = blob(90, 2 * C + 7), blob(91, C // 3)
        self.put(key, v1)
        cases = ((None, "GET", v1), (None, "HEAD", b""), ({"Range": "bytes=5-9"}, "GET", v1[5:10]),
                 ({"Range": "bytes=%d-" % (C + 1)}, "GET", v1[C + 1:]))
        for attempt in range(2):  # the first learns the object, the second revalidates it
            for headers, method, want in cases:
                m = self.upstream.mark()
                t0 = time.monotonic()
                r = request(self.larder.url, method, harness.key_path(BUCKET, key), headers,
                            timeout=10)
                took = time.monotonic() - t0
                what = (attempt, method, headers, r, took)
                self.assertTrue(r.status in (200, 206) and r.complete, what)
                self.assertTrue(r.body == want, what)
                self.assertLess(took, 5, what)
                # The revalidation (or the learning GET) and the chunks the
                # read needs; never a loop.
                self.assertLessEqual(len(self.upstream_for(key, m)), 4, what)
        self.put(key, v2)  # behind larder's back: the very next read sees it
        r = request(self.larder.url, "GET", harness.key_path(BUCKET, key), timeout=10)
        self.assertTrue(r.status == 200 and r.body == v2, r)
        self.assertEqual(r.headers.get("etag"), etag_of(v2))


class CacheNegative(CacheCase):
    """404s remembered (LARDER_NEGATIVE_TTL): a remembered one answers as S3 does."""
    EXTRA_ENV = {"LARDER_NEGATIVE_TTL": "60"}

    def test_missing_key_is_remembered(self):
        key = "neg/missing"
        for attempt in range(2):
            m = self.upstream.mark()
            r = self.via_larder(key)
            self.assertEqual((r.status, harness.s3_error(r.body)[0]), (404, "NoSuchKey"), r)
            self.assertEqual(len(self.upstream_for(key, m)), 1 if attempt == 0 else 0)

    def test_remembered_404_names_the_key(self):
        # S3's NoSuchKey body names the key; the remembered answer does too.
        key = "neg/named key"
        theirs = self.via_moto(key)
        want = ET.fromstring(theirs.body).findtext("Key")
        self.assertEqual(want, key)
        for attempt in range(2):
            m = self.upstream.mark()
            r = self.via_larder(key)
            self.assertEqual(len(self.upstream_for(key, m)), 1 if attempt == 0 else 0)
            self.assertEqual((r.status, ET.fromstring(r.body).findtext("Key")), (404, want),
                             (attempt, r.body))

    def test_missing_bucket_is_not_a_missing_key(self):
        # A 404 NoSuchBucket is no news of the key: every read gets S3's code.
        bucket = "cache-no-such-bucket"
        for attempt in range(2):
            with self.subTest(attempt=attempt):
                r = self.via_larder("neg/obj", bucket=bucket)
                theirs = self.via_moto("neg/obj", bucket=bucket)
                self.assertEqual((r.status, harness.s3_error(r.body)[0]),
                                 (404, "NoSuchBucket"), r)
                self.assertEqual(harness.s3_error(theirs.body)[0], "NoSuchBucket")


if __name__ == "__main__":
    unittest.main()
