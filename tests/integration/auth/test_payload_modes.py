"""Request bodies in every payload mode S3 accepts, and virtual-hosted addressing.

boto3 and the AWS CLI over plain HTTP send signed or unsigned single-part
bodies; SDKs that stream (Java, Go, Rust, boto3 over HTTPS) send aws-chunked
bodies. Those are built here by hand from the S3 API reference ("Transferring
payload in multiple chunks") so each mode is exercised exactly.
"""
import base64
import hashlib
import hmac
import os
import zlib

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, REGION, LarderCase, s3_error

EMPTY = hashlib.sha256(b"").hexdigest()


class _DeclaredPayload(S3SigV4Auth):
    """botocore's S3 signer, with the payload hash the caller declares (it
    would otherwise hash the request's own, empty, body)."""

    def __init__(self, content_sha):
        super().__init__(Credentials(CLIENT_KEY, CLIENT_SECRET), "s3", REGION)
        self.content_sha = content_sha

    def payload(self, request):
        return self.content_sha


def signed_headers(url, headers, content_sha):
    """botocore's SigV4 headers for a request whose payload hash is content_sha."""
    req = AWSRequest(method="PUT", url=url, headers=dict(headers))
    _DeclaredPayload(content_sha).add_auth(req)
    assert req.headers["X-Amz-Content-SHA256"] == content_sha
    return dict(req.headers.items())


def signing_key(date):
    k = ("AWS4" + CLIENT_SECRET).encode()
    for part in (date, REGION, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def chunked_signed(data, headers, chunk=64 * 1024, tamper_chunk=None):
    """The aws-chunked body of STREAMING-AWS4-HMAC-SHA256-PAYLOAD."""
    amz_date = headers["X-Amz-Date"]
    scope = "%s/%s/s3/aws4_request" % (amz_date[:8], REGION)
    key = signing_key(amz_date[:8])
    prev = headers["Authorization"].split("Signature=")[1]
    out = []
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]
    for n, piece in enumerate(pieces):
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev, EMPTY,
                         hashlib.sha256(piece).hexdigest()])
        sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        sent = piece
        if n == tamper_chunk:
            sent = bytes([piece[0] ^ 1]) + piece[1:]
        out.append(b"%x;chunk-signature=%s\r\n%s\r\n" % (len(piece), sig.encode(), sent))
        prev = sig
    return b"".join(out)


def chunked_unsigned_trailer(data, crc_b64, chunk=50000):
    out = [b"%x\r\n%s\r\n" % (len(data[i:i + chunk]), data[i:i + chunk])
           for i in range(0, len(data), chunk)]
    out.append(b"0\r\nx-amz-checksum-crc32:%s\r\n\r\n" % crc_b64.encode())
    return b"".join(out)


def send_late(port, path, headers, body, pause=0.5):
    """A PUT whose body follows its headers pause seconds later, as a slow
    client's does; (status, body) of the answer."""
    head = "PUT %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n" % (path, port)
    head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
    out = harness.raw_exchange(port, head.encode(), timeout=30, later=body, pause=pause)
    status = int(out.split(b" ", 2)[1])
    return status, out.partition(b"\r\n\r\n")[2]


def crc32_b64(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


class PayloadModes(LarderCase):
    LARDER_ENV = {"LARDER_BASE_DOMAIN": "s3.larder.test"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3.create_bucket(Bucket="modes")
        cls.data = os.urandom(200 * 1024 + 17)

    def put(self, key, headers, body):
        path = "/modes/" + key
        return harness.http_request(self.larder.url, "PUT", path, headers, body)

    def stored(self, key):
        try:
            return self.direct.get_object(Bucket="modes", Key=key)["Body"].read()
        except self.direct.exceptions.NoSuchKey:
            return None

    def test_streaming_signed(self):
        url = self.larder.url + "/modes/chunked-signed"
        base = {"Content-Encoding": "aws-chunked",
                "x-amz-decoded-content-length": str(len(self.data))}
        h = signed_headers(url, base, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
        body = chunked_signed(self.data, h)
        h["Content-Length"] = str(len(body))
        st, _, resp = self.put("chunked-signed", h, body)
        self.assertEqual(st, 200, resp)
        self.assertEqual(self.stored("chunked-signed"), self.data)

    def test_streaming_signed_tampered_chunk_refused(self):
        url = self.larder.url + "/modes/chunked-bad"
        base = {"Content-Encoding": "aws-chunked",
                "x-amz-decoded-content-length": str(len(self.data))}
        h = signed_headers(url, base, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
        body = chunked_signed(self.data, h, tamper_chunk=1)
        h["Content-Length"] = str(len(body))
        st, _, resp = self.put("chunked-bad", h, body)
        self.assertEqual((st, s3_error(resp)[0]), (403, "SignatureDoesNotMatch"), resp)
        self.assertIsNone(self.stored("chunked-bad"), "a tampered upload was stored")

    def test_unsigned_trailer_checksum(self):
        for key, crc, want in (("trailer-ok", crc32_b64(self.data), 200),
                               ("trailer-bad", crc32_b64(self.data + b"x"), 400)):
            url = self.larder.url + "/modes/" + key
            base = {"Content-Encoding": "aws-chunked", "x-amz-trailer": "x-amz-checksum-crc32",
                    "x-amz-decoded-content-length": str(len(self.data)),
                    "x-amz-sdk-checksum-algorithm": "CRC32"}
            h = signed_headers(url, base, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
            body = chunked_unsigned_trailer(self.data, crc)
            h["Content-Length"] = str(len(body))
            st, hdrs, resp = self.put(key, h, body)
            self.assertEqual(st, want, resp)
            if want == 200:
                self.assertEqual(self.stored(key), self.data)
                # The checksum reaches S3 and is stored with the object: a
                # multipart upload's parts need theirs at completion.
                head = self.direct.head_object(Bucket="modes", Key=key, ChecksumMode="ENABLED")
                self.assertEqual(head.get("ChecksumCRC32"), crc)
                self.assertEqual(hdrs.get("x-amz-checksum-crc32"), crc)
            else:
                self.assertEqual(s3_error(resp)[0], "BadDigest")
                self.assertIsNone(self.stored(key))

    def test_empty_streaming_upload_is_verified_before_upstream(self):
        # With no bytes to hold back, the upload went upstream at once: a
        # bad final-chunk signature still emptied the object (and a good
        # empty upload that came late was answered IncompleteBody).
        self.s3.put_object(Bucket="modes", Key="zero", Body=b"original")
        url = self.larder.url + "/modes/zero"
        base = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "0"}
        h = signed_headers(url, base, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
        good = chunked_signed(b"", h)  # "0;chunk-signature=<sig>\r\n\r\n"
        at = good.index(b"=") + 1
        bad = good[:at] + (b"1" if good[at:at + 1] == b"0" else b"0") + good[at + 1:]
        h["Content-Length"] = str(len(bad))
        before = self.upstream.mark()
        st, resp = send_late(self.larder.port, "/modes/zero", h, bad)
        self.assertEqual((st, s3_error(resp)[0]), (403, "SignatureDoesNotMatch"), resp)
        self.assertEqual(self.stored("zero"), b"original")
        self.assertEqual([r for r in self.upstream.from_larder(before) if r["method"] == "PUT"],
                         [])
        h["Content-Length"] = str(len(good))
        st, resp = send_late(self.larder.port, "/modes/zero", h, good)
        self.assertEqual(st, 200, resp)
        self.assertEqual(self.stored("zero"), b"")

    def test_decoded_length_not_a_number_refused(self):
        # x-amz-decoded-content-length was read without the checks the
        # Content-Length gets: an empty value passed as 0 and one past
        # 2^63 as 2^63-1, and both ended IncompleteBody once the body
        # was read, one of them after a PUT had gone upstream.
        self.s3.put_object(Bucket="modes", Key="declen", Body=b"original")
        url = self.larder.url + "/modes/declen"
        for dl in ("", "99999999999999999999"):
            base = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": dl}
            h = signed_headers(url, base, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
            body = chunked_signed(b"hello", h)
            h["Content-Length"] = str(len(body))
            before = self.upstream.mark()
            st, _, resp = self.put("declen", h, body)
            self.assertEqual((st, s3_error(resp)[0]), (411, "MissingContentLength"), (dl, resp))
            self.assertEqual([r for r in self.upstream.from_larder(before)
                              if r["method"] == "PUT"], [], dl)
        self.assertEqual(self.stored("declen"), b"original")

    def test_content_length_with_transfer_encoding_refused(self):
        # libmicrohttpd reads such a body by its chunks; planned by its
        # Content-Length of 0, it went upstream empty, answered 200.
        self.s3.put_object(Bucket="modes", Key="both", Body=b"original")
        url = self.larder.url + "/modes/both"
        h = signed_headers(url, {}, "UNSIGNED-PAYLOAD")
        h["Content-Length"] = "0"
        h["Transfer-Encoding"] = "chunked"
        before = self.upstream.mark()
        st, resp = send_late(self.larder.port, "/modes/both", h, b"5\r\nhello\r\n0\r\n\r\n")
        self.assertEqual((st, s3_error(resp)[0]), (400, "InvalidRequest"), resp)
        self.assertEqual(self.stored("both"), b"original")
        self.assertEqual(self.upstream.from_larder(before), [])

    def test_transfer_coding_other_than_chunked_refused(self):
        # libmicrohttpd decodes "chunked" alone: it read these bodies as raw
        # bytes until the client hung up, larder streamed them upstream
        # (chunk sizes and all) and the client never got an answer.
        self.s3.put_object(Bucket="modes", Key="coded", Body=b"original")
        for coding in ("gzip, chunked", "identity"):
            h = signed_headers(self.larder.url + "/modes/coded", {}, "UNSIGNED-PAYLOAD")
            h["Transfer-Encoding"] = coding
            head = "PUT /modes/coded HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % self.larder.port
            head += "".join("%s: %s\r\n" % kv for kv in h.items()) + "\r\n"
            before = self.upstream.mark()
            out = harness.raw_exchange(self.larder.port, head.encode() + b"5\r\nhello\r\n0\r\n\r\n",
                                       timeout=10, shutdown_write=True)
            self.assertTrue(out.startswith(b"HTTP/1.1 501 "), (coding, out[:300]))
            body = out.partition(b"\r\n\r\n")[2]
            self.assertEqual(s3_error(body)[0], "NotImplemented", body)
            self.assertIn(b"<Header>Transfer-Encoding</Header>", body)
            self.assertEqual(self.upstream.from_larder(before), [])
        self.assertEqual(self.stored("coded"), b"original")

    def test_put_without_a_length_refused(self):
        # No Content-Length and no Transfer-Encoding: no body at all. S3
        # answers such a PUT 411 MissingContentLength; forwarded with a
        # length of 0 it would replace the object with an empty one.
        self.s3.put_object(Bucket="modes", Key="unframed", Body=b"original")
        h = signed_headers(self.larder.url + "/modes/unframed", {}, "UNSIGNED-PAYLOAD")
        head = "PUT /modes/unframed HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % self.larder.port
        head += "".join("%s: %s\r\n" % kv for kv in h.items()) + "Connection: close\r\n\r\n"
        before = self.upstream.mark()
        out = harness.raw_exchange(self.larder.port, head.encode(), timeout=10)
        self.assertTrue(out.startswith(b"HTTP/1.1 411 "), out[:300])
        self.assertEqual(s3_error(out.partition(b"\r\n\r\n")[2])[0], "MissingContentLength")
        self.assertEqual(self.upstream.from_larder(before), [])
        self.assertEqual(self.stored("unframed"), b"original")

    def test_signed_and_unsigned_single_part(self):
        url = self.larder.url + "/modes/single-signed"
        h = signed_headers(url, {}, hashlib.sha256(self.data).hexdigest())
        st, _, resp = self.put("single-signed", h, self.data)
        self.assertEqual(st, 200, resp)
        url = self.larder.url + "/modes/single-unsigned"
        h = signed_headers(url, {}, "UNSIGNED-PAYLOAD")
        st, _, resp = self.put("single-unsigned", h, self.data)
        self.assertEqual(st, 200, resp)
        self.assertEqual(self.stored("single-signed"), self.data)
        self.assertEqual(self.stored("single-unsigned"), self.data)

    def test_virtual_hosted_request(self):
        self.s3.put_object(Bucket="modes", Key="vh/obj.txt", Body=b"virtual")
        host = "modes.s3.larder.test:%d" % self.larder.port
        h = harness.sign_headers("GET", "http://%s/vh/obj.txt" % host, CLIENT_KEY, CLIENT_SECRET)
        h["Host"] = host
        st, _, body = harness.http_request(self.larder.url, "GET", "/vh/obj.txt", h)
        self.assertEqual((st, body), (200, b"virtual"))
        h = harness.sign_headers("GET", "http://%s/?list-type=2&prefix=vh%%2F" % host,
                                 CLIENT_KEY, CLIENT_SECRET)
        h["Host"] = host
        st, _, body = harness.http_request(self.larder.url, "GET", "/?list-type=2&prefix=vh%2F", h)
        self.assertEqual(st, 200, body)
        self.assertIn(b"<Key>vh/obj.txt</Key>", body)


if __name__ == "__main__":
    import unittest
    unittest.main()
