"""moto's S3 server with a request log in front of it: the test upstream.

Run as `python3 moto_upstream.py -H 127.0.0.1 -p PORT --log FILE`. It serves the
same WSGI application as `python3 -m moto.server` and, for every request, appends
one JSON line to FILE when the request arrives ("ev": "start") and one when its
response is done ("ev": "end"). Each line records the raw request-target, the
headers, the body length and whether the body matched x-amz-content-sha256, and
the verdict of an independent SigV4 verifier (sigv4check.py) that checks the
request exactly as it arrived on the wire. Tests use the log to count what
reached upstream and to check that larder's re-signed requests are byte-correct
even where moto's own check is lenient or wrong (see harness.py).

moto's signature enforcement itself is switched on by the harness through
POST /moto-api/reset-auth once an IAM user and access key exist.
"""
import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sigv4check  # noqa: E402

from werkzeug.serving import WSGIRequestHandler, run_simple  # noqa: E402

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app  # noqa: E402

_lock = threading.Lock()
_seq = [0]
_current = threading.local()


def fix_moto_canonical_uri():
    """Make moto's own signature check use the request-target as sent.

    moto (5.x) builds the URL it signs from werkzeug's request.url, which is the
    path percent-decoded and re-quoted with werkzeug's own safe set, then turned
    into an IRI: '+', '%', the sub-delimiters !$&'()*,:;=@ and every non-ASCII
    character end up raw in moto's canonical URI while a correct SigV4 signer has
    them percent-encoded, so moto answers SignatureDoesNotMatch to correctly
    signed requests for such keys. This hands moto the raw request-target
    instead; its check is otherwise unchanged and still rejects wrong secrets.

    The query goes the other way: botocore's signer (which moto uses) takes the
    query's bytes as its canonical form, where S3 decodes each name and value
    and encodes it again. s3fs sends "prefix=a/" signed as "prefix=a%2F" (and
    larder forwards the query as sent): S3 accepts that, moto did not. The
    query handed to moto is therefore re-encoded as S3 canonicalises it.
    """
    from moto.iam import access_control

    original = access_control.IAMRequestBase.__init__
    if getattr(original, "_larder_fixed", False):
        return

    def init(self, *args, **kwargs):
        raw = getattr(_current, "target", None)
        if raw and "path" in kwargs:
            kwargs["path"] = _s3_canonical_query(raw)
        original(self, *args, **kwargs)

    init._larder_fixed = True
    access_control.IAMRequestBase.__init__ = init


class _LazyValue:
    """An object's bytes, read from moto's buffer only where a slice asks."""

    def __init__(self, key):
        self.key = key

    def __len__(self):
        return self.key.size

    def __getitem__(self, span):
        start, stop, step = span.indices(self.key.size)
        if step != 1:
            return self.materialize()[span]
        with self.key.lock:
            self.key._value_buffer.seek(start)
            return self.key._value_buffer.read(max(0, stop - start))

    def materialize(self):
        return self[0:self.key.size]


def read_ranges_in_place():
    """Make moto answer a ranged GET by reading only the range.

    moto (5.x) reads an object's whole value into a new buffer for every GET,
    then slices the range out of it. For the 1 GiB test that is a gigabyte of
    fresh memory per 8 MiB chunk: seconds each on a VM where a first touch of
    a page is slow. Inside get_object, a ranged GET now gets a view that reads
    only the bytes its slice asks for. Whatever else the view meets (a range
    moto answers whole) gets the whole value, as before; status, headers and
    bytes are moto's own.
    """
    from moto.s3 import models, responses

    prop = models.FakeKey.value
    if getattr(prop.fget, "_larder_fixed", False):
        return

    def value(self):
        if getattr(_current, "lazy_value", False):
            return _LazyValue(self)
        return prop.fget(self)

    value._larder_fixed = True
    models.FakeKey.value = property(value, prop.fset)

    original_get = responses.S3Response.get_object

    def get_object(self):
        _current.lazy_value = bool(self.headers.get("range"))
        try:
            return original_get(self)
        finally:
            _current.lazy_value = False

    original_key_response = responses.S3Response.key_response

    def key_response(self, *args, **kwargs):
        status, headers, body = original_key_response(self, *args, **kwargs)
        if isinstance(body, _LazyValue):
            body = body.materialize()
        return status, headers, body

    responses.S3Response.get_object = get_object
    responses.S3Response.key_response = key_response


def last_modified_on_304():
    """Give moto's 304 to a conditional GET or HEAD the object's Last-Modified.

    S3's 304 carries the object's ETag and Last-Modified. moto (5.x) puts
    both in its answer, but werkzeug drops Last-Modified from a 304 as an
    entity header; it is kept here and put back in Logged's start_response.
    larder tells an object copied onto itself with new headers (same bytes,
    so the same ETag) from the one it cached by that Last-Modified.
    """
    from moto.s3 import responses

    original = responses.S3Response.key_response
    if getattr(original, "_larder_lm", False):
        return

    def key_response(self, *args, **kwargs):
        status, headers, body = original(self, *args, **kwargs)
        if status == 304:
            _current.last_modified_304 = next(
                (v for k, v in headers.items() if k.lower() == "last-modified"), None)
        return status, headers, body

    key_response._larder_lm = True
    responses.S3Response.key_response = key_response

def etag_under_the_key_lock():
    """Compute an object's ETag under the lock its bytes are read under.

    moto (5.x) computes a new object's ETag lazily, reading its buffer from
    the start, but without the key's lock, which a GET of the same object
    takes to seek and read that buffer. A GET that lands between the PUT
    storing the object and answering it moves the buffer's position under
    the digest, and the PUT answers an ETag that is not the MD5 of the bytes
    (the bytes stored are right): 38 of 561 PUTs with six readers of the
    object straight at moto, and in each of three one-minute runs of larder's
    warm jobs and readers racing writes. Every ETag is the MD5 again.
    """
    from moto.s3 import models

    prop = models.FakeKey.etag
    if getattr(prop.fget, "_larder_fixed", False):
        return

    def etag(self):
        with self.lock:
            return prop.fget(self)

    etag._larder_fixed = True
    models.FakeKey.etag = property(etag, prop.fset)


def _s3_canonical_query(target):
    """path?query with each query name and value encoded as SigV4 wants."""
    from urllib.parse import quote, unquote
    path, sep, query = target.partition("?")
    if not sep or not query:
        return target
    pairs = []
    for item in query.split("&"):
        name, eq, value = item.partition("=")
        pair = quote(unquote(name), safe="-_.~")
        if eq:
            pair += "=" + quote(unquote(value), safe="-_.~")
        pairs.append(pair)
    return path + "?" + "&".join(pairs)


def _secret_for(access_key):
    from moto.iam.models import iam_backends
    for _account, by_partition in list(iam_backends.items()):
        for _partition, backend in list(by_partition.items()):
            for user in list(backend.users.values()):
                for k in user.access_keys:
                    if k.access_key_id == access_key:
                        return k.secret_access_key
    return None


def _headers(environ):
    out = []
    for k, v in environ.items():
        if k.startswith("HTTP_"):
            out.append((k[5:].replace("_", "-").lower(), v))
        elif k in ("CONTENT_TYPE", "CONTENT_LENGTH") and v != "":
            out.append((k.replace("_", "-").lower(), v))
    return out


class _HashingInput:
    def __init__(self, raw):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.n = 0
        self.broken = False  # a chunked body that stopped short raises on read

    def _take(self, data):
        self.sha.update(data)
        self.n += len(data)
        return data

    def read(self, *a):
        try:
            return self._take(self.raw.read(*a))
        except Exception:
            self.broken = True
            raise

    def readline(self, *a):
        return self._take(self.raw.readline(*a))

    def readlines(self, *a):
        return [self._take(x) for x in self.raw.readlines(*a)]

    def __iter__(self):
        for x in self.raw:
            yield self._take(x)


class Logged:
    def __init__(self, app, path):
        self.app = app
        self.fp = open(path, "a", buffering=1, encoding="utf-8")

    def write(self, rec):
        with _lock:
            self.fp.write(json.dumps(rec, ensure_ascii=False) + "\n")
            self.fp.flush()

    def __call__(self, environ, start_response):
        with _lock:
            _seq[0] += 1
            seq = _seq[0]
        raw_target = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
        method = environ.get("REQUEST_METHOD", "")
        headers = _headers(environ)
        hmap = dict(headers)
        verdict = None
        if "authorization" in hmap:
            try:
                v = sigv4check.verify(method, raw_target, headers, _secret_for)
                verdict = {"ok": v.ok, "reason": v.reason, "access_key": v.access_key}
            except Exception as e:  # the verifier must never take the upstream down
                verdict = {"ok": False, "reason": "verifier error: %r" % (e,)}
        path = raw_target.partition("?")[0]
        _current.target = raw_target
        rec = {"ev": "start", "seq": seq, "t": time.time(), "method": method,
               "target": raw_target, "headers": headers, "sig": verdict,
               "path_canonical": sigv4check.wire_path_is_canonical(path)}
        control = raw_target.startswith("/moto-api/")
        rec["control"] = control
        self.write(rec)
        hin = _HashingInput(environ["wsgi.input"])
        environ["wsgi.input"] = hin
        status_box = {}

        _current.last_modified_304 = None

        def sr(status, response_headers, exc_info=None):
            status_box["status"] = int(status.split(" ", 1)[0])
            lm = getattr(_current, "last_modified_304", None)
            if status_box["status"] == 304 and lm:
                response_headers = list(response_headers) + [("Last-Modified", lm)]
            return start_response(status, response_headers, exc_info)

        sent = 0
        try:
            for chunk in self.app(environ, sr):
                sent += len(chunk)
                yield chunk
        finally:
            claimed = hmap.get("x-amz-content-sha256", "")
            body_ok = None
            # A body that stopped short (larder holds back the last byte of a
            # body it has not verified, then cancels) cannot be stored: only a
            # complete body is judged against its hash.
            declared = hmap.get("content-length")
            complete = not hin.broken and (declared is None or declared == str(hin.n))
            if len(claimed) == 64 and complete:
                body_ok = hin.sha.hexdigest() == claimed.lower()
            self.write({"ev": "end", "seq": seq, "t": time.time(), "method": method,
                        "target": raw_target, "status": status_box.get("status"),
                        "bytes_in": hin.n, "bytes_out": sent, "body_sha_ok": body_ok,
                        "body_complete": complete,
                        "control": control})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-H", "--host", default="127.0.0.1")
    ap.add_argument("-p", "--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--moto-canonical-uri", choices=["raw", "werkzeug"], default="raw",
                    help="raw: moto checks signatures over the request-target as sent "
                         "(fixes moto's mis-encoding); werkzeug: moto's unmodified behaviour")
    args = ap.parse_args()
    if args.moto_canonical_uri == "raw":
        fix_moto_canonical_uri()
    read_ranges_in_place()
    last_modified_on_304()
    etag_under_the_key_lock()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)

    class Quiet(WSGIRequestHandler):
        def log_request(self, *a, **k):
            pass

    run_simple(args.host, args.port, Logged(app, args.log), threaded=True,
               request_handler=Quiet)


if __name__ == "__main__":
    main()
