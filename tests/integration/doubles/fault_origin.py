"""A scripted S3 origin for fault tests: real S3 object semantics, faults on demand.

    origin = FaultOrigin().start()           # http://127.0.0.1:<port>, key ORIGIN_KEY
    origin.put("bkt", "obj", data, content_type="text/plain", metadata={"a": "1"})
    origin.put_synthetic("bkt", "big", 6 << 30)   # bytes computed from their offset
                                             # (synthetic_bytes), none held in memory
    origin.fail_next(2, key="obj")           # next 2 GETs of obj: 503 SlowDown
    origin.drop_next(300000, key="obj")      # next GET: 300000 body bytes, then hang up
    origin.cut_headers_next(key="obj")       # next GET: status line and some headers, then
                                             # hang up before the headers end
    origin.delay_next(1500, key="obj")       # next GET: first byte after 1.5 s
    origin.delay_next(1500, key="obj", rng="bytes=0-99")  # only a GET with this Range
                                             # (fail_next, drop_next, delay_next, slow_next)
    origin.late_next(1500, key="obj")        # next GET: answered now, heard 1.5 s later
    origin.late_next(gate=gate, key="obj")   # next GET: answered now, heard once gate is set
    origin.hold_next(gate, key="obj", rng="bytes=0-99")  # next GET: its first byte waits
                                             # until gate (a threading.Event) is set (30 s at most)
    origin.slow_next(65536, 20, key="obj")   # next GET: body in 64 KiB pieces, 20 ms apart
    origin.replace_after("bkt", "obj", new)  # new bytes (new ETag) from the next request on
    origin.throttle_above(4, service_ms=30)  # > 4 requests in flight to a prefix: 503 SlowDown
                                             # (max_inflight, max_unanswered: the most at once)
    origin.lose_answer_next(key="obj")       # next PUT: stored, then hang up with no answer
    origin.error_after_next(key="obj")       # next PUT: stored, then answered 500 InternalError
    origin.answer_after_next(2000, key="obj") # next PUT: stored at once, answered 2 s later
    origin.answer_after_next(gate=gate, key="obj")  # ... answered once gate is set
    ...
    origin.gets("bkt", "obj", since=mark)    # what arrived: ranges, If-Match, statuses
    origin.wait_request("bkt", "obj", since=mark)  # the first GET of obj since mark, once
                                             # it is at a gate or its version is taken
    origin.ignore_if_match = True            # a broken upstream/proxy: If-Match not evaluated
    origin.ignore_range = True               # a broken upstream/proxy: Range not evaluated
                                             # (200 and the whole object)
    origin.answer_etag[("bkt", "obj")] = None   # GET/HEAD of obj answer this ETag (None: none)
    origin.etag_per_answer.add(("bkt", "obj"))  # every GET/HEAD of obj answers another ETag,
                                             # size and Last-Modified unchanged (a proxy or
                                             # store that makes one per answer); If-Match and
                                             # If-None-Match are still judged against the
                                             # object's own ETag, which no answer names
    origin.extra_headers[("bkt", "obj")] = {"x-amz-...": "v"}  # added to GET/HEAD answers,
                                             # in place of what it would send (Content-Range ...)
    origin.answer_raw[("bkt", "obj")] = fn   # a signed request for obj is answered with the
                                             # bytes fn(method, headers, obj) returns (status
                                             # line on): any deviation from S3 a test scripts;
                                             # an iterable of bytes: each piece sent as it comes
                                             # (endless, trickled); None: answered as usual
    origin.list_pages["bkt"] = fn            # ListObjectsV2 of bkt answers fn(query) (the
                                             # query a dict): the XML text, as scripted
    origin.stop()

What it serves, as S3 does (and as moto does not always do):
* Objects from an in-memory dict. GET and HEAD answer ETag (the quoted MD5 hex of
  the bytes), Content-Length, Content-Type, Last-Modified (whole seconds),
  Accept-Ranges and x-amz-meta-*; 404 NoSuchKey / NoSuchBucket otherwise.
* Range `bytes=a-b`, `bytes=a-` and `bytes=-n`: 206 with Content-Range; a range
  starting past the end, `-0`, or any range of an empty object: 416 InvalidRange
  (with `Content-Range: bytes */size`); a syntactically invalid, reversed or
  multi-part range is ignored (200, the whole object), as S3 does.
* GET/HEAD ?partNumber=N: 206 with the part's Content-Range, and for an object put
  with parts=[sizes] its multipart ETag and x-amz-mp-parts-count (moto answers the
  whole object); past the last part 416 InvalidPartNumber; with a Range 400.
* Conditionals in S3's order: If-Match (else If-Unmodified-Since) failing -> 412
  PreconditionFailed (an XML body on GET); then If-None-Match (else
  If-Modified-Since) -> 304 with ETag and Last-Modified. A failed precondition
  wins over a Range.
* response-content-type/-language/-expires/-cache-control/-disposition/-encoding
  query overrides on GET.
* PUT object (plain, or aws-chunked with its chunk signatures not checked),
  RenameObject (PUT ?renameObject with x-amz-rename-source, same bucket),
  PUT bucket, DELETE object, HEAD bucket, and ListObjectsV2 of a bucket given
  list_pages. Everything else: 501 NotImplemented.
* Every request must be signed with SigV4 for this origin's access key and
  region: botocore recomputes the signature from what arrived (raw path and
  query, the signed headers) and a mismatch is 403 SignatureDoesNotMatch, an
  unknown key 403 InvalidAccessKeyId, no Authorization 403 AccessDenied, a
  clock more than 15 minutes off 403 RequestTimeTooSkewed, a body that does not
  match x-amz-content-sha256 400 XAmzContentSHA256Mismatch. Faults apply only
  to requests that passed those checks.

Faults are matched against each authenticated request in the order they were
added (method, and optionally bucket and key); each kind is consumed at most
once per request, so a delay and a drop can hit the same GET.

The request log has one dict per request: seq, t, method, target, bucket, key,
query, headers (lower-case names), range, if_match, status ("incomplete-body" for
a body that ended before its Content-Length: nothing stored), auth_error (the
error code when the signature check refused it), faults (the kinds applied),
body_sent (object body bytes written) and dropped (the connection was cut).
"""
import calendar
import email.utils
import hashlib
import hmac
import http.server
import itertools
import socket
import struct
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ORIGIN_KEY = "AKIDFAULTORIGIN00001"
ORIGIN_SECRET = "fault-origin/secret+0000000000000000001"
ORIGIN_REGION = "us-east-1"
MAX_SKEW = 15 * 60

OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}


def etag_of(data):
    return '"%s"' % hashlib.md5(data).hexdigest()


def http_date(ts):
    return email.utils.formatdate(ts, usegmt=True)


def parse_http_date(value):
    try:
        dt = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    return int(dt.timestamp())


def parse_range(value, size):
    """S3's reading of a Range header for an object of `size` bytes:
    None (ignored: serve the whole object), "unsatisfiable", or (first, last)."""
    value = value.strip()
    if not value.startswith("bytes=") or "," in value:
        return None
    first, sep, last = value[6:].strip().partition("-")
    first, last = first.strip(), last.strip()
    if not sep or (first and not first.isdigit()) or (last and not last.isdigit()):
        return None
    if not first and not last:
        return None
    if not first:  # suffix: the last n bytes
        n = int(last)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return (max(0, size - n), size - 1)
    a = int(first)
    b = int(last) if last else None
    if b is not None and b < a:
        return None
    if a >= size:
        return "unsatisfiable"
    return (a, size - 1 if b is None else min(b, size - 1))


def etag_matches(header, etag):
    for tag in header.split(","):
        tag = tag.strip()
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == "*" or tag == etag or '"%s"' % tag == etag:
            return True
    return False


def sigv4_expected(method, target, headers, signed, secret, key, region, amz_date):
    """The signature botocore computes for the request as it arrived."""
    req = AWSRequest(method=method, url="http://%s%s" % (headers.get("host", ""), target),
                     headers={k: v for k, v in headers.items() if k in signed})
    req.context["timestamp"] = amz_date
    auth = S3SigV4Auth(Credentials(key, secret), "s3", region)
    cr = auth.canonical_request(req)
    return auth.signature(auth.string_to_sign(req, cr), req)


def decode_aws_chunked(body):
    """The payload of an aws-chunked body (chunk signatures and trailers not checked)."""
    out, i = [], 0
    while True:
        j = body.find(b"\r\n", i)
        if j < 0:
            raise ValueError("aws-chunked: no chunk header")
        size = int(body[i:j].split(b";")[0], 16)
        i = j + 2
        if size == 0:
            return b"".join(out)
        out.append(body[i:i + size])
        i += size + 2


BLOCK = 4096


def synthetic_block(seed, index):
    """Block `index` (BLOCK bytes) of a synthetic object: its SHA-256 repeated."""
    return hashlib.sha256(seed + struct.pack(">Q", index)).digest() * (BLOCK // 32)


def synthetic_bytes(seed, first, n):
    """Bytes first .. first+n-1 of the synthetic object named by seed."""
    out, at, end = [], first, first + n
    while at < end:
        index, within = divmod(at, BLOCK)
        take = min(BLOCK - within, end - at)
        out.append(synthetic_block(seed, index)[within:within + take])
        at += take
    return b"".join(out)


class SyntheticBytes:
    """A read-only bytes stand-in of any size (many GiB) whose bytes are
    computed from their offset (synthetic_bytes), never held in memory.
    Slices of up to 1 MiB are real bytes; larger ones are views."""

    def __init__(self, size, seed=b"", start=0):
        self.size, self.seed, self.start = size, seed, start

    def __len__(self):
        return self.size

    def __getitem__(self, s):
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise TypeError("SyntheticBytes takes plain slices")
        first, stop, _ = s.indices(self.size)
        n = max(0, stop - first)
        if n <= 1024 * 1024:
            return synthetic_bytes(self.seed, self.start + first, n)
        return SyntheticBytes(n, self.seed, self.start + first)

    def __bytes__(self):
        return synthetic_bytes(self.seed, self.start, self.size)


class StoredObject:
    def __init__(self, data, content_type="binary/octet-stream", metadata=None, mtime=None,
                 parts=None):
        if isinstance(data, SyntheticBytes):
            # an identity of its own: hashing many GiB is too slow for a test
            self.data = data
            self.etag = '"%s"' % hashlib.md5(b"synthetic:%d:" % len(data)
                                             + data.seed).hexdigest()
            self.parts = list(parts or [])
            if self.parts:
                self.etag = self.etag[:-1] + '-%d"' % len(self.parts)
            self.content_type = content_type
            self.metadata = dict(metadata or {})
            self.mtime = int(time.time() if mtime is None else mtime)
            return
        self.data = bytes(data)
        self.etag = etag_of(self.data)
        # parts (sizes adding up to the data's): uploaded in parts, with S3's
        # multipart ETag, the MD5 of the parts' MD5s and "-<count>"
        self.parts = list(parts or [])
        if self.parts:
            digests, at = b"", 0
            for n in self.parts:
                digests += hashlib.md5(self.data[at:at + n]).digest()
                at += n
            self.etag = '"%s-%d"' % (hashlib.md5(digests).hexdigest(), len(self.parts))
        self.content_type = content_type
        self.metadata = dict(metadata or {})
        self.mtime = int(time.time() if mtime is None else mtime)


class Fault:
    def __init__(self, kind, count, methods, bucket, key, rng=None, **params):
        self.kind = kind
        self.remaining = count
        self.methods = methods
        self.bucket = bucket
        self.key = key
        self.rng = rng
        self.params = params

    def matches(self, method, bucket, key, rng=None):
        return (self.remaining > 0 and method in self.methods
                and (self.bucket is None or self.bucket == bucket)
                and (self.key is None or self.key == key)
                and (self.rng is None or self.rng == rng))


class FaultOrigin(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, access_key=ORIGIN_KEY, secret_key=ORIGIN_SECRET, region=ORIGIN_REGION,
                 host="127.0.0.1", port=0):
        super().__init__((host, port), _Handler)
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.url = "http://%s:%d" % (host, self.server_address[1])
        self.port = self.server_address[1]
        self.lock = threading.RLock()
        self.objects = {}
        self.buckets = set()
        self.faults = []
        self.ignore_if_match = False
        self.ignore_range = False
        self.answer_etag = {}
        self.etag_per_answer = set()
        self.etags_made = itertools.count(1)
        self.extra_headers = {}
        self.answer_raw = {}
        self.list_pages = {}
        self.log = []
        self.throttle_k = None
        self.service_ms = 0
        self.inflight = {}
        self.throttled = 0
        self.max_inflight = 0
        self.unanswered = {}
        self.max_unanswered = 0
        self._ids = itertools.count(1)
        self.thread = None

    def handle_error(self, request, client_address):
        """A client hanging up mid-answer is routine here: no traceback on stderr."""
        import sys
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    # -- life
    def start(self):
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.thread is not None:
            self.shutdown()
            self.thread.join(10)
            self.thread = None
        self.server_close()

    def cleanup(self):
        self.stop()

    def client(self, **kw):
        """boto3 straight to this origin with its key."""
        import harness
        return harness.make_s3_client(self.url, self.access_key, self.secret_key, **kw)

    # -- objects (direct, no HTTP)
    def create_bucket(self, bucket):
        with self.lock:
            self.buckets.add(bucket)

    def put(self, bucket, key, data, content_type="binary/octet-stream", metadata=None,
            mtime=None, parts=None):
        """Stores an object (creating the bucket); returns its quoted ETag.
        parts: the sizes of its parts, as if uploaded in parts."""
        obj = StoredObject(data, content_type, metadata, mtime, parts)
        with self.lock:
            self.buckets.add(bucket)
            self.objects[(bucket, key)] = obj
        return obj.etag

    def put_synthetic(self, bucket, key, size, seed=b"", parts=None, **attrs):
        """Stores a synthetic object of size bytes (SyntheticBytes: computed
        from their offset, so many GiB cost no memory); returns its ETag.
        parts: sizes adding up to size, for partNumber and x-amz-mp-parts-count
        (the ETag then ends in -<count>, but is not S3's MD5 of MD5s)."""
        if parts:
            assert sum(parts) == size and min(parts) > 0
        return self.put(bucket, key, SyntheticBytes(size, seed), parts=parts, **attrs)

    def get(self, bucket, key):
        with self.lock:
            return self.objects.get((bucket, key))

    def delete(self, bucket, key):
        with self.lock:
            self.objects.pop((bucket, key), None)

    # -- faults
    def _add(self, fault):
        with self.lock:
            self.faults.append(fault)
        return fault

    def fail_next(self, n, status=503, code="SlowDown", message="Please reduce your request rate.",
                  methods=("GET",), bucket=None, key=None, rng=None):
        """The next n matching requests answer this S3 error instead."""
        return self._add(Fault("error", n, tuple(methods), bucket, key, rng, status=status,
                               code=code, message=message))

    def refuse_next(self, n, status=403, code="AccessDenied", message="Access Denied",
                    methods=("PUT",), bucket=None, key=None):
        """The next n matching requests get this S3 error as soon as their
        headers are in, before any body byte is read (S3 may answer a
        refused upload so); the body is then read and dropped, and the
        connection closed. Their signature is not checked."""
        return self._add(Fault("refuse", n, tuple(methods), bucket, key, status=status, code=code,
                               message=message))

    def drop_next(self, after_bytes, n=1, reset=False, bucket=None, key=None, rng=None):
        """The next n matching GETs send their headers and after_bytes of the
        body, then close the connection (reset=True: with a TCP RST)."""
        return self._add(Fault("drop", n, ("GET",), bucket, key, rng, after=after_bytes,
                               reset=reset))

    def cut_headers_next(self, n=1, reset=True, bucket=None, key=None):
        return self._add(Fault("cut_headers", n, ("GET",), bucket, key, reset=reset))

    def delay_next(self, ms, n=1, methods=("GET",), bucket=None, key=None, rng=None):
        """The next n matching requests wait ms milliseconds before the first byte."""
        return self._add(Fault("delay", n, tuple(methods), bucket, key, rng, ms=ms))

    def hold_next(self, gate, n=1, methods=("GET",), bucket=None, key=None, rng=None):
        """The next n matching requests wait until gate (a threading.Event) is set, 30 s at
        most, before their first byte: a test opens it when it has done what it needed."""
        return self._add(Fault("hold", n, tuple(methods), bucket, key, rng, gate=gate))

    def late_next(self, ms=None, n=1, bucket=None, key=None, gate=None):
        """The next n matching GETs are answered from the object as it is when
        they arrive, but their first byte goes out ms milliseconds later, or
        once gate (a threading.Event) is set (60 s at most): an answer on its
        way while the object changes (delay_next waits first and answers with
        the object as it is then). With a gate, wait_request tells when the
        version is taken, and the test changes the object, then sets the gate:
        no guess of how long its own steps take."""
        assert (ms is None) != (gate is None), "late_next takes ms or gate"
        return self._add(Fault("late", n, ("GET",), bucket, key, ms=ms, gate=gate))

    def slow_next(self, piece=65536, pause_ms=20, n=1, bucket=None, key=None, rng=None):
        """The next n matching GETs write their body `piece` bytes at a time
        with pause_ms between pieces."""
        return self._add(Fault("slow", n, ("GET",), bucket, key, rng, piece=piece,
                               pause_ms=pause_ms))

    def linger_next(self, ms, n=1, bucket=None, key=None, rng=None):
        """The next n matching GETs send their whole body framed chunked, then
        wait ms milliseconds before the chunk that ends it: every byte is in,
        the answer not yet over."""
        return self._add(Fault("linger", n, ("GET",), bucket, key, rng, ms=ms))

    def lose_answer_next(self, n=1, methods=("PUT",), bucket=None, key=None):
        """The next n matching requests are carried out (a PUT stores its
        object), then the connection is closed instead of answering: a write
        that took effect, its answer lost on the way."""
        return self._add(Fault("lose_answer", n, tuple(methods), bucket, key))

    def error_after_next(self, n=1, status=500, code="InternalError",
                         message="We encountered an internal error. Please try again.",
                         methods=("PUT",), bucket=None, key=None):
        """The next n matching requests are carried out (a PUT stores its
        object), then answered with this S3 error: a write whose outcome
        the answer does not tell."""
        return self._add(Fault("error_after", n, tuple(methods), bucket, key, status=status,
                               code=code, message=message))

    def answer_after_next(self, ms=None, n=1, methods=("PUT", "DELETE"), bucket=None, key=None,
                          gate=None):
        """The next n matching requests are carried out at once (a PUT
        stores its object) and answered ms later, or once gate (a
        threading.Event) is set (60 s at most): a slow answer to a write
        that has taken effect. With a gate, wait_request(method=...) tells
        when it has."""
        assert (ms is None) != (gate is None), "answer_after_next takes ms or gate"
        return self._add(Fault("answer_after", n, tuple(methods), bucket, key, ms=ms, gate=gate))

    def replace_after(self, bucket, key, data, after_gets=0, **attrs):
        """Replaces the object's bytes (new ETag, Last-Modified one second later
        at least) once `after_gets` more GETs of it have been answered with a
        whole body: 0 means now."""
        def do():
            with self.lock:
                old = self.objects.get((bucket, key))
                mtime = int(time.time())
                if old is not None:
                    mtime = max(mtime, old.mtime + 1)
                    attrs.setdefault("content_type", old.content_type)
                    attrs.setdefault("metadata", old.metadata)
                self.put(bucket, key, data, mtime=mtime, **attrs)
        if after_gets <= 0:
            do()
            return None
        return self._add(Fault("replace", after_gets, ("GET",), bucket, key, action=do))

    def throttle_above(self, k, service_ms=0):
        """As S3 does per prefix: a request arriving while k are in flight to
        its prefix (bucket and the key up to its first '/') is answered 503
        SlowDown; the others take service_ms more before they answer. None: off.
        self.throttled counts the 503s, self.max_inflight the most served at once, and
        self.max_unanswered the most at once whose answer's last byte had not been written
        yet: a client that starts a request only once another's answer is in can have a
        request in flight here beside that one (its handler not quite over), but not
        unanswered beside it."""
        with self.lock:
            self.throttle_k, self.service_ms = k, service_ms
            self.throttled = self.max_inflight = self.max_unanswered = 0

    def clear_faults(self):
        with self.lock:
            self.faults = []

    def _take_refusal(self, method, bucket, key):
        """A refuse_next fault this request gets (consumed), or None."""
        with self.lock:
            for f in self.faults:
                if f.kind == "refuse" and f.matches(method, bucket, key):
                    f.remaining -= 1
                    self.faults = [g for g in self.faults if g.remaining > 0]
                    return f
        return None

    def _take(self, method, bucket, key, rng=None):
        """The faults this request gets, one per kind; consumes them."""
        taken = {}
        with self.lock:
            for f in self.faults:
                if f.kind not in ("replace", "refuse") and f.kind not in taken and \
                        f.matches(method, bucket, key, rng):
                    f.remaining -= 1
                    taken[f.kind] = f
            self.faults = [f for f in self.faults if f.remaining > 0]
        return taken

    def _served_get(self, bucket, key):
        actions = []
        with self.lock:
            for f in self.faults:
                if f.kind == "replace" and f.matches("GET", bucket, key):
                    f.remaining -= 1
                    if f.remaining == 0:
                        actions.append(f.params["action"])
            self.faults = [f for f in self.faults if f.remaining > 0]
        for a in actions:
            a()

    # -- request log
    def _record(self, rec):
        with self.lock:
            rec["seq"] = len(self.log) + 1
            self.log.append(rec)

    def mark(self):
        with self.lock:
            return len(self.log)

    def requests(self, since=0, method=None, bucket=None, key=None):
        with self.lock:
            recs = [dict(r) for r in self.log[since:]]
        return [r for r in recs
                if (method is None or r["method"] == method)
                and (bucket is None or r["bucket"] == bucket)
                and (key is None or r["key"] == key)]

    def count(self, since=0, method=None, bucket=None, key=None):
        return len(self.requests(since, method, bucket, key))

    def gets(self, bucket, key, since=0):
        return self.requests(since, "GET", bucket, key)

    def wait_request(self, bucket=None, key=None, since=0, method="GET", rng=None,
                     timeout=30.0):
        """The log record of the first matching request since the mark since, once it has
        got as far as it goes without the test: waiting at a hold_next gate, at a late_next
        gate or pause with the version it answers taken, carried out and waiting at an
        answer_after_next gate, or answered. None if none did
        within timeout (seconds). rng: only a request with this Range header."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                for r in self.log[since:]:
                    if (r.get("arrived") or r.get("done")) and r["method"] == method and \
                            (bucket is None or r.get("bucket") == bucket) and \
                            (key is None or r.get("key") == key) and \
                            (rng is None or r.get("range") == rng):
                        return dict(r)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)

    def wait_idle(self, timeout=5.0):
        """Waits until every logged request has a status (its answer is done)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(r.get("done") for r in self.log):
                    return True
            time.sleep(0.02)
        return False


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "AmazonS3"
    sys_version = ""

    def log_message(self, *args):
        pass

    # -- plumbing
    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        # A client that left before its body ended: S3 keeps nothing of it
        # (it would have stored the bytes that came as the whole object).
        self.short_body = len(body) < n
        return body

    def _send(self, status, headers, body=b"", length=None, chunked=False):
        self.send_response(status)
        rid = "%016X" % next(self.server._ids)
        self.send_header("x-amz-request-id", rid)
        self.send_header("x-amz-id-2", "fault-origin/" + rid)
        for k, v in headers.items():
            self.send_header(k, v)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.rec["status"] = status

    def _finish(self, status, headers, body=b""):
        if getattr(self, "lose_answer", False):
            self.lose_answer = False
            self.rec["done"] = True
            return self._hang_up(False)
        later = getattr(self, "answer_after", None)
        if later:
            self.answer_after = None
            if later.params["gate"] is not None:
                self.rec["arrived"] = True  # carried out (wait_request)
                later.params["gate"].wait(60)
            else:
                time.sleep(later.params["ms"] / 1000.0)
        after = getattr(self, "error_after", None)
        if after and 200 <= status < 300:
            self.error_after = None
            p = after.params
            return self._error(p["status"], p["code"], p["message"])
        try:
            self._answered()
            self._send(status, headers, body)
            if self.command != "HEAD" and body:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The client went first (larder stops a chunk's second GET
            # when the first fails): this answer is over all the same.
            self.rec["client_aborted"] = True
            self.close_connection = True
        finally:
            self.rec["done"] = True

    def _error(self, status, code, message="", extra_xml="", headers=None):
        xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s'
               '</Message>%s<RequestId>FAULTORIGIN</RequestId><HostId>fault-origin</HostId>'
               '</Error>' % (code, escape(message), extra_xml)).encode()
        h = {"Content-Type": "application/xml"}
        h.update(headers or {})
        self.rec["error"] = code
        self._finish(status, h, b"" if self.command == "HEAD" else xml)

    # -- authentication
    def _authenticate(self, hdrs, body):
        """None when the request is correctly signed, else (status, code, message)."""
        srv = self.server
        authz = hdrs.get("authorization", "")
        if not authz:
            return 403, "AccessDenied", "Anonymous access is forbidden for this origin"
        if not authz.startswith("AWS4-HMAC-SHA256 "):
            return 400, "InvalidRequest", "only AWS4-HMAC-SHA256 is accepted"
        fields = {}
        for part in authz[len("AWS4-HMAC-SHA256 "):].split(","):
            k, _, v = part.strip().partition("=")
            fields[k] = v
        try:
            cred = fields["Credential"].split("/")
            key, day, region, service, term = cred
            signed = fields["SignedHeaders"].split(";")
            got = fields["Signature"]
        except (KeyError, ValueError):
            return 400, "AuthorizationHeaderMalformed", "malformed Authorization"
        if key != srv.access_key:
            return 403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist"
        if region != srv.region or service != "s3" or term != "aws4_request":
            return (400, "AuthorizationHeaderMalformed",
                    "wrong credential scope " + fields["Credential"])
        amz_date = hdrs.get("x-amz-date", "")
        try:
            ts = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            return 403, "AccessDenied", "no valid X-Amz-Date"
        if amz_date[:8] != day:
            return 403, "SignatureDoesNotMatch", "credential date differs from X-Amz-Date"
        if abs(ts - time.time()) > MAX_SKEW:
            return 403, "RequestTimeTooSkewed", "clock skew"
        if "host" not in signed:
            return 403, "AccessDenied", "host is not signed"
        want = sigv4_expected(self.command, self.path, hdrs, signed, srv.secret_key, key, region,
                              amz_date)
        if not hmac.compare_digest(got, want):
            return 403, "SignatureDoesNotMatch", "signature does not match"
        claimed = hdrs.get("x-amz-content-sha256")
        if claimed is None:
            return 400, "InvalidRequest", "missing x-amz-content-sha256"
        if (len(claimed) == 64 and body is not None
                and claimed.lower() != hashlib.sha256(body).hexdigest()):
            return 400, "XAmzContentSHA256Mismatch", "body does not match x-amz-content-sha256"
        return None

    # -- dispatch
    def handle_any(self):
        srv = self.server
        path = self.path.partition("?")[0].split("/", 2)
        prefix = (path[1] if len(path) > 1 else "",
                  path[2].split("/", 1)[0] if len(path) > 2 and "/" in path[2] else "")
        with srv.lock:
            k = srv.throttle_k
            n = srv.inflight.get(prefix, 0)
            if k is not None and n >= k:
                srv.throttled += 1
                throttled = True
            else:
                throttled = False
                srv.inflight[prefix] = n + 1
                srv.max_inflight = max(srv.max_inflight, n + 1)
                u = srv.unanswered.get(prefix, 0) + 1
                srv.unanswered[prefix] = u
                srv.max_unanswered = max(srv.max_unanswered, u)
                self.unanswered_prefix = prefix
        if throttled:
            self.rec = {"t": time.time(), "method": self.command, "target": self.path,
                        "status": None, "faults": ["throttle"], "body_sent": 0, "done": False}
            self._body()
            return self._error(503, "SlowDown", "Please reduce your request rate.")
        try:
            if srv.service_ms:
                time.sleep(srv.service_ms / 1000.0)
            return self._handle()
        finally:
            self._answered()
            with srv.lock:
                srv.inflight[prefix] -= 1

    def _answered(self):
        """This request's answer is going out whole now (max_unanswered)."""
        prefix = getattr(self, "unanswered_prefix", None)
        if prefix is not None:
            self.unanswered_prefix = None
            with self.server.lock:
                self.server.unanswered[prefix] -= 1

    def _handle(self):
        srv = self.server
        hdrs = {k.lower(): v for k, v in self.headers.items()}
        path, _, qs = self.path.partition("?")
        parts = path.split("/", 2)
        bucket = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        key = urllib.parse.unquote(parts[2]) if len(parts) > 2 else ""
        query = dict(urllib.parse.parse_qsl(qs, keep_blank_values=True))
        refuse = srv._take_refusal(self.command, bucket, key)
        body = b"" if refuse else self._body()
        self.rec = {"t": time.time(), "method": self.command, "target": self.path,
                    "bucket": bucket, "key": key, "query": query, "headers": hdrs,
                    "range": hdrs.get("range"), "if_match": hdrs.get("if-match"),
                    "status": None, "faults": [], "body_sent": 0, "done": False}
        srv._record(self.rec)
        if getattr(self, "short_body", False):
            self.rec.update(status="incomplete-body", done=True)
            self.close_connection = True
            return None
        if refuse:
            self.rec["faults"] = ["refuse"]
            self.close_connection = True
            p = refuse.params
            self._error(p["status"], p["code"], p["message"], headers={"Connection": "close"})
            # Then read and drop the body, as S3 does, rather than close on
            # unread bytes: that would reset the connection, and the
            # client might lose the answer it was sent.
            self.wfile.flush()
            try:
                self.connection.settimeout(10)
                self._body()
            except (OSError, ValueError):
                pass
            return None
        bad = self._authenticate(hdrs, body)
        if bad:
            self.rec["auth_error"] = bad[1]
            return self._error(*bad)
        with srv.lock:
            raw = srv.answer_raw.get((bucket, key))
            obj = srv.objects.get((bucket, key))
        raw = raw(self.command, hdrs, obj) if raw else None
        if raw is not None:
            # bytes, or pieces of them (an iterable, endless if it likes),
            # each sent as it comes
            pieces = iter([raw] if isinstance(raw, (bytes, bytearray)) else raw)
            first = next(pieces)
            self.rec.update(status=int(first.split(b" ", 2)[1]), faults=["raw"])
            self.close_connection = True
            try:
                for piece in itertools.chain([first], pieces):
                    self.wfile.write(piece)
                    self.wfile.flush()
                    self.rec["raw_sent"] = self.rec.get("raw_sent", 0) + len(piece)
            except (BrokenPipeError, ConnectionResetError):
                self.rec["client_aborted"] = True
            self.rec["done"] = True
            return None
        faults = srv._take(self.command, bucket, key, hdrs.get("range"))
        self.rec["faults"] = sorted(faults)
        self.lose_answer = "lose_answer" in faults
        self.error_after = faults.get("error_after")
        self.answer_after = faults.get("answer_after")
        if "delay" in faults:
            time.sleep(faults["delay"].params["ms"] / 1000.0)
        if "hold" in faults:
            self.rec["arrived"] = True
            faults["hold"].params["gate"].wait(30)
        if "error" in faults:
            p = faults["error"].params
            return self._error(p["status"], p["code"], p["message"])
        if not bucket:
            return self._error(501, "NotImplemented", "ListBuckets is not scripted")
        if self.command in ("GET", "HEAD") and key:
            return self._get_object(bucket, key, hdrs, query, faults.get("drop"),
                                    faults.get("slow"), faults.get("late"),
                                    faults.get("cut_headers"), faults.get("linger"))
        if self.command == "PUT" and key:
            return self._put_object(bucket, key, hdrs, query, body)
        if self.command == "DELETE" and key:
            with srv.lock:
                srv.objects.pop((bucket, key), None)
            return self._finish(204, {})
        if self.command == "GET" and not key and query.get("list-type") == "2":
            with srv.lock:
                page = srv.list_pages.get(bucket)
            if page is None:
                return self._error(501, "NotImplemented", "no listing scripted for " + bucket)
            return self._finish(200, {"Content-Type": "application/xml"},
                                page(query).encode())
        if self.command == "PUT" and not key and not query:
            srv.create_bucket(bucket)
            return self._finish(200, {"Location": "/" + bucket})
        if self.command == "HEAD" and not key:
            with srv.lock:
                found = bucket in srv.buckets
            if not found:
                return self._error(404, "NoSuchBucket", "The specified bucket does not exist")
            return self._finish(200, {"x-amz-bucket-region": srv.region})
        return self._error(501, "NotImplemented", "not scripted: %s %s" % (self.command, self.path))

    do_GET = do_HEAD = do_PUT = do_DELETE = do_POST = handle_any

    def _rename_object(self, bucket, key, source):
        # RenameObject (directory buckets): "/bucket/key" or "bucket/key",
        # URL-encoded, within the same bucket; the source is gone after.
        src_bucket, _, src_key = urllib.parse.unquote(source).lstrip("/").partition("/")
        srv = self.server
        with srv.lock:
            obj = srv.objects.get((src_bucket, src_key)) if src_bucket == bucket else None
            if obj is not None:
                srv.objects[(bucket, key)] = srv.objects.pop((src_bucket, src_key))
        if obj is None:
            return self._error(404, "NoSuchKey", "The specified key does not exist.",
                               "<Key>%s</Key>" % escape(src_key))
        return self._finish(200, {})

    def _get_object(self, bucket, key, hdrs, query, drop=None, slow=None, late=None,
                    cut_headers=None, linger=None):
        srv = self.server
        with srv.lock:
            obj = srv.objects.get((bucket, key))
            has_bucket = bucket in srv.buckets
        self.rec["arrived"] = True  # its version is taken (wait_request)
        if late:  # a PUT meanwhile stores a new object: this answer stays obj's
            if late.params["gate"] is not None:
                late.params["gate"].wait(60)
            else:
                time.sleep(late.params["ms"] / 1000.0)
        if obj is None:
            if not has_bucket:
                return self._error(404, "NoSuchBucket", "The specified bucket does not exist")
            return self._error(404, "NoSuchKey", "The specified key does not exist.",
                               "<Key>%s</Key>" % escape(key))
        size = len(obj.data)
        base = {"ETag": obj.etag, "Last-Modified": http_date(obj.mtime)}
        with srv.lock:
            if (bucket, key) in srv.answer_etag:
                base["ETag"] = srv.answer_etag[(bucket, key)]
                if base["ETag"] is None:
                    del base["ETag"]
            if (bucket, key) in srv.etag_per_answer:
                base["ETag"] = '"%s-a%d"' % (obj.etag.strip('"'), next(srv.etags_made))
            extra = dict(srv.extra_headers.get((bucket, key), {}))
            ignore_if_match = srv.ignore_if_match
        # Preconditions first, as S3 evaluates them before the range.
        im, ius = hdrs.get("if-match"), hdrs.get("if-unmodified-since")
        if ignore_if_match:
            im = None
        inm, ims = hdrs.get("if-none-match"), hdrs.get("if-modified-since")
        failed = None
        if im is not None:
            if not etag_matches(im, obj.etag):
                failed = "If-Match"
        elif ius is not None:
            t = parse_http_date(ius)
            if t is not None and obj.mtime > t:
                failed = "If-Unmodified-Since"
        if failed:
            return self._error(412, "PreconditionFailed",
                               "At least one of the pre-conditions you specified did not hold",
                               "<Condition>%s</Condition>" % failed)
        not_modified = False
        if inm is not None:
            not_modified = etag_matches(inm, obj.etag)
        elif ims is not None:
            t = parse_http_date(ims)
            not_modified = t is not None and obj.mtime <= t
        if not_modified:
            return self._finish(304, {**base, **extra})
        headers = dict(base)
        headers["Content-Type"] = obj.content_type
        headers["Accept-Ranges"] = "bytes"
        for k, v in obj.metadata.items():
            headers["x-amz-meta-" + k] = v
        if self.command == "GET":
            for q, h in OVERRIDES.items():
                if q in query:
                    headers[h] = query[q]
        status, first, last = 200, 0, size - 1
        if "partNumber" in query:
            # S3: one part, 206 with its Content-Range (and the part count of
            # an object uploaded in parts); a single-part object has part 1
            n, sizes = int(query["partNumber"]), obj.parts or [size]
            if hdrs.get("range") is not None:
                return self._error(400, "InvalidRequest",
                                   "Cannot specify both Range header and partNumber query "
                                   "parameter")
            if n > len(sizes):
                return self._error(416, "InvalidPartNumber",
                                   "The requested partnumber is not satisfiable",
                                   "<PartNumberRequested>%d</PartNumberRequested>"
                                   "<ActualPartCount>%d</ActualPartCount>" % (n, len(sizes)))
            first = sum(sizes[:n - 1])
            status, last = 206, first + sizes[n - 1] - 1
            headers["Content-Range"] = "bytes %d-%d/%d" % (first, last, size)
            if obj.parts:
                headers["x-amz-mp-parts-count"] = str(len(obj.parts))
        elif hdrs.get("range") is not None and not srv.ignore_range:
            r = parse_range(hdrs["range"], size)
            if r == "unsatisfiable":
                return self._error(416, "InvalidRange", "The requested range is not satisfiable",
                                   "<ActualObjectSize>%d</ActualObjectSize><RangeRequested>%s"
                                   "</RangeRequested>" % (size, escape(hdrs["range"])),
                                   {"Content-Range": "bytes */%d" % size})
            if r is not None:
                status, (first, last) = 206, r
                headers["Content-Range"] = "bytes %d-%d/%d" % (first, last, size)
        headers.update(extra)
        payload = obj.data[first:last + 1]
        if cut_headers is not None:  # the status line and headers, not the blank line
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.flush_headers()
            self.rec["status"] = status
            self._hang_up(cut_headers.params["reset"])
            self.rec["done"] = True
            return
        linger = linger if self.command == "GET" else None
        self._send(status, headers, length=len(payload), chunked=linger is not None)
        if self.command == "HEAD":
            self.rec["done"] = True
            return
        piece, pause = 65536, 0.0
        if slow is not None:
            piece, pause = slow.params["piece"], slow.params["pause_ms"] / 1000.0
        try:
            if drop is not None:
                cut = max(0, min(drop.params["after"], len(payload)))
                self._write(payload[:cut], piece, pause)
                self.wfile.flush()
                self._hang_up(drop.params["reset"])
                return
            if linger is not None:  # one chunk of it all, then the end of the answer late
                self.wfile.write(b"%x\r\n" % len(payload) + payload + b"\r\n")
                self.wfile.flush()
                self.rec["body_sent"] += len(payload)
                time.sleep(linger.params["ms"] / 1000.0)
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._write(payload, piece, pause)
            srv._served_get(bucket, key)
        except (BrokenPipeError, ConnectionResetError):
            self.rec["client_aborted"] = True
            self.close_connection = True
        finally:
            self.rec["done"] = True

    def _write(self, data, piece=65536, pause=0.0):
        for i in range(0, len(data), piece):
            if pause and i:
                self.wfile.flush()
                time.sleep(pause)
            if i + piece >= len(data):
                self._answered()
            self.wfile.write(data[i:i + piece])
            self.rec["body_sent"] += len(data[i:i + piece])

    def _hang_up(self, reset):
        self.close_connection = True
        self.rec["dropped"] = True
        try:
            if reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _put_object(self, bucket, key, hdrs, query, body):
        srv = self.server
        if query == {"renameObject": ""} and "x-amz-rename-source" in hdrs:
            return self._rename_object(bucket, key, hdrs["x-amz-rename-source"])
        if query:
            return self._error(501, "NotImplemented", "not scripted: PUT ?" + "&".join(query))
        if "x-amz-copy-source" in hdrs:
            return self._error(501, "NotImplemented", "copy is not scripted")
        with srv.lock:
            if bucket not in srv.buckets:
                return self._error(404, "NoSuchBucket", "The specified bucket does not exist")
        if ("aws-chunked" in hdrs.get("content-encoding", "")
                or hdrs.get("x-amz-content-sha256", "").startswith("STREAMING-")):
            try:
                body = decode_aws_chunked(body)
            except ValueError as e:
                return self._error(400, "IncompleteBody", str(e))
        meta = {k[len("x-amz-meta-"):]: v for k, v in hdrs.items() if k.startswith("x-amz-meta-")}
        etag = srv.put(bucket, key, body, hdrs.get("content-type") or "binary/octet-stream", meta)
        return self._finish(200, {"ETag": etag})
