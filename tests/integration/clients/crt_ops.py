"""The AWS Common Runtime's S3 client (python3-awscrt) against an S3 endpoint.

Run with Debian's /usr/bin/python3 (where python3-awscrt is installed) by
test_crt.py. Endpoint, bucket and keys come from the environment:
S3_ENDPOINT (http://host:port), S3_BUCKET, S3_PREFIX, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, CRT_PART_SIZE (bytes), CRT_OP (upload, download,
range, missing, wrong_secret). Prints one JSON line: {"ok": ..., ...}.
The client is built as users build it: S3Client with a static credentials
provider, plain http (tls_mode DISABLED), a part_size; PUT_OBJECT and
GET_OBJECT meta requests, which the CRT splits into parts itself.
"""
import hashlib
import json
import os
import sys
import threading
import xml.etree.ElementTree as ET

from awscrt import auth, io, s3
from awscrt.http import HttpHeaders, HttpRequest

ENDPOINT = os.environ["S3_ENDPOINT"]
HOST = ENDPOINT.split("://", 1)[1]
BUCKET = os.environ["S3_BUCKET"]
PREFIX = os.environ.get("S3_PREFIX", "")
PART = int(os.environ.get("CRT_PART_SIZE", str(8 * 1024 * 1024)))


def client(secret=None):
    elg = io.EventLoopGroup(2)
    resolver = io.DefaultHostResolver(elg)
    bootstrap = io.ClientBootstrap(elg, resolver)
    creds = auth.AwsCredentialsProvider.new_static(
        os.environ["AWS_ACCESS_KEY_ID"], secret or os.environ["AWS_SECRET_ACCESS_KEY"])
    return s3.S3Client(bootstrap=bootstrap, region="us-east-1", credential_provider=creds,
                       tls_mode=s3.S3RequestTlsMode.DISABLED, part_size=PART)


def run(c, method, key, rtype, headers=(), send_filepath=None, length=None):
    """One meta request; returns (status or None, headers, body, error code)."""
    h = HttpHeaders([("Host", HOST)] + list(headers))
    if length is not None:
        h.add("Content-Length", str(length))
    req = HttpRequest(method, "/%s/%s%s" % (BUCKET, PREFIX, key), h)
    out = {"status": None, "headers": [], "parts": {}, "err": None, "code": None}
    done = threading.Event()

    def on_headers(status_code, headers, **kw):
        out["status"], out["headers"] = status_code, headers

    def on_body(chunk, offset, **kw):
        # Parts arrive in any order; this CRT counts a ranged GET's offsets
        # from the object's start, not the range's.
        out["parts"][offset] = bytes(chunk)

    def on_done(error=None, error_headers=None, error_body=None, **kw):
        if error is not None:
            out["err"] = str(error)
            if error_body:
                try:
                    out["code"] = ET.fromstring(bytes(error_body)).findtext("Code")
                except ET.ParseError:
                    out["code"] = "unparsable: %r" % bytes(error_body)[:200]
        done.set()

    fut = c.make_request(request=req, type=rtype, send_filepath=send_filepath,
                         on_headers=on_headers, on_body=on_body, on_done=on_done).finished_future
    try:
        fut.result(300)
    except Exception:  # on_done has the error
        pass
    done.wait(60)
    out["body"] = b"".join(out["parts"][k] for k in sorted(out["parts"]))
    return out


def main():
    op = os.environ["CRT_OP"]
    res = {"op": op}
    if op == "upload":
        path = os.environ["CRT_FILE"]
        r = run(client(), "PUT", "big.bin", s3.S3RequestType.PUT_OBJECT, send_filepath=path,
                length=os.path.getsize(path))
        res.update(ok=r["err"] is None, status=r["status"], err=r["err"], code=r["code"],
                   etag=dict((k.lower(), v) for k, v in r["headers"]).get("etag"))
    elif op in ("download", "range"):
        hdrs = [("Range", os.environ["CRT_RANGE"])] if op == "range" else []
        r = run(client(), "GET", os.environ.get("CRT_KEY", "big.bin"),
                s3.S3RequestType.GET_OBJECT, headers=hdrs)
        res.update(ok=r["err"] is None, status=r["status"], err=r["err"], code=r["code"],
                   length=len(r["body"]), sha256=hashlib.sha256(r["body"]).hexdigest(),
                   headers=dict((k.lower(), v) for k, v in r["headers"]))
    elif op in ("missing", "wrong_secret"):
        c = client("not-the-secret") if op == "wrong_secret" else client()
        key = "no-such-key" if op == "missing" else "big.bin"
        r = run(c, "GET", key, s3.S3RequestType.GET_OBJECT)
        res.update(ok=r["err"] is not None, err=r["err"], code=r["code"])
    else:
        res.update(ok=False, err="unknown CRT_OP %s" % op)
    print(json.dumps(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
