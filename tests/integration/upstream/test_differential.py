"""A seeded differential test: the same GET and HEAD requests straight to the
upstream (moto, signed with its key) and through larder (signed with the
client key), twice (cold, then from the cache), compared as a client sees
them: status, S3 error code, the headers that describe the object, the bytes,
and that a cached answer never takes long where the upstream's did not.

The requests are drawn from a fixed seed over the forms moto answers as S3
does. Audit round 14 ran the same tester over every form and sorted out where
moto departs from S3: it ignores the `response-*` overrides, `If-Match: *` and
lists of tags, judges each conditional header alone, answers dates in the
obsolete HTTP-date forms, a part the object lacks and `partNumber=0` with 500,
answers 416 a Range S3 ignores (reversed, several) that starts past the end,
leaves `Content-Range` off a 416, puts the object's headers on a HEAD's 412
and drops the delete-marker headers from a GET's 404. Those forms are held to
S3's rules elsewhere (test_conformance, test_cache). What larder answers by
design where moto does not is allowed below by name: a 304's `Content-Length`
(the object's size, RFC 9110 8.6), a 416's `Content-Range: bytes */size`
(S3's), a 304's `Cache-Control` and `Expires` (RFC 9110 15.4.5) without
`Accept-Ranges`, and an error answer's body to a HEAD.

The seed is fixed, so a failure names one request that can be sent again;
DIFF_SEED and DIFF_COUNT in the environment draw others.
"""
import datetime
import email.utils
import os
import random
import time
import xml.etree.ElementTree as ET
from urllib.parse import quote

from harness import CLIENT_KEY, CLIENT_SECRET, LarderCase, http_request, s3_error, sign_headers

CHUNK = 64 * 1024
BUCKET = "differ"
VBUCKET = "differ-versions"
SEED = int(os.environ.get("DIFF_SEED", "2"))  # one whose draw has the empty tail read
COUNT = int(os.environ.get("DIFF_COUNT", "240"))

# Headers of one response or connection, moto's own request id, and the
# request headers of the upload moto replays on some answers (S3 never
# answers with them).
PER_RESPONSE = {"date", "x-amz-request-id", "x-amz-id-2", "server", "connection", "keep-alive",
                "x-amzn-requestid", "access-control-allow-origin", "transfer-encoding",
                "x-amz-sdk-checksum-algorithm", "x-amz-content-sha256"}
ODD_KEYS = ("a b", "a+b", "100%", "ünï/ç", "x//y", "dir/", "~tilde", "semi;colon=eq&amp",
            "q?mark", "L" * 700, "sp end ")


def target(bucket, key, query=()):
    path = "/%s/%s" % (bucket, quote(key.encode(), safe="/~"))
    if query:
        path += "?" + "&".join("%s=%s" % (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
                               for k, v in query)
    return path


def http_date(ts):
    d = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)
    return email.utils.format_datetime(d, usegmt=True)


class Differential(LarderCase):
    LARDER_ENV = {"LARDER_CHUNK_SIZE": "64KiB", "LARDER_RAM_CACHE_SIZE": "64MiB",
                  "LARDER_METADATA_TTL": "300"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = cls.direct
        d.create_bucket(Bucket=BUCKET)
        d.create_bucket(Bucket=VBUCKET)
        d.put_bucket_versioning(Bucket=VBUCKET, VersioningConfiguration={"Status": "Enabled"})
        rnd = random.Random(SEED)
        cls.objects = {}

        def put(bucket, key, data, **kw):
            cls.objects[(bucket, key)] = data
            return d.put_object(Bucket=bucket, Key=key, Body=data, **kw)

        for key, n in (("empty", 0), ("one", 1), ("small", 100), ("two-chunks", CHUNK + 5),
                       ("five-chunks", 5 * CHUNK - 3), ("exact", 2 * CHUNK)):
            put(BUCKET, key, rnd.randbytes(n))
        put(BUCKET, "described", b"<p>described</p>" * 60, ContentType="text/html; charset=utf-8",
            ContentEncoding="gzip", ContentDisposition='attachment; filename="x y.html"',
            CacheControl="max-age=3600, public", Expires=datetime.datetime(2031, 5, 6, 7, 8, 9),
            ContentLanguage="de-CH", Metadata={"Alpha": "one", "b-2": "tw o"},
            StorageClass="STANDARD_IA", Tagging="k=v")
        put(BUCKET, "encrypted", b"s" * 3000, ServerSideEncryption="AES256")
        for key in ODD_KEYS:
            put(BUCKET, key, ("key:" + key).encode() * 7)
        up = d.create_multipart_upload(Bucket=BUCKET, Key="parts")
        first, last = rnd.randbytes(5 * 1024 * 1024), rnd.randbytes(1000)
        etags = [d.upload_part(Bucket=BUCKET, Key="parts", UploadId=up["UploadId"], PartNumber=i,
                               Body=body)["ETag"] for i, body in ((1, first), (2, last))]
        d.complete_multipart_upload(Bucket=BUCKET, Key="parts", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": [
                                        {"PartNumber": i + 1, "ETag": e}
                                        for i, e in enumerate(etags)]})
        cls.objects[(BUCKET, "parts")] = first + last
        cls.old_version = put(VBUCKET, "v", b"version one")["VersionId"]
        put(VBUCKET, "v", b"version two!")
        put(VBUCKET, "gone", b"doomed")
        cls.marker = d.delete_object(Bucket=VBUCKET, Key="gone").get("VersionId")
        cls.heads = {k: d.head_object(Bucket=k[0], Key=k[1]) for k in cls.objects
                     if k[1] != "gone"}

    # -- the requests

    def ranges(self, size, rnd):
        out = ["bytes=0-0", "bytes=0-", "bytes=-1", "bytes=-0", "bytes=5-2", "bytes=0-1,3-4",
               "bytes=abc", "bytes=%d-" % size, "bytes=%d-%d" % (size, size + 5),
               "bytes=%d-%d" % (max(0, size - 3), size + 10), "bytes=-%d" % (size + 10),
               "bytes=%d-%d" % (CHUNK - 1, CHUNK), "bytes=%d-" % CHUNK]
        if size <= 5:  # moto answers 416 a Range S3 ignores that starts past the end
            out.remove("bytes=5-2")
        if not size:  # and any Range of an empty object
            return [r for r in out if r not in ("bytes=0-1,3-4", "bytes=abc")]
        if size:
            a = rnd.randrange(size)
            out += ["bytes=%d-%d" % (a, rnd.randrange(a, size + 100)),
                    "bytes=-%d" % rnd.randrange(1, size + 1)]
        return out

    def conditionals(self, head, rnd):
        etag, lm = head["ETag"], head["LastModified"].timestamp()
        choices = {"If-Match": [etag, '"nope"'],
                   "If-None-Match": [etag, '"nope"', '"nope", "other"'],
                   "If-Modified-Since": [http_date(t) for t in (lm, lm - 1, lm + 1, 0)],
                   "If-Unmodified-Since": [http_date(t) for t in (lm, lm - 1, lm + 1, 0)]}
        name = rnd.choice(sorted(choices))  # one: moto judges each alone, not in S3's order
        return {name: rnd.choice(choices[name])}

    def draw(self, rnd):
        """(method, bucket, key, query, headers) of one request."""
        plain = sorted(k for b, k in self.objects if b == BUCKET)
        kind = rnd.choice(("whole", "range", "range", "cond", "cond", "cond-range", "part",
                           "version", "odd", "missing"))
        method = rnd.choice(("GET", "GET", "HEAD"))
        bucket, key, query, headers = BUCKET, rnd.choice(plain), [], {}
        if kind == "odd":
            key = rnd.choice(ODD_KEYS)
        if kind in ("range", "cond-range"):
            headers["Range"] = rnd.choice(self.ranges(len(self.objects[(bucket, key)]), rnd))
        if kind in ("cond", "cond-range"):
            headers.update(self.conditionals(self.heads[(bucket, key)], rnd))
        if kind == "part":
            key = rnd.choice(("parts", "parts", "small", "empty"))
            # moto answers 500 a part the object lacks, "0" or "x" (S3: 4xx)
            query.append(("partNumber", rnd.choice(("1", "2") if key == "parts" else ("1",))))
        if kind == "version":
            bucket, key = VBUCKET, rnd.choice(("v", "gone", "absent"))
            vid = rnd.choice((self.old_version, "null", self.marker, None))
            if vid is not None:
                query.append(("versionId", vid))
        if kind == "missing":
            bucket, key = rnd.choice(((BUCKET, "absent"), (VBUCKET, "absent"),
                                      ("differ-no-bucket", "k")))
        return method, bucket, key, query, headers

    # -- the comparison

    def answer(self, base, access, secret, method, path, headers):
        h = sign_headers(method, base + path, access, secret, headers)
        t0 = time.monotonic()
        status, hdrs, body = http_request(base, method, path, h)
        took = time.monotonic() - t0
        seen = {k: v for k, v in hdrs.items()
                if k not in PER_RESPONSE and not k.startswith("x-larder-")}
        if status >= 300:
            # An error document's RequestId and HostId are the answerer's own.
            try:
                body = (s3_error(body)[0], ET.fromstring(body).findtext("Condition"))
            except ET.ParseError:
                body = (status, body[:200])  # not S3 XML: compared as it came
            if method == "HEAD":  # no body: what it would have been is not the client's
                seen = {}
            else:
                seen.pop("content-length", None)
        return status, seen, body, took

    def allowed(self, status, name, mine, theirs, size, whole):
        """Where larder answers by design where moto does not (module docstring);
        whole: the headers of the object's 200."""
        if status == 304 and name == "content-length":
            return theirs is None and mine == str(size)
        if status == 304 and name in ("cache-control", "expires"):
            return theirs is None and mine == whole.get(name)  # RFC 9110 15.4.5
        if status == 304 and name in ("accept-ranges", "x-amz-storage-class"):
            return mine is None  # moto's 304 has them, larder's none (test_conformance)
        if status == 416 and name == "content-range":
            return theirs is None and mine == "bytes */%d" % size
        return False

    def test_same_answers_cold_and_warm(self):
        rnd = random.Random(SEED)
        started = time.monotonic()
        families = set()
        for n in range(COUNT):
            method, bucket, key, query, headers = self.draw(rnd)
            path = target(bucket, key, query)
            size = len(self.objects.get((bucket, key), b""))
            head = self.heads.get((bucket, key))
            whole = head["ResponseMetadata"]["HTTPHeaders"] if head else {}
            want = self.answer(self.upstream.url, self.upstream.access_key,
                               self.upstream.secret_key, method, path, headers)
            self.assertLess(want[0], 500, "moto could not answer %s %s %s: draw another form"
                            % (method, path, headers))
            for attempt in ("cold", "warm"):
                got = self.answer(self.larder.url, CLIENT_KEY, CLIENT_SECRET, method, path,
                                  headers)
                what = "request %d (seed %d), %s: %s %s %s" % (n, SEED, attempt, method, path,
                                                               headers)
                self.assertEqual(got[0], want[0], what)
                for name in sorted(set(got[1]) | set(want[1])):
                    if got[1].get(name) != want[1].get(name):
                        self.assertTrue(self.allowed(got[0], name, got[1].get(name),
                                                     want[1].get(name), size, whole),
                                        "%s: %s larder %r, upstream %r" % (
                                            what, name, got[1].get(name), want[1].get(name)))
                mine, theirs = got[2], want[2]
                self.assertTrue(mine == theirs, "%s: the bodies differ: %r, upstream %r"
                                % (what, mine if mine is None or len(mine) < 300 else "...",
                                   theirs if theirs is None or len(theirs) < 300 else "..."))
                # A cached answer never takes long where the upstream's did not.
                self.assertLess(got[3], max(2.0, 4 * want[3]), what)
            families.add((method, want[0]))
        # The draw reached the answers it is for.
        for status in (200, 206, 304, 412, 416, 404):
            self.assertIn(status, {s for _, s in families}, families)
        self.assertLess(time.monotonic() - started, 60)
