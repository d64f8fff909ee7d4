"""S3 conformance points found by a public S3 test suite, each checked against
what the upstream (moto, enforcing signatures) answers to the same request.

* A PUT whose body comes with `Transfer-Encoding: chunked` and no
  Content-Length (ceph s3-tests test_object_write_with_chunked_transfer_encoding:
  S3 stores it). The payload hash is still checked, signed or UNSIGNED-PAYLOAD.
* A user metadata header with an empty value (`x-amz-meta-meta1:`) is part of
  the object: HEAD and GET carry it, from the cache as from S3.
* Cached HEAD/GET headers match the upstream's, and conditional reads on hits
  follow the precedence the GetObject reference gives: If-Match compares
  strongly (a weak tag fails it), a 304 carries what a cache in front updates
  its copy with, and a 412 names the condition that failed.
"""
import datetime
import email.utils
import hashlib
import http.client
import os
import socket
import time
import xml.etree.ElementTree as ET

import harness
from harness import (CLIENT_KEY, CLIENT_SECRET, LarderCase, http_request, raw_exchange,
                     s3_error, sign_headers)

BUCKET = "conform"


def _connect(base):
    host, port = base.replace("http://", "").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=30)


def chunked_put(base, path, data, key, secret, unsigned=False, sent=None):
    """A PUT of `data` signed with its hash (or UNSIGNED-PAYLOAD), sent with
    Transfer-Encoding: chunked and no Content-Length; `sent` replaces the
    bytes on the wire (a body altered after signing). Returns (status, body)."""
    h = sign_headers("PUT", base + path, key, secret, body=data,
                     payload="UNSIGNED-PAYLOAD" if unsigned else None)
    h = {k: v for k, v in h.items() if k.lower() != "content-length"}
    h["Transfer-Encoding"] = "chunked"
    body = data if sent is None else sent
    pieces = [body[i:i + 40000] for i in range(0, len(body), 40000)]
    c = _connect(base)
    try:
        c.putrequest("PUT", path, skip_accept_encoding=True)
        for k, v in h.items():
            c.putheader(k, v)
        c.endheaders()
        try:
            for p in pieces:
                c.send(b"%x\r\n%s\r\n" % (len(p), p))
            c.send(b"0\r\n\r\n")
        except OSError:
            pass  # answered (and closed) before the body was all sent
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def raw_head_lines(base, method, path, key, secret):
    """(status, [(name, value)], body) of a signed request, headers exactly as
    sent (http.client keeps a header whose value is empty)."""
    h = sign_headers(method, base + path, key, secret)
    c = _connect(base)
    try:
        c.request(method, path, headers=h)
        r = c.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        c.close()


class ChunkedPut(LarderCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.data = os.urandom(300 * 1024 + 7)

    def stored(self, key):
        try:
            return self.direct.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        except self.direct.exceptions.NoSuchKey:
            return None

    def test_chunked_put_signed_and_unsigned(self):
        for unsigned in (False, True):
            for name, base, key, secret in (
                    ("direct", self.upstream.url, self.upstream.access_key,
                     self.upstream.secret_key),
                    ("larder", self.larder.url, CLIENT_KEY, CLIENT_SECRET)):
                k = "chunked-%s-%s" % (name, "unsigned" if unsigned else "signed")
                mark = self.upstream.mark()
                st, body = chunked_put(base, "/%s/%s" % (BUCKET, k), self.data, key, secret,
                                       unsigned=unsigned)
                self.assertEqual(st, 200, (k, body))
                self.assertEqual(self.stored(k), self.data, k)
                sent = [dict(r["headers"]) for r in self.upstream.requests(mark)
                        if r["method"] == "PUT"]
                self.assertEqual(sent[0].get("x-amz-content-sha256"),
                                 "UNSIGNED-PAYLOAD" if unsigned else hashlib.sha256(
                                     self.data).hexdigest(), k)
                if name == "larder":  # streamed upstream chunked, not buffered
                    puts = [dict(r["headers"]) for r in self.upstream.from_larder(mark)
                            if r["method"] == "PUT"]
                    self.assertEqual(len(puts), 1, puts)
                    self.assertEqual(puts[0].get("transfer-encoding"), "chunked", puts)
                    self.assertNotIn("content-length", puts[0])
                # Read back through larder: byte-exact.
                got = self.s3.get_object(Bucket=BUCKET, Key=k)["Body"].read()
                self.assertEqual(hashlib.sha256(got).digest(),
                                 hashlib.sha256(self.data).digest(), k)
        self.upstream.assert_signed_correctly(self)

    def test_chunked_put_small_and_empty(self):
        for k, data in (("chunked-one", b"x"), ("chunked-empty", b"")):
            st, body = chunked_put(self.larder.url, "/%s/%s" % (BUCKET, k), data,
                                   CLIENT_KEY, CLIENT_SECRET)
            self.assertEqual(st, 200, (k, body))
            self.assertEqual(self.stored(k), data, k)

    def test_chunked_put_tampered_refused(self):
        bad = bytearray(self.data)
        bad[-1] ^= 1
        mark = self.upstream.mark()
        st, body = chunked_put(self.larder.url, "/%s/chunked-bad" % BUCKET, self.data,
                               CLIENT_KEY, CLIENT_SECRET, sent=bytes(bad))
        self.assertEqual((st, s3_error(body)[0]), (400, "XAmzContentSHA256Mismatch"), body)
        self.assertIsNone(self.stored("chunked-bad"), "a tampered upload was stored")
        # Upstream never received the complete (unverified) body.
        for r in self.upstream.from_larder(mark):
            if r["method"] == "PUT":
                self.assertLess(r.get("bytes_in") or 0, len(self.data))
        # A shorter body than the one signed: refused as well.
        st, body = chunked_put(self.larder.url, "/%s/chunked-short" % BUCKET, self.data,
                               CLIENT_KEY, CLIENT_SECRET, sent=self.data[:-10])
        self.assertEqual((st, s3_error(body)[0]), (400, "XAmzContentSHA256Mismatch"), body)
        self.assertIsNone(self.stored("chunked-short"))

    def test_chunked_put_cut_short_not_stored(self):
        # UNSIGNED-PAYLOAD: no hash says the body is whole, only its last chunk.
        path = "/%s/chunked-cut" % BUCKET
        h = sign_headers("PUT", self.larder.url + path, CLIENT_KEY, CLIENT_SECRET,
                         payload="UNSIGNED-PAYLOAD")
        h["Transfer-Encoding"] = "chunked"
        head = "PUT %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n" % (path, self.larder.port, "".join(
            "%s: %s\r\n" % kv for kv in h.items() if kv[0].lower() != "content-length"))
        piece = self.data[:100000]
        mark = self.upstream.mark()
        with socket.create_connection(("127.0.0.1", self.larder.port), timeout=10) as sock:
            sock.sendall(head.encode())
            time.sleep(0.3)  # the upstream request has started, and waits for bytes
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            time.sleep(0.5)  # upstream has what larder passed on by now
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
                r.get("status") is None for r in self.upstream.from_larder(mark)):
            time.sleep(0.1)
        self.assertIsNone(self.stored("chunked-cut"), "a body cut short was stored")


class CachedHeaders(LarderCase):
    """What a cached HEAD/GET carries, against what the upstream answers."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.direct.put_bucket_versioning(Bucket=BUCKET,
                                         VersioningConfiguration={"Status": "Enabled"})

    def put_with_empty_meta(self, base, key, access, secret):
        path = "/%s/%s" % (BUCKET, key)
        h = sign_headers("PUT", base + path, access, secret,
                         {"x-amz-meta-meta1": "", "x-amz-meta-other": "v"}, body=b"hello")
        c = _connect(base)
        try:
            c.request("PUT", path, body=b"hello", headers=h)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def meta_of(self, base, method, key, access, secret):
        st, hdrs, body = raw_head_lines(base, method, "/%s/%s" % (BUCKET, key), access, secret)
        self.assertEqual(st, 200, body)
        return {k.lower(): v for k, v in hdrs if k.lower().startswith("x-amz-meta-")}, hdrs

    def test_empty_value_kept_on_miss_and_hit(self):
        up = (self.upstream.url, self.upstream.access_key, self.upstream.secret_key)
        me = (self.larder.url, CLIENT_KEY, CLIENT_SECRET)
        # A GET after a first HEAD may find chunk 0 still arriving (the HEAD
        # is answered from the headers of the fetch that fills it), and is
        # then rightly a miss: so one key is read GET first, another HEAD
        # first and then only by HEAD.
        for who, (base, access, secret) in (("direct", up), ("larder", me)):
            for first, methods in (("get", ("GET", "HEAD", "GET", "HEAD")),
                                   ("head", ("HEAD", "HEAD"))):
                key = "empty-meta-%s-%s" % (who, first)
                st, body = self.put_with_empty_meta(base, key, access, secret)
                self.assertEqual(st, 200, body)
                want, _ = self.meta_of(self.upstream.url, "HEAD", key, *up[1:])
                self.assertEqual(want, {"x-amz-meta-meta1": "", "x-amz-meta-other": "v"},
                                 "what the upstream answers")
                for n, method in enumerate(methods):
                    got, hdrs = self.meta_of(self.larder.url, method, key, CLIENT_KEY, CLIENT_SECRET)
                    self.assertEqual(got, want, (who, method, hdrs))
                    cache = {k.lower(): v for k, v in hdrs}.get("x-larder-cache")
                    self.assertEqual(cache, "hit" if n else "miss", (who, method, hdrs))
            # The pass-through (a versionId request is not cached) keeps it too.
            vid = self.direct.head_object(Bucket=BUCKET, Key=key)["VersionId"]
            got, hdrs = self.meta_of(self.larder.url, "HEAD", key + "?versionId=" + vid,
                                     CLIENT_KEY, CLIENT_SECRET)
            self.assertEqual({k.lower(): v for k, v in hdrs}.get("x-larder-cache"), "bypass")
            self.assertEqual(got, want, (who, "pass-through", hdrs))
            # boto3 reads it back as an empty value.
            head = self.s3.head_object(Bucket=BUCKET, Key=key)
            self.assertEqual(head["Metadata"], {"meta1": "", "other": "v"})

    # Headers that describe one response or connection, and moto's own
    # (x-amzn-requestid, a CORS header S3 sends only to a CORS request).
    PER_RESPONSE = {"date", "x-amz-request-id", "x-amz-id-2", "server", "connection",
                    "keep-alive", "x-amzn-requestid", "access-control-allow-origin"}

    def headers(self, base, method, path, access, secret, extra=None):
        h = sign_headers(method, base + path, access, secret, extra)
        c = _connect(base)
        try:
            c.request(method, path, headers=h)
            r = c.getresponse()
            body = r.read()
            return r.status, sorted((k.lower(), v) for k, v in r.getheaders()
                                    if k.lower() not in self.PER_RESPONSE
                                    and not k.lower().startswith("x-larder-")), body
        finally:
            c.close()

    def test_head_and_get_headers_match_upstream(self):
        import datetime
        key = "parity"
        self.direct.put_object(
            Bucket=BUCKET, Key=key, Body=b"hello world", ContentType="text/x-odd; charset=utf-8",
            ContentEncoding="gzip", ContentDisposition='attachment; filename="a b.txt"',
            CacheControl="max-age=60", Expires=datetime.datetime(2030, 1, 1),
            ContentLanguage="fr", Metadata={"MiXeD-Case": "Va Lue", "quoted": 'a "b"; c=d, e:f'},
            Tagging="a=b&c=d", StorageClass="STANDARD_IA")
        path = "/%s/%s" % (BUCKET, key)
        up = (self.upstream.access_key, self.upstream.secret_key)
        for method in ("HEAD", "GET", "HEAD", "GET"):  # the first is a miss, then hits
            want = self.headers(self.upstream.url, method, path, *up)
            got = self.headers(self.larder.url, method, path, CLIENT_KEY, CLIENT_SECRET)
            self.assertEqual(got, want, method)
        names = dict(want[1])
        for h in ("x-amz-version-id", "x-amz-storage-class", "x-amz-tagging-count", "expires",
                  "x-amz-meta-mixed-case", "content-disposition", "last-modified"):
            self.assertIn(h, names)  # the comparison above covered them

    def test_weak_if_match_never_matches(self):
        # RFC 9110 13.1.1: If-Match compares strongly, and a weak tag never
        # passes it (moto answers 412 too); If-None-Match compares weakly.
        key = "weak"
        self.direct.put_object(Bucket=BUCKET, Key=key, Body=b"weak tags")
        path = "/%s/%s" % (BUCKET, key)
        etag = self.direct.head_object(Bucket=BUCKET, Key=key)["ETag"]
        up = (self.upstream.access_key, self.upstream.secret_key)
        st, _, _ = self.headers(self.upstream.url, "GET", path, *up, {"If-Match": "W/" + etag})
        self.assertEqual(st, 412, "the upstream")
        for method in ("GET", "HEAD", "GET", "HEAD"):  # the first is a miss, then hits
            for extra, want in (({"If-Match": "W/" + etag}, 412),
                                ({"If-Match": '"other", W/%s, %s' % (etag, etag)}, 200),
                                ({"If-None-Match": "W/" + etag}, 304)):
                st, _, body = self.headers(self.larder.url, method, path, CLIENT_KEY,
                                           CLIENT_SECRET, extra)
                self.assertEqual(st, want, (method, extra, body))

    def test_not_modified_carries_what_a_cache_updates_with(self):
        # RFC 9110 15.4.5: a 304 carries the Cache-Control and Expires a 200
        # would, and (as S3's) the version's id and encryption; no
        # representation headers.
        key = "not-modified"
        self.direct.put_object(Bucket=BUCKET, Key=key, Body=b"n" * 5000,
                               CacheControl="max-age=60", Expires=datetime.datetime(2030, 1, 1),
                               ServerSideEncryption="AES256", ContentType="text/x-nm",
                               Metadata={"m": "1"})
        path = "/%s/%s" % (BUCKET, key)
        up = (self.upstream.access_key, self.upstream.secret_key)
        _, full, _ = self.headers(self.upstream.url, "HEAD", path, *up)
        full = dict(full)
        for method in ("GET", "HEAD", "GET", "HEAD"):  # the first is a miss, then hits
            st, hdrs, body = self.headers(self.larder.url, method, path, CLIENT_KEY,
                                          CLIENT_SECRET, {"If-None-Match": full["etag"]})
            got = dict(hdrs)
            self.assertEqual((st, body), (304, b""), method)
            for h in ("etag", "last-modified", "cache-control", "expires", "x-amz-version-id",
                      "x-amz-server-side-encryption"):
                self.assertEqual(got.get(h), full[h], (method, h, hdrs))
            for h in ("content-type", "x-amz-meta-m", "accept-ranges"):
                self.assertNotIn(h, got, (method, hdrs))

    def test_precondition_failed_names_the_condition(self):
        # S3's 412 body names the condition that failed (<Condition>).
        key = "condition"
        self.direct.put_object(Bucket=BUCKET, Key=key, Body=b"conditional")
        path = "/%s/%s" % (BUCKET, key)
        up = (self.upstream.access_key, self.upstream.secret_key)
        old = "Mon, 01 Jan 2001 00:00:00 GMT"
        for extra, cond in (({"If-Match": '"other"'}, "If-Match"),
                            ({"If-Unmodified-Since": old}, "If-Unmodified-Since")):
            st, _, body = self.headers(self.upstream.url, "GET", path, *up, extra)
            self.assertEqual((st, ET.fromstring(body).findtext("Condition")), (412, cond),
                             ("the upstream", extra))
            for attempt in range(2):
                st, _, body = self.headers(self.larder.url, "GET", path, CLIENT_KEY,
                                           CLIENT_SECRET, extra)
                self.assertEqual((st, ET.fromstring(body).findtext("Condition")), (412, cond),
                                 (extra, attempt, body))

    def test_if_range_serves_the_range_only_for_the_current_version(self):
        # RFC 9110 13.1.5: a Range with If-Range is served only when the
        # validator is the object's current one (its ETag, compared
        # strongly, or exactly its Last-Modified); otherwise the whole
        # object, 200. A client resuming a download of a version that has
        # changed since got 206 with the new version's bytes, to splice
        # onto the old ones. moto ignores If-Range: checked against larder.
        key = "if-range"
        data = bytes(range(256)) * 40
        self.direct.put_object(Bucket=BUCKET, Key=key, Body=data)
        path = "/%s/%s" % (BUCKET, key)
        head = self.direct.head_object(Bucket=BUCKET, Key=key)
        etag, lm = head["ETag"], head["ResponseMetadata"]["HTTPHeaders"]["last-modified"]
        rng = {"Range": "bytes=100-199"}
        cases = (({"If-Range": etag}, 206), ({"If-Range": '"stale"'}, 200),
                 ({"If-Range": "W/" + etag}, 200), ({"If-Range": lm}, 206),
                 ({"If-Range": "Mon, 01 Jan 2001 00:00:00 GMT"}, 200),
                 ({"If-Range": "not a validator"}, 200))
        for method in ("GET", "HEAD", "GET", "HEAD"):  # the first is a miss, then hits
            for extra, want in cases:
                st, hdrs, body = self.headers(self.larder.url, method, path, CLIENT_KEY,
                                              CLIENT_SECRET, dict(rng, **extra))
                hdrs = dict(hdrs)
                self.assertEqual(st, want, (method, extra))
                if want == 206:
                    self.assertEqual(hdrs.get("content-range"), "bytes 100-199/%d" % len(data))
                    self.assertEqual(body, data[100:200] if method == "GET" else b"")
                else:
                    self.assertNotIn("content-range", hdrs, (method, extra))
                    self.assertEqual(hdrs.get("content-length"), str(len(data)), (method, extra))
                    self.assertTrue(body == (data if method == "GET" else b""), (method, extra))
        # Without a Range, If-Range changes nothing.
        st, _, body = self.headers(self.larder.url, "GET", path, CLIENT_KEY, CLIENT_SECRET,
                                   {"If-Range": '"stale"'})
        self.assertTrue(st == 200 and body == data)

    def test_obsolete_http_date_forms(self):
        # RFC 9110 5.6.7: a recipient MUST accept the RFC 850 and asctime
        # forms of an HTTP-date as well as the IMF-fixdate (the GetObject
        # reference defers to RFC 7232 for these headers). larder took them
        # for no date: If-Unmodified-Since ignored served the object where
        # its IMF form gets 412, If-Modified-Since ignored served it whole
        # where the IMF form gets 304. moto answers them 500, so each form
        # is held to larder's answer for the IMF form of the same instant.
        key = "old-dates"
        data = bytes(range(256)) * 4
        self.direct.put_object(Bucket=BUCKET, Key=key, Body=data)
        path = "/%s/%s" % (BUCKET, key)
        lm = self.direct.head_object(Bucket=BUCKET, Key=key)["LastModified"].timestamp()

        def forms(t):
            d = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
            return (email.utils.format_datetime(d, usegmt=True),
                    d.strftime("%A, %d-%b-%y %H:%M:%S GMT"),
                    d.strftime("%a %b ") + "%2d" % d.day + d.strftime(" %H:%M:%S %Y"))

        for method in ("GET", "HEAD", "GET", "HEAD"):  # the first is a miss, then hits
            for t in (lm - 1, lm, lm + 1):
                imf, rfc850, asctime = forms(t)
                for name, extra in (("If-Modified-Since", {}), ("If-Unmodified-Since", {}),
                                    ("If-Range", {"Range": "bytes=10-19"})):
                    want, _, _ = self.headers(self.larder.url, method, path, CLIENT_KEY,
                                              CLIENT_SECRET, dict(extra, **{name: imf}))
                    for old in (rfc850, asctime):
                        st, _, _ = self.headers(self.larder.url, method, path, CLIENT_KEY,
                                                CLIENT_SECRET, dict(extra, **{name: old}))
                        self.assertEqual(st, want, (method, name, old, imf))
        # What the IMF forms give here, so the loop above compared answers
        # that differ: 304 and 412 on the object's own date and the one before.
        imf, rfc850, asctime = forms(lm)
        for name, want in (("If-Modified-Since", 304), ("If-Range", 206)):
            st, _, _ = self.headers(self.larder.url, "GET", path, CLIENT_KEY, CLIENT_SECRET,
                                    {name: asctime, "Range": "bytes=10-19"})
            self.assertEqual(st, want, name)
        st, _, _ = self.headers(self.larder.url, "GET", path, CLIENT_KEY, CLIENT_SECRET,
                                {"If-Unmodified-Since": forms(lm - 1)[1]})
        self.assertEqual(st, 412)

    def test_conditional_precedence_on_hits(self):
        # The GetObject reference: If-Match true and If-Unmodified-Since false
        # gives 200; If-None-Match false and If-Modified-Since true gives 304
        # (RFC 9110: the entity-tag condition decides). moto judges each
        # header alone, so this is checked against larder only.
        key = "cond"
        self.direct.put_object(Bucket=BUCKET, Key=key, Body=b"conditional")
        path = "/%s/%s" % (BUCKET, key)
        st, hdrs, _ = self.headers(self.larder.url, "HEAD", path, CLIENT_KEY, CLIENT_SECRET)
        etag, lm = dict(hdrs)["etag"], dict(hdrs)["last-modified"]
        old = "Mon, 01 Jan 2001 00:00:00 GMT"
        for method in ("GET", "HEAD"):
            for extra, want in (({"If-None-Match": etag}, 304),
                                ({"If-Modified-Since": lm}, 304),
                                ({"If-None-Match": '"other"'}, 200),
                                ({"If-Match": '"other"'}, 412),
                                ({"If-Unmodified-Since": old}, 412),
                                ({"If-Match": etag, "If-Unmodified-Since": old}, 200),
                                ({"If-None-Match": etag, "If-Modified-Since": old}, 304),
                                ({"If-None-Match": '"other"', "If-Modified-Since": lm}, 200)):
                st, hdrs, body = self.headers(self.larder.url, method, path, CLIENT_KEY,
                                              CLIENT_SECRET, extra)
                self.assertEqual(st, want, (method, extra, body))
                if want != 412:
                    self.assertEqual(dict(hdrs).get("etag"), etag, (method, extra))
                elif method == "GET":
                    self.assertEqual(s3_error(body)[0], "PreconditionFailed")
                if want == 304:
                    # RFC 9110 8.6: a 304 may carry Content-Length only as the
                    # length a 200 would have (a cache in front may store it).
                    self.assertIn(dict(hdrs).get("content-length"), (None, "11"),
                                  (method, extra))
                    self.assertEqual(body, b"")


def signed_head(base, method, path, headers=None, lines=(), body=b""):
    """A signed request's head as bytes, `lines` added unsigned after the rest."""
    h = sign_headers(method, base + path, CLIENT_KEY, CLIENT_SECRET, headers, body=body)
    h.setdefault("Host", base.replace("http://", ""))
    text = "%s %s HTTP/1.1\r\n" % (method, path)
    text += "".join("%s: %s\r\n" % kv for kv in h.items())
    text += "".join("%s\r\n" % line for line in lines)
    return text.encode() + b"\r\n"


class HttpEdges(LarderCase):
    """Requests that are legal HTTP but unusual: larder answers them as S3
    would, or refuses them, and never reads one request two ways."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.direct.put_object(Bucket=BUCKET, Key="small", Body=b"0123456789" * 10,
                              ContentType="text/x-edge", CacheControl="no-cache")
        cls.etag = cls.direct.head_object(Bucket=BUCKET, Key="small")["ETag"]

    def test_two_content_lengths_refused_and_closed(self):
        # libmicrohttpd frames the body by the first Content-Length; a
        # proxy in front may use the last. The bytes past the first length
        # were answered as a request of their own (a GET here).
        second = signed_head(self.larder.url, "GET", "/%s/small" % BUCKET,
                             lines=["Connection: close"])
        for lengths in ((5, 5 + len(second)), (0, len(second)), (5, 5)):
            first = signed_head(self.larder.url, "PUT", "/%s/smuggle" % BUCKET, body=b"hello",
                                lines=["Content-Length: %d" % n for n in lengths])
            got = raw_exchange(self.larder.port, first + b"hello" + second)
            self.assertEqual(got.count(b"HTTP/1.1 "), 1, (lengths, got[:600]))
            self.assertTrue(got.startswith(b"HTTP/1.1 400 "), (lengths, got[:600]))
            self.assertIn(b"Connection: close", got.split(b"\r\n\r\n")[0], lengths)
            self.assertEqual(s3_error(got.split(b"\r\n\r\n", 1)[1])[0], "InvalidRequest")
        with self.assertRaises(self.direct.exceptions.ClientError):
            self.direct.head_object(Bucket=BUCKET, Key="smuggle")

    def test_two_transfer_encodings_refused_and_closed(self):
        second = signed_head(self.larder.url, "GET", "/%s/small" % BUCKET,
                             lines=["Connection: close"])
        for codings in (("chunked", "chunked"), ("chunked", "gzip")):
            first = signed_head(self.larder.url, "PUT", "/%s/smuggle-te" % BUCKET,
                                body=b"hello",
                                lines=["Transfer-Encoding: %s" % c for c in codings])
            got = raw_exchange(self.larder.port, first + b"5\r\nhello\r\n0\r\n\r\n" + second)
            self.assertEqual(got.count(b"HTTP/1.1 "), 1, (codings, got[:600]))
            self.assertTrue(got.startswith(b"HTTP/1.1 400 "), (codings, got[:600]))

    def test_one_content_length_still_pipelines(self):
        # The refusal above is for repeated framing headers only.
        body = b"pipelined"
        first = signed_head(self.larder.url, "PUT", "/%s/pipelined" % BUCKET, body=body,
                            lines=["Content-Length: %d" % len(body)])
        second = signed_head(self.larder.url, "GET", "/%s/pipelined" % BUCKET,
                             lines=["Connection: close"])
        got = raw_exchange(self.larder.port, first + body + second)
        self.assertEqual(got.count(b"HTTP/1.1 200 "), 2, got[:600])
        self.assertTrue(got.endswith(body), got[-200:])

    def headers_of(self, base, method, path, access, secret, extra=None):
        return http_request(base, method, path, sign_headers(method, base + path, access,
                                                             secret, extra))

    def test_empty_response_override_keeps_the_header(self):
        # S3 ignores an override with no value; the cached answer dropped
        # the object's Content-Type (or Cache-Control) altogether.
        path = "/%s/small" % BUCKET
        for query, header, want in (("response-content-type=", "content-type", "text/x-edge"),
                                    ("response-content-type", "content-type", "text/x-edge"),
                                    ("response-cache-control=", "cache-control", "no-cache"),
                                    ("response-content-type=%0D%0Ax", "content-type",
                                     "text/x-edge")):
            for method in ("GET", "HEAD", "GET", "HEAD"):  # a miss or hits
                st, hdrs, _ = self.headers_of(self.larder.url, method, path + "?" + query,
                                              CLIENT_KEY, CLIENT_SECRET)
                self.assertEqual(st, 200, (query, method))
                self.assertEqual(hdrs.get(header), want, (query, method, hdrs))
        # A value still overrides.
        st, hdrs, _ = self.headers_of(self.larder.url, "GET",
                                      path + "?response-content-type=image%2Fpng",
                                      CLIENT_KEY, CLIENT_SECRET)
        self.assertEqual((st, hdrs.get("content-type")), (200, "image/png"))

    def test_repeated_conditional_headers_are_s3s_to_answer(self):
        # The signature covers both lines (their values joined), S3 reads
        # both; the cache read the first only and answered 304 where the
        # upstream answers 200, 200 where it answers 412.
        path = "/%s/small" % BUCKET
        up = (self.upstream.access_key, self.upstream.secret_key)
        self.headers_of(self.larder.url, "GET", path, CLIENT_KEY, CLIENT_SECRET)  # cached
        for name in ("If-None-Match", "If-Match"):
            for values in ((self.etag, '"other"'), ('"other"', self.etag)):
                joined = ",".join(values)
                answers = []
                for base, access, secret in ((self.upstream.url,) + up,
                                             (self.larder.url, CLIENT_KEY, CLIENT_SECRET)):
                    h = sign_headers("GET", base + path, access, secret, {name: joined})
                    h["Host"] = base.replace("http://", "")
                    lines = [kv for kv in h.items() if kv[0] != name]
                    lines += [(name, v) for v in values]
                    data = ("GET %s HTTP/1.1\r\n" % path + "".join(
                        "%s: %s\r\n" % kv for kv in lines) + "Connection: close\r\n\r\n").encode()
                    got = raw_exchange(int(base.rsplit(":", 1)[1]), data)
                    answers.append(got.split(b"\r\n", 1)[0].split(b" ")[1])
                    if base == self.larder.url:
                        self.assertIn(b"x-larder-cache: bypass", got, (name, values))
                self.assertEqual(answers[1], answers[0], (name, values))
