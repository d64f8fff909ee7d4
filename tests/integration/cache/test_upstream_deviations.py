"""larder in front of S3-compatible upstreams that do not answer as AWS S3 does.

Against fault_origin.FaultOrigin with answers scripted byte for byte
(origin.answer_raw), 1 MiB chunks, no read-ahead:
* weak ETags (W/"..."), which If-Match never matches (RFC 9110 13.1.1): such an
  object is not cached, its reads go through the pass-through;
* an upstream that ignores Range (200 and the whole object): an object of one
  chunk is cached from that answer, a bigger one is passed through;
* an upstream that answers a range with fewer bytes than asked (a 206 whose
  Content-Range ends early): the chunk is filled from where the answer ended;
* a redirect to another host is relayed, never followed: nothing is sent, or
  signed, for a host other than the configured endpoint;
* Content-Encoding kept with the bytes as S3 serves them, never decoded.

UnsteadyETag: an upstream that names the same, unchanged object by another
ETag in every answer (origin.etag_per_answer): its reads are whole and right,
and larder stops trying to cache it for a while.

ErrorBodies: error answers whose body is larger than 64 KiB, endless,
trickled a byte at a time, or shorter than its Content-Length: the client
gets upstream's status and a whole S3 error document, soon.
PassThroughErrorBodies: the same for what larder does not answer from its
cache (listings, writes, reads of a version), and for a 503 it drops and
sends again.
AdminErrorBodies: the admin's manifest read and a warm job's listing stop
at an error answer's headers, whatever its body.
SlowUpstream: an answer that comes slower than LARDER_UPSTREAM_MIN_SPEED
fails (a cache fill goes on from the bytes it has); a passed-through answer
held back by a slow client does not.
"""
import json
import urllib.error
import urllib.request
import http.client
import gzip
import random
import re
import socket
import threading
import time
import unittest
import xml.etree.ElementTree as ET

import harness
from admin_calls import AdminCalls
from fault_origin import etag_matches, parse_range
from test_cache_faults import BUCKET, FaultCase

MiB = 1024 * 1024


def blob(seed, n):
    return random.Random(seed).randbytes(n)


def raw_answer(status, headers, body=b"", method="GET"):
    """An HTTP/1.1 answer as bytes, its length in Content-Length, then the end
    of the connection."""
    head = "HTTP/1.1 %d Scripted\r\n" % status
    head += "".join("%s: %s\r\n" % kv for kv in headers.items())
    head += "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    return head.encode() + (b"" if method == "HEAD" else body)


def object_answer(method, hdrs, obj, etag=None, honour_range=True, cap=None):
    """What an S3-compatible upstream answers for obj: ETag etag (obj's when
    None), If-Match compared strongly (a weak tag never matches), If-None-Match
    weakly, Range honoured unless honour_range is false, and at most cap bytes
    of a range."""
    etag = obj.etag if etag is None else etag
    data = obj.data
    h = {"ETag": etag, "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT",
         "Content-Type": "application/x-scripted", "x-amz-request-id": "SCRIPTED"}
    im, inm = hdrs.get("if-match"), hdrs.get("if-none-match")
    if im is not None and (etag.startswith("W/") or im.startswith("W/")
                           or not etag_matches(im, etag)):
        return raw_answer(412, {"Content-Type": "application/xml"},
                          b"<Error><Code>PreconditionFailed</Code></Error>", method)
    if inm is not None and etag_matches(inm, etag.replace("W/", "")):
        return raw_answer(304, h, b"", "HEAD")
    r = parse_range(hdrs["range"], len(data)) if honour_range and hdrs.get("range") else None
    if isinstance(r, tuple):
        a, b = r
        if cap:
            b = min(b, a + cap - 1)
        h["Content-Range"] = "bytes %d-%d/%d" % (a, b, len(data))
        return raw_answer(206, h, data[a:b + 1], method)
    return raw_answer(200, h, data, method)


class Deviations(FaultCase):
    """FaultCase's origin and larder; each test scripts the answers for its own keys."""

    def tearDown(self):
        self.origin.answer_raw.clear()
        super().tearDown()

    def gets(self, key, since):
        return self.origin.count(since, "GET", BUCKET, key)

    def scripted(self, key, data, **how):
        self.origin.put(BUCKET, key, data)
        self.origin.answer_raw[(BUCKET, key)] = \
            lambda method, hdrs, obj: object_answer(method, hdrs, obj, **how)

    # ---------------------------------------------------------------- weak ETags

    def test_weak_etag_object_is_read_whole(self):
        """A weak ETag names no bytes: If-Match with it never matches, so every
        chunk after the first was taken for a version change and every read of
        an object of more than one chunk was cut short after chunk 0."""
        data = blob(1, 3 * MiB + 5)
        self.scripted("weak", data, etag='W/"weak-1"')
        for attempt in range(2):
            r = self.get("weak")
            self.assertBody(r, data, "read %d" % attempt)
            self.assertEqual(r.headers.get("etag"), 'W/"weak-1"', r)
            self.assertEqual(r.cache, "bypass", r)
        r = self.get("weak", {"Range": "bytes=%d-%d" % (MiB + 3, 2 * MiB + 7)})
        self.assertEqual(r.status, 206, r)
        self.assertTrue(r.body == data[MiB + 3:2 * MiB + 8], r)

    def test_weak_etag_small_object_is_not_cached(self):
        data = blob(2, 1000)
        self.scripted("weak-small", data, etag='W/"weak-2"')
        m = self.origin.mark()
        for attempt in range(2):
            r = self.get("weak-small")
            self.assertBody(r, data, "read %d" % attempt)
            self.assertEqual(r.cache, "bypass", r)
        self.assertGreaterEqual(self.gets("weak-small", m), 2)

    # ---------------------------------------------------------------- Range ignored

    def test_range_ignored_small_object_is_cached(self):
        """An upstream that answers every Range with 200 and the whole object:
        chunk fetches were refused (not a 206), so every read of every object,
        even of one byte, was 503 ServiceUnavailable for the metadata TTL."""
        data = blob(3, 1000)
        self.scripted("norange-small", data, honour_range=False)
        m = self.origin.mark()
        r = self.get("norange-small")
        self.assertBody(r, data, "miss")
        r = self.get("norange-small")
        self.assertBody(r, data, "hit")
        self.assertEqual(r.cache, "hit", r)
        r = self.get("norange-small", {"Range": "bytes=10-19"})
        self.assertEqual((r.status, r.body, r.cache), (206, data[10:20], "hit"), r)
        self.assertEqual(self.gets("norange-small", m), 1)

    def test_range_ignored_big_object_is_passed_through(self):
        data = blob(4, 2 * MiB + 7)
        self.scripted("norange-big", data, honour_range=False)
        for attempt in range(2):
            r = self.get("norange-big")
            self.assertBody(r, data, "read %d" % attempt)
            self.assertEqual(r.cache, "bypass", r)
        # The upstream's own answer to a range: the whole object, as it sent it.
        r = self.get("norange-big", {"Range": "bytes=%d-%d" % (MiB, MiB + 9)})
        self.assertEqual((r.status, r.cache), (200, "bypass"), r)
        self.assertTrue(r.body == data, r)


    # ---------------------------------------------------------------- short ranges

    def test_ranges_answered_in_pieces(self):
        """An upstream that answers at most 256 KiB of a range (a 206 whose
        Content-Range ends early, which RFC 9110 allows): the chunk fetch took
        it for a malformed answer, and every read was 503 ServiceUnavailable."""
        data = blob(5, 3 * MiB + 5)
        self.scripted("capped", data, cap=256 * 1024)
        r = self.get("capped")
        self.assertBody(r, data, "miss")
        m = self.origin.mark()
        r = self.get("capped")
        self.assertBody(r, data, "hit")
        self.assertEqual(r.cache, "hit", r)
        self.assertEqual(self.gets("capped", m), 0)
        r = self.get("capped", {"Range": "bytes=%d-%d" % (MiB - 5, MiB + 4)})
        self.assertEqual((r.status, r.body), (206, data[MiB - 5:MiB + 5]), r)


    # ---------------------------------------------------------------- guards

    def test_redirect_to_another_host_is_relayed_not_followed(self):
        """A 307 (or 302) whose Location names another host: the client gets it as
        upstream sent it; larder sends nothing there, so neither its upstream
        credentials nor a signature made for that host ever leave for it."""
        other = socket.socket()
        other.bind(("127.0.0.1", harness.free_port()))
        other.listen(8)
        other.settimeout(0.2)
        seen = []

        def accept():
            while other.fileno() >= 0:
                try:
                    seen.append(other.accept()[0].recv(65536))
                except (socket.timeout, OSError):
                    continue

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        where = "http://127.0.0.1:%d/%s/moved" % (other.getsockname()[1], BUCKET)
        self.origin.put(BUCKET, "moved", b"x")
        try:
            for status in (307, 302, 301):
                body = ("<Error><Code>TemporaryRedirect</Code><Endpoint>127.0.0.1:%d</Endpoint>"
                        "</Error>" % other.getsockname()[1]).encode()
                self.origin.answer_raw[(BUCKET, "moved")] = \
                    lambda method, hdrs, obj, st=status: raw_answer(
                        st, {"Location": where, "Content-Type": "application/xml"}, body, method)
                m = self.origin.mark()
                for query in ("", "?versionId=null"):  # a cached read, the pass-through
                    r = harness.signed_request(self.larder.url, "GET",
                                               harness.key_path(BUCKET, "moved") + query)
                    self.assertEqual((r.status, r.body), (status, body), (query, r))
                    self.assertEqual(r.headers.get("location"), where, r.headers)
                self.assertEqual(self.gets("moved", m), 2, status)
        finally:
            other.close()
            t.join(2)
        self.assertEqual(seen, [], "larder sent a request to the redirect's host")

    def test_content_encoding_is_kept_with_the_bytes(self):
        """Stored gzip-encoded (Content-Encoding: gzip): the bytes as stored, with
        their header, on a miss, a hit and a range; never decoded on the way."""
        data = gzip.compress(blob(6, 3 * MiB), compresslevel=1)
        self.origin.put(BUCKET, "gz", data)
        self.origin.extra_headers[(BUCKET, "gz")] = {"Content-Encoding": "gzip"}
        try:
            for what in ("miss", "hit"):
                r = self.get("gz")
                self.assertBody(r, data, what)
                self.assertEqual((r.cache, r.headers.get("content-encoding")), (what, "gzip"))
            r = self.get("gz", {"Range": "bytes=%d-%d" % (MiB - 2, MiB + 2)})
            self.assertEqual((r.status, r.body), (206, data[MiB - 2:MiB + 3]), r)
            self.assertEqual(r.headers.get("content-encoding"), "gzip", r.headers)
        finally:
            del self.origin.extra_headers[(BUCKET, "gz")]


class UnsteadyETag(FaultCase):
    """Every answer of the origin names its object by a new ETag: size and
    Last-Modified stay, and If-Match with any ETag it answered fails (412), or,
    with ignore_if_match, is not evaluated (206 under yet another ETag). A chunk
    fetch's If-Match (or its check of the answer's ETag) took each answer for a
    version change: every read of an object of more than one chunk was cut short
    after its first chunk, every time, and each one learnt the object again."""

    @classmethod
    def setUpClass(cls):
        cls.admin = harness.Larder.admin_env()
        cls.EXTRA_ENV = dict(FaultCase.EXTRA_ENV, **cls.admin)
        super().setUpClass()

    def tearDown(self):
        self.origin.etag_per_answer.clear()
        self.origin.ignore_if_match = False
        super().tearDown()

    def gets(self, key, since):
        return self.origin.count(since, "GET", BUCKET, key)

    def unsteady_count(self, missing=None):
        m = re.search(r"^larder_upstream_unsteady_etags_total (\d+)$",
                      self.larder.metrics_text(), re.M)
        if m is None and missing is not None:
            return missing
        self.assertIsNotNone(m, "no larder_upstream_unsteady_etags_total in /metrics")
        return int(m.group(1))

    def assertPrefix(self, r, data, what):
        """A first read may end short where the ETag was first seen to move
        (its headers named the first one), but never with a wrong byte."""
        self.assertIn(r.status, (200, 206), "%s %r" % (what, r))
        self.assertTrue(data.startswith(r.body), "%s: wrong bytes %r" % (what, r))

    def reads(self, key, data, rng=None):
        """Reads key five times: the first may end short, every other is whole,
        right and passed through (x-larder-cache: bypass)."""
        headers, want, status = None, data, 200
        if rng:
            headers = {"Range": "bytes=%d-%d" % rng}
            want, status = data[rng[0]:rng[1] + 1], 206
        first = self.get(key, headers)
        self.assertPrefix(first, want, "read 0")
        m = self.origin.mark()
        for attempt in range(1, 5):
            r = self.get(key, headers)
            self.assertEqual((r.status, r.complete), (status, True), "read %d %r" % (attempt, r))
            self.assertTrue(r.body == want, "read %d: wrong bytes %r" % (attempt, r))
            if attempt > 1:
                self.assertEqual(r.cache, "bypass", "read %d %r" % (attempt, r))
        # Once seen, one upstream GET per read: not learnt again each time.
        self.assertLessEqual(self.gets(key, m), 4 + 2)

    def unsteady(self, key, data):
        self.origin.put(BUCKET, key, data)
        self.origin.etag_per_answer.add((BUCKET, key))

    def test_whole_reads_if_match_refused(self):
        data = blob(7, 3 * MiB + 5)
        self.unsteady("unsteady-412", data)
        before = self.unsteady_count(missing=0)
        self.reads("unsteady-412", data)
        self.assertEqual(self.unsteady_count(), before + 1)

    def test_whole_reads_if_match_ignored(self):
        data = blob(8, 3 * MiB + 5)
        self.unsteady("unsteady-206", data)
        self.origin.ignore_if_match = True
        before = self.unsteady_count(missing=0)
        self.reads("unsteady-206", data)
        self.assertEqual(self.unsteady_count(), before + 1)

    def test_range_over_chunks(self):
        data = blob(9, 4 * MiB)
        self.unsteady("unsteady-range", data)
        self.reads("unsteady-range", data, (MiB + 100, 3 * MiB + 100))

    def test_small_object_stays_cached(self):
        """One chunk: nothing to check its ETag against within the metadata
        TTL, so it is cached (and right) as any other object."""
        data = blob(10, 1000)
        self.unsteady("unsteady-small", data)
        for what in ("miss", "hit", "hit"):
            r = self.get("unsteady-small")
            self.assertBody(r, data, what)
            self.assertEqual(r.cache, what, r)


def error_head(status, length=None):
    """An error answer's status line and headers; no length: read to the end."""
    head = "HTTP/1.1 %d Scripted\r\nContent-Type: application/xml\r\n" % status
    head += "x-amz-request-id: SCRIPTED\r\nConnection: close\r\n"
    if length is not None:
        head += "Content-Length: %d\r\n" % length
    return (head + "\r\n").encode()


def error_doc(code, pad=0):
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
            "<Message>scripted</Message><Pad>%s</Pad></Error>" % (code, "p" * pad)).encode()


# Messages whose bytes are not XML 1.0 text in a UTF-8 document.
NOT_XML_TEXT = (b"cut ]]> here", b"caf\xe9 au lait", b"\xed\xa0\x80", b"\xef\xbf\xbe",
                b"\xc0\xae")


def endless_error(status, code):
    """An error answer (origin.answer_raw) whose body goes on for ever."""
    def answer(method):
        yield error_head(status)
        yield error_doc(code)[:-len("</Error>")]
        while True:
            yield b"<More>" + b"m" * 16384 + b"</More>"
            time.sleep(0.001)
    return answer


def trickled_error(status, doc):
    """An error answer (origin.answer_raw) whose body comes a byte every 0.2 s."""
    def answer(method):
        yield error_head(status, len(doc))
        for i in range(len(doc)):
            yield doc[i:i + 1]
            time.sleep(0.2)
    return answer


class ErrorBodies(FaultCase):
    """A cached GET (and the HEAD beside it) of an object whose upstream
    answers an error with a body that is not what S3 sends. larder read the
    whole of it, for as long as it came, and passed on its first 64 KiB: a
    body over 64 KiB went to the client cut (not XML), an endless or trickled
    one held the read until the client gave up, and one that ended before its
    Content-Length was 503 ServiceUnavailable after retries instead of
    upstream's status."""

    def tearDown(self):
        self.origin.answer_raw.clear()
        super().tearDown()

    def answer(self, key, fn):
        self.origin.put(BUCKET, key, b"never served")
        self.origin.answer_raw[(BUCKET, key)] = lambda method, hdrs, obj: fn(method)

    def assertS3Answer(self, r, status, code):
        self.assertEqual(r.status, status, r)
        self.assertTrue(r.complete, r)
        try:
            root = ET.fromstring(r.body)
        except ET.ParseError as e:
            self.fail("not an XML document (%s): %r" % (e, r.body[:200]))
        self.assertEqual(root.tag, "Error", r.body[:200])
        self.assertEqual(root.findtext("Code"), code, r.body[:300])

    def test_large_body(self):
        doc = error_doc("NoSuchKey", 200 * 1024)
        self.answer("err-large", lambda m: error_head(404, len(doc)) + doc)
        self.assertS3Answer(self.get("err-large", timeout=30), 404, "NoSuchKey")

    def test_endless_body(self):
        self.answer("err-endless", endless_error(403, "AccessDenied"))
        self.assertS3Answer(self.get("err-endless", timeout=30), 403, "AccessDenied")

    def test_trickled_body(self):
        self.answer("err-trickle", trickled_error(403, error_doc("AccessDenied", 400)))
        # AccessDenied when its first bytes came within the time larder
        # gives a body; else a generic document with the same status
        r = self.get("err-trickle", timeout=30)
        self.assertEqual(r.status, 403, r)
        root = ET.fromstring(r.body)
        self.assertIn(root.findtext("Code"), ("AccessDenied", "Forbidden"), r.body)

    def test_body_shorter_than_its_length(self):
        doc = error_doc("AccessDenied")
        self.answer("err-short", lambda m: error_head(403, len(doc) + 5000) + doc)
        self.assertS3Answer(self.get("err-short", timeout=30), 403, "AccessDenied")

    def test_a_made_document_is_described_as_one(self):
        """A proxy's large HTML page, replaced by larder's XML document: the
        answer's Content-* headers described the page, not the document."""
        page = b"<html><body>" + b"gateway says no " * 8192 + b"</body></html>"
        head = error_head(502, len(page)).replace(
            b"Content-Type: application/xml", b"Content-Type: text/html\r\nContent-Language: en")
        self.answer("err-page", lambda m: head + page)
        r = self.get("err-page", timeout=30)
        self.assertS3Answer(r, 502, "InternalError")
        self.assertEqual(r.headers.get("content-type"), "application/xml", r.headers)
        self.assertNotIn("content-language", r.headers)

    def test_cut_document(self):
        """Shorter than its length, cut inside the document: a generic code."""
        doc = error_doc("AccessDenied")
        self.answer("err-cut", lambda m: error_head(403, len(doc)) + doc[:20])
        r = self.get("err-cut", timeout=30)
        self.assertS3Answer(r, 403, "Forbidden")

    def test_made_document_is_xml_whatever_the_message(self):
        """A made document takes upstream's Message when it came whole. Bytes
        that are no XML text there (a "]]>", bytes that are not UTF-8, a
        character XML excludes) went into it as they came: the client got a
        document no XML parser reads."""
        for i, message in enumerate(NOT_XML_TEXT):
            doc = error_doc("AccessDenied").replace(b"scripted", message)
            key = "err-text-%d" % i
            self.answer(key, lambda m, doc=doc: error_head(403, len(doc) + 5000) + doc)
            with self.subTest(message=message):
                self.assertS3Answer(self.get(key, timeout=30), 403, "AccessDenied")
        # What XML text can carry is kept (escaped where it must be).
        for i, message in enumerate(("cut ]]> here", "caf\u00e9 \u2713 \U0001f600")):
            doc = error_doc("AccessDenied").replace(b"scripted", message.encode())
            key = "err-kept-%d" % i
            self.answer(key, lambda m, doc=doc: error_head(403, len(doc) + 5000) + doc)
            with self.subTest(kept=message):
                r = self.get(key, timeout=30)
                self.assertS3Answer(r, 403, "AccessDenied")
                self.assertEqual(ET.fromstring(r.body).findtext("Message"), message)
        # Its RequestId is upstream's header, whose bytes need not be UTF-8.
        doc = error_doc("AccessDenied")
        head = error_head(403, len(doc) + 5000).replace(b"SCRIPTED", b"ID-\xff")
        self.answer("err-text-id", lambda m: head + doc)
        with self.subTest(request_id=b"ID-\xff"):
            self.assertS3Answer(self.get("err-text-id", timeout=30), 403, "AccessDenied")


def bounded_request(base, method, path, body=b"", deadline=20, cap=1 << 20):
    """A signed request whose answer is read for at most deadline seconds and
    cap bytes: (status, body, complete), complete false for an answer cut
    short, or not over by then."""
    h = harness.sign_headers(method, base + path, harness.CLIENT_KEY, harness.CLIENT_SECRET,
                             body=body)
    host, port = base.replace("http://", "").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=deadline)
    end = time.monotonic() + deadline
    status, got = None, b""
    try:
        c.request(method, path, body=body if method != "GET" else None, headers=h)
        r = c.getresponse()
        status = r.status
        while time.monotonic() < end and len(got) < cap:
            piece = r.read1(65536)
            if not piece:  # the end, or short of its Content-Length
                return status, got, not r.length
            got += piece
        return status, got, False
    except (OSError, http.client.HTTPException):
        return status, got, False
    finally:
        c.close()


class PassThroughErrorBodies(FaultCase):
    """Error answers to requests the pass-through forwards (a listing, a PUT,
    a GET of a version) whose body is not what S3 sends. They went to the
    client as they came: an endless body for ever, a trickled one a byte at a
    time, one shorter than its Content-Length as a cut answer; and the body
    of a 503 larder drops (to send the request again) was read for as long
    as it came, the client waiting all the while. Now each is read for at
    most 64 KiB and 2 s, and the client gets upstream's status with a whole
    S3 error document."""

    def tearDown(self):
        self.origin.answer_raw.clear()
        super().tearDown()

    def script(self, key, fn):
        self.origin.answer_raw[(BUCKET, key)] = lambda method, hdrs, obj: fn(method)

    def request(self, method, path, body=b""):
        return bounded_request(self.larder.url, method, path, body)

    def assertS3Answer(self, answer, status, *codes):
        got, body, complete = answer
        self.assertEqual(got, status, body[:300])
        self.assertTrue(complete, "the answer did not end within its time or size: %d bytes, "
                        "%r" % (len(body), body[:200]))
        try:
            root = ET.fromstring(body)
        except ET.ParseError as e:
            self.fail("not an XML document (%s): %r" % (e, body[:200]))
        self.assertEqual(root.tag, "Error", body[:200])
        self.assertIn(root.findtext("Code"), codes, body[:300])

    def test_listing_endless_body(self):
        self.script("", endless_error(403, "AccessDenied"))
        self.assertS3Answer(self.request("GET", "/%s?list-type=2" % BUCKET), 403, "AccessDenied")

    def test_put_endless_body(self):
        self.script("err-put", endless_error(403, "AccessDenied"))
        self.assertS3Answer(self.request("PUT", harness.key_path(BUCKET, "err-put"), b"data"),
                            403, "AccessDenied")

    def test_versioned_get_trickled_body(self):
        self.script("err-trickle", trickled_error(404, error_doc("NoSuchVersion", 400)))
        path = harness.key_path(BUCKET, "err-trickle") + "?versionId=v1"
        # NoSuchVersion when its first bytes came within the time larder
        # gives a body; else a generic document with the same status
        self.assertS3Answer(self.request("GET", path), 404, "NoSuchVersion", "NotFound")

    def test_body_shorter_than_its_length(self):
        doc = error_doc("AccessDenied")
        self.script("err-short-put", lambda m: error_head(403, len(doc) + 5000) + doc)
        self.assertS3Answer(self.request("PUT", harness.key_path(BUCKET, "err-short-put"),
                                         b"data"), 403, "AccessDenied")

    def test_made_document_is_xml_whatever_the_message(self):
        """As ErrorBodies' test of that name, for the pass-through."""
        for i, message in enumerate(NOT_XML_TEXT):
            doc = error_doc("AccessDenied").replace(b"scripted", message)
            key = "err-text-put-%d" % i
            self.script(key, lambda m, doc=doc: error_head(403, len(doc) + 5000) + doc)
            with self.subTest(message=message):
                self.assertS3Answer(self.request("PUT", harness.key_path(BUCKET, key),
                                                 b"data"), 403, "AccessDenied")

    def test_large_body(self):
        """Over 64 KiB: a whole document all the same (it went whole before too)."""
        doc = error_doc("NoSuchVersion", 200 * 1024)
        self.script("err-large", lambda m: error_head(404, len(doc)) + doc)
        path = harness.key_path(BUCKET, "err-large") + "?versionId=v1"
        self.assertS3Answer(self.request("GET", path), 404, "NoSuchVersion")

    def test_dropped_slowdown_endless_body(self):
        """A 503 to a request without a body is dropped and the request sent
        again (LARDER_UPSTREAM_RETRIES); its body was read to its end first."""
        self.script("", endless_error(503, "SlowDown"))
        m = self.origin.mark()
        self.assertS3Answer(self.request("GET", "/%s?list-type=2&prefix=s" % BUCKET), 503,
                            "SlowDown")
        self.assertGreaterEqual(self.origin.count(m, "GET", BUCKET, ""), 2)


class AdminErrorBodies(AdminCalls, FaultCase):
    """The admin's read of a lookahead's manifest read an error answer's body
    to its end on the admin thread: an endless one held it, and the request,
    for ever. A warm job's listing page gathered an error body up to the page
    buffer's 64 MiB, took running out of room for a failure and asked again
    (LARDER_UPSTREAM_RETRIES), each time. Neither has a use for the body: the
    status is the answer."""

    @classmethod
    def setUpClass(cls):
        env = harness.Larder.admin_env()
        cls.ADMIN_TOKEN = env["LARDER_ADMIN_TOKEN"]
        cls.EXTRA_ENV = dict(FaultCase.EXTRA_ENV, **env)
        super().setUpClass()
        cls.admin = "http://" + env["LARDER_ADMIN_LISTEN"]

    def tearDown(self):
        self.origin.answer_raw.clear()
        super().tearDown()

    def endless_get(self, key, status, code):
        """GETs of key (the bucket: "") answer an endless error; the rest as usual."""
        endless = endless_error(status, code)
        self.origin.answer_raw[(BUCKET, key)] = \
            lambda method, hdrs, obj: endless(method) if method == "GET" else None

    def post(self, path, body, deadline=20):
        """(status, JSON answer), or the error of an admin request not answered in time."""
        req = urllib.request.Request(self.admin + path, data=json.dumps(body).encode(),
                                     method="POST")
        req.add_header("Authorization", "Bearer " + self.ADMIN_TOKEN)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=deadline) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())
        except OSError as e:
            self.fail("POST %s: no answer in %d s (%s)" % (path, deadline, e))

    def test_lookahead_manifest_endless_error(self):
        self.endless_get("manifests/endless.txt", 403, "AccessDenied")
        st, r = self.post("/admin/lookahead", {"bucket": BUCKET, "window": 2,
                                               "manifest": "manifests/endless.txt"})
        self.assertEqual((st, r["error"]), (400, "bad_manifest"), r)
        self.assertIn("upstream answered 403", r["message"])

    def test_warm_listing_endless_error(self):
        self.endless_get("", 403, "AccessDenied")
        m = self.origin.mark()
        st, r = self.post("/admin/prefetch", {"bucket": BUCKET, "prefix": "warm-err/"})
        self.assertEqual(st, 202, r)
        info = self.wait_job(r["job"], timeout=60)
        self.assertEqual(info["state"], "failed", info)
        self.assertEqual(info.get("error"), "listing the bucket: upstream answered 403", info)
        self.assertEqual(self.origin.count(m, "GET", BUCKET, ""), 1,
                         "a refused listing is not asked for again")


def slow_read(base, path, rate, midway=None, rcvbuf=4096, deadline=120):
    """GET path on a socket with a small receive buffer, read at about rate
    bytes/s: (status, body, complete). larder's own buffers fill, and it
    holds its upstream transfer back (paused) while the client catches up.
    midway (bytes, fn): fn() is called once that many bytes are in."""
    h = harness.sign_headers("GET", base + path, harness.CLIENT_KEY, harness.CLIENT_SECRET)
    host, port = base.replace("http://", "").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    end = time.monotonic() + deadline
    try:
        h.setdefault("Host", "%s:%s" % (host, port))
        head = "GET %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % kv for kv in h.items())
        sock.sendall((head + "Connection: close\r\n\r\n").encode())
        got = b""
        while time.monotonic() < end:
            piece = sock.recv(rate // 16)
            if not piece:
                break
            got += piece
            if midway and len(got) >= midway[0]:
                midway[1]()
                midway = None
            time.sleep(len(piece) / rate)
        head, _, body = got.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        return status, body, length is not None and int(length.group(1)) == len(body)
    finally:
        sock.close()


class SlowUpstream(FaultCase):
    """The answer to an upstream GET was only required to send a byte per
    LARDER_UPSTREAM_TIMEOUT: one sent at 10 KiB/s held its fetch, its slots
    and its readers until its last byte (a chunk of 8 MiB: 14 minutes; at
    1 byte/s: 97 days). Now a GET's answer slower than LARDER_UPSTREAM_MIN_SPEED
    for the timeout fails, and a fill goes on from the bytes it has."""
    EXTRA_ENV = dict(FaultCase.EXTRA_ENV, LARDER_UPSTREAM_TIMEOUT="2",
                     LARDER_UPSTREAM_MIN_SPEED="4MiB")

    def test_trickled_fill_goes_on_from_its_bytes(self):
        data = blob(20, 3 * MiB + 5)
        self.origin.put(BUCKET, "trickled", data)
        self.origin.slow_next(1024, 100, key="trickled")  # 10 KiB/s: chunk 0 in 100 s
        m = self.origin.mark()
        status, body, complete = bounded_request(self.larder.url, "GET",
                                                 harness.key_path(BUCKET, "trickled"),
                                                 deadline=40, cap=4 * MiB)
        self.assertEqual((status, complete), (200, True), "%d bytes" % len(body))
        self.assertTrue(body == data, "%d bytes, not the object's" % len(body))
        firsts = [parse_range(g["range"], len(data))[0] for g in self.gets_of("trickled", m)]
        self.assertTrue(any(0 < a < MiB for a in firsts),
                        "chunk 0 was not asked for again from the bytes it had: %r" % firsts)

    def test_trickled_pass_through_ends(self):
        """No fill to go on with: the client's answer is cut, soon."""
        data = blob(21, 2 * MiB)
        self.origin.put(BUCKET, "trickled-pass", data)
        self.origin.slow_next(1024, 100, key="trickled-pass")
        t0 = time.monotonic()
        status, body, complete = bounded_request(
            self.larder.url, "GET", harness.key_path(BUCKET, "trickled-pass") + "?versionId=v",
            deadline=60, cap=4 * MiB)
        self.assertEqual(status, 200)
        self.assertFalse(complete)
        self.assertLess(time.monotonic() - t0, 50, "the answer went on at 10 KiB/s")
        self.assertTrue(data.startswith(body), "a cut answer's bytes are the object's")

    def test_slow_client_of_pass_through_gets_whole_body(self):
        """A guard: the pass-through holds its upstream transfer back (paused)
        while its client reads at 1 MiB/s, below the floor; libcurl does not
        judge a paused transfer's speed, so the client gets every byte. The
        object is larger than what the sockets on the way hold, so the
        origin is still sending when the client has read its first MiB."""
        data = blob(22, 16 * MiB)
        self.origin.put(BUCKET, "slow-client", data)
        path = harness.key_path(BUCKET, "slow-client") + "?versionId=v"
        m = self.origin.mark()
        held = []

        def upstream_still_sending():  # else the test would judge nothing
            held.extend(not g["done"] for g in self.origin.gets(BUCKET, "slow-client", m))
        status, body, complete = slow_read(self.larder.url, path, MiB,
                                           (MiB, upstream_still_sending))
        self.assertEqual(held, [True], "the upstream answer was not held back midway")
        self.assertEqual((status, complete), (200, True), "%d bytes" % len(body))
        self.assertTrue(body == data, "not the object's bytes")

    def gets_of(self, key, since):
        return [g for g in self.origin.gets(BUCKET, key, since) if g.get("range")]


if __name__ == "__main__":
    unittest.main()
