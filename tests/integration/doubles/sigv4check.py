"""An independent AWS Signature Version 4 verifier for header-signed S3 requests.

Written from the published algorithm (AWS "Signature Version 4 signing process")
with only the standard library, so that it shares no code with botocore (which
moto itself uses to check signatures, and which larder's clients use to sign).

It takes the request exactly as it arrived on the wire -- the raw request-target
(path and query, still percent-encoded) and the header lines -- and rebuilds the
canonical request the way S3 does:

  * canonical URI: the path percent-decoded to bytes, then re-encoded with every
    byte outside A-Z a-z 0-9 - _ . ~ written as %XX (uppercase), '/' kept, and no
    normalisation of '.', '..' or '//' (S3 does not normalise object paths);
  * canonical query: every name and value percent-decoded then re-encoded the same
    way ('/' encoded too), sorted by name then value; X-Amz-Signature left out;
  * canonical headers: the SignedHeaders, lower-cased, values trimmed with inner
    runs of spaces collapsed, repeated headers joined with ',';
  * payload: the x-amz-content-sha256 header value (S3 requires it).

`wire_path_is_canonical()` separately says whether the path as sent is already in
that canonical form, i.e. whether a sender percent-encoded a key byte-exactly.
"""
import hashlib
import hmac
import re
from datetime import datetime, timezone
from urllib.parse import unquote_to_bytes

UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
UNSIGNED = "UNSIGNED-PAYLOAD"
MAX_SKEW_SECONDS = 15 * 60


def uri_encode(data: bytes, keep_slash: bool) -> str:
    out = []
    for b in data:
        if b in UNRESERVED or (keep_slash and b == 0x2F):
            out.append(chr(b))
        else:
            out.append("%%%02X" % b)
    return "".join(out)


def canonical_uri(raw_path: str) -> str:
    return uri_encode(unquote_to_bytes(raw_path), keep_slash=True)


def wire_path_is_canonical(raw_path: str) -> bool:
    return canonical_uri(raw_path) == raw_path


def canonical_query(raw_query: str, drop_signature: bool = False) -> str:
    pairs = []
    if raw_query:
        for part in raw_query.split("&"):
            if part == "":
                continue
            name, _, value = part.partition("=")
            n = uri_encode(unquote_to_bytes(name), keep_slash=False)
            if drop_signature and n == "X-Amz-Signature":
                continue
            pairs.append((n, uri_encode(unquote_to_bytes(value), keep_slash=False)))
    pairs.sort()
    return "&".join("%s=%s" % p for p in pairs)


def _trim(value: str) -> str:
    return re.sub(r"[ \t]+", " ", value.strip())


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    k = _hmac(("AWS4" + secret).encode("utf-8"), date)
    k = _hmac(k, region)
    k = _hmac(k, service)
    return _hmac(k, "aws4_request")


_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9a-f]{64})\s*$")


class Verdict:
    """Result of verify(): ok, and a reason when not ok."""

    def __init__(self, ok, reason="", access_key=None, canonical_request=None):
        self.ok = ok
        self.reason = reason
        self.access_key = access_key
        self.canonical_request = canonical_request

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return "Verdict(ok=%r, reason=%r)" % (self.ok, self.reason)


def verify(method, raw_target, headers, secret_for, now=None):
    """Verify a header-signed request.

    method: 'GET', ...; raw_target: the request-target as sent ('/b/k%20x?list-type=2');
    headers: list of (name, value) as received; secret_for: access key id -> secret or None.
    """
    lower = {}
    for name, value in headers:
        lower.setdefault(name.lower(), []).append(value)
    auth = lower.get("authorization")
    if not auth:
        return Verdict(False, "no Authorization header")
    m = _AUTH_RE.match(auth[0].strip())
    if not m:
        return Verdict(False, "malformed Authorization header")
    credential, signed, signature = m.groups()
    scope = credential.split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        return Verdict(False, "malformed credential scope")
    access_key, date, region, service = scope[0], scope[1], scope[2], scope[3]
    secret = secret_for(access_key)
    if secret is None:
        return Verdict(False, "unknown access key", access_key)
    amz_date = (lower.get("x-amz-date") or [""])[0]
    if not re.fullmatch(r"\d{8}T\d{6}Z", amz_date) or amz_date[:8] != date:
        return Verdict(False, "bad or missing x-amz-date", access_key)
    when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    if abs((now - when).total_seconds()) > MAX_SKEW_SECONDS:
        return Verdict(False, "request time too skewed", access_key)
    payload = (lower.get("x-amz-content-sha256") or [None])[0]
    if payload is None:
        return Verdict(False, "no x-amz-content-sha256", access_key)
    names = signed.split(";")
    if names != sorted(names) or "host" not in names:
        return Verdict(False, "SignedHeaders not sorted or without host", access_key)
    for required in ("x-amz-date", "x-amz-content-sha256"):
        if required not in names:
            return Verdict(False, "%s not signed" % required, access_key)
    canon_headers = []
    for n in names:
        if n not in lower:
            return Verdict(False, "signed header %s absent" % n, access_key)
        canon_headers.append("%s:%s\n" % (n, ",".join(_trim(v) for v in lower[n])))
    path, _, query = raw_target.partition("?")
    creq = "\n".join([method.upper(), canonical_uri(path), canonical_query(query),
                      "".join(canon_headers), signed, payload.strip()])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, "/".join(scope[1:]),
                     hashlib.sha256(creq.encode("utf-8")).hexdigest()])
    want = hmac.new(signing_key(secret, date, region, service), sts.encode("utf-8"),
                    hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, signature):
        return Verdict(False, "signature does not match", access_key, creq)
    return Verdict(True, "", access_key, creq)
