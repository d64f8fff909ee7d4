"""Trust audit (issue 10), authentication items: what larder verifies before
it re-signs a request with its own upstream credentials, and what it
forwards. Each test names the finding it covers."""
import http.client
import json
import time
import urllib.parse
import urllib.request

import boto3
from botocore.config import Config

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, LarderCase

PFX_KEY, PFX_SECRET = "LARDERTRUSTPREFIX001", "trust-prefix-secret-00000000000000000001"
# read-write on trust/uploads/ only: it may copy within that prefix, never
# from trust/datasets/
W_KEY, W_SECRET = "LARDERTRUSTWRITER001", "trust-writer-secret-00000000000000000001"
ADMIN_TOKEN = "trust-admin-token-0123456789abcdef"

CONFIG = """
[key %s]
secret = %s
access = read-only
buckets = trust/pub/

[key %s]
secret = %s
access = read-write
buckets = trust/uploads/

[anonymous]
buckets = trust/pub/
""" % (PFX_KEY, PFX_SECRET, W_KEY, W_SECRET)

BODY = b"private model bytes " * 50


def send(url, method, headers=None, body=None, extra=()):
    """One request to a full URL; extra is a list of (name, value) sent as
    well (repeats allowed). Returns (status, lower-cased headers, body)."""
    parts = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        target = parts.path + ("?" + parts.query if parts.query else "")
        c.putrequest(method, target, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            c.putheader(k, v)
        for k, v in extra:
            c.putheader(k, v)
        if body is not None:
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def presign_v4(method, url, key=CLIENT_KEY, secret=CLIENT_SECRET, headers=None):
    """url presigned with SigV4 as it is, query included (botocore leaves
    x-amz-* parameters already in the query where they are); headers are
    signed too."""
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    req = AWSRequest(method=method, url=url, headers=dict(headers or {}))
    S3SigV4QueryAuth(Credentials(key, secret), "s3", harness.REGION,
                     expires=300).add_auth(req)
    return req.url



def error_of(body):
    import xml.etree.ElementTree as ET
    root = ET.fromstring(body)
    return {child.tag: child.text for child in root}


class TrustAuth(LarderCase):
    CONFIG_TEXT = CONFIG
    ADMIN_PORT = harness.free_port()
    LARDER_ENV = {"LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % ADMIN_PORT,
                  "LARDER_ADMIN_TOKEN": ADMIN_TOKEN}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket="trust")
        cls.direct.put_object(Bucket="trust", Key="datasets/private/model.bin", Body=BODY)
        cls.direct.put_object(Bucket="trust", Key="pub/open.txt", Body=b"open")
        # boto3 as users get it against a custom endpoint: SigV2 presigned URLs.
        cls.v2 = boto3.session.Session().client(
            "s3", endpoint_url=cls.larder.url, region_name=harness.REGION,
            aws_access_key_id=CLIENT_KEY, aws_secret_access_key=CLIENT_SECRET,
            config=Config(signature_version="s3", retries={"max_attempts": 1},
                          s3={"addressing_style": "path"}))

    def expect_error(self, resp, status, code, message=None):
        st, hdrs, body = resp
        self.assertEqual(st, status, body[:1000])
        err = error_of(body)
        self.assertEqual(err.get("Code"), code, body[:1000])
        if message is not None:
            self.assertEqual(err.get("Message"), message, body[:1000])
        return err

    # -- item 1: x-amz-* headers the signature does not cover
    def test_presigned_put_with_unsigned_copy_source_is_refused(self):
        url = self.s3.generate_presigned_url(
            "put_object", Params={"Bucket": "trust", "Key": "uploads/incoming/u7.bin"},
            ExpiresIn=300)
        before = self.upstream.mark()
        resp = send(url, "PUT", {"x-amz-copy-source": "trust/datasets/private/model.bin",
                                 "x-amz-acl": "public-read"}, body=b"")
        self.expect_error(resp, 403, "AccessDenied",
                          "There were headers present in the request which were not signed")
        self.assertIn(b"<HeadersNotSigned>x-amz-acl, x-amz-copy-source</HeadersNotSigned>",
                      resp[2])
        self.assertEqual(self.upstream.from_larder(before), [], "refused request went upstream")
        with self.assertRaises(Exception):
            self.direct.head_object(Bucket="trust", Key="uploads/incoming/u7.bin")
        # The same URL with only what it signed still works.
        st, _, body = send(url, "PUT", body=b"the upload")
        self.assertEqual(st, 200, body)

    def test_header_signed_request_with_extra_unsigned_acl_is_refused(self):
        url = self.larder.url + "/trust/uploads/h1.bin"
        h = harness.sign_headers("PUT", url, CLIENT_KEY, CLIENT_SECRET, body=b"data")
        resp = send(url, "PUT", h, body=b"data", extra=[("x-amz-acl", "public-read")])
        self.expect_error(resp, 403, "AccessDenied",
                          "There were headers present in the request which were not signed")
        st, _, body = send(url, "PUT", h, body=b"data")
        self.assertEqual(st, 200, body)

    def test_many_unsigned_headers_are_all_named(self):
        # The list outgrew a fixed 512-byte field once: the XML was cut.
        url = self.larder.url + "/trust/uploads/h2.bin"
        h = harness.sign_headers("PUT", url, CLIENT_KEY, CLIENT_SECRET, body=b"data")
        extra = [("x-amz-meta-unsigned-header-%02d" % i, "v") for i in range(40)]
        err = self.expect_error(send(url, "PUT", h, body=b"data", extra=extra), 403,
                                "AccessDenied")
        self.assertEqual(err.get("HeadersNotSigned"), ", ".join(sorted(n for n, _ in extra)))

    def test_presigned_put_with_unsigned_content_type_is_accepted(self):
        # S3 accepts standard headers a presigned URL did not sign; larder
        # forwards them as S3 would apply them.
        url = self.s3.generate_presigned_url(
            "put_object", Params={"Bucket": "trust", "Key": "uploads/ct.bin"}, ExpiresIn=300)
        st, _, body = send(url, "PUT", {"Content-Type": "text/x-trust"}, body=b"ct")
        self.assertEqual(st, 200, body)
        head = self.direct.head_object(Bucket="trust", Key="uploads/ct.bin")
        self.assertEqual(head["ContentType"], "text/x-trust")

    def test_presigned_v4_signed_amz_header_still_works(self):
        url = self.s3.generate_presigned_url(
            "put_object", Params={"Bucket": "trust", "Key": "uploads/meta.bin",
                                  "Metadata": {"who": "signed"}}, ExpiresIn=300)
        st, _, body = send(url, "PUT", {"x-amz-meta-who": "signed"}, body=b"m")
        self.assertEqual(st, 200, body)
        head = self.direct.head_object(Bucket="trust", Key="uploads/meta.bin")
        self.assertEqual(head["Metadata"], {"who": "signed"})

    def test_sigv2_presigned_put_with_added_amz_header_is_refused(self):
        # SigV2 signs every x-amz-* header: one added later breaks the signature.
        url = self.v2.generate_presigned_url(
            "put_object", Params={"Bucket": "trust", "Key": "uploads/v2.bin"}, ExpiresIn=300)
        self.assertIn("AWSAccessKeyId=", url)
        resp = send(url, "PUT", {"x-amz-copy-source": "trust/datasets/private/model.bin"},
                    body=b"")
        self.expect_error(resp, 403, "SignatureDoesNotMatch")

    # -- item 10: SigV2 presigned URLs expire within 7 days
    def test_sigv2_presigned_url_valid_for_more_than_seven_days_is_refused(self):
        url = self.v2.generate_presigned_url(
            "get_object", Params={"Bucket": "trust", "Key": "pub/open.txt"},
            ExpiresIn=8 * 24 * 3600)
        self.expect_error(send(url, "GET"), 403, "AccessDenied")
        ok = self.v2.generate_presigned_url(
            "get_object", Params={"Bucket": "trust", "Key": "pub/open.txt"},
            ExpiresIn=7 * 24 * 3600 - 60)
        self.assertEqual(send(ok, "GET")[0], 200)

    # -- item 11: only authenticated requests get per-bucket stats rows
    def test_unauthenticated_requests_do_not_create_bucket_stats_rows(self):
        for i in range(5):
            send(self.larder.url + "/junk-bucket-%d/x" % i, "GET")
            send(self.larder.url + "/junk-sig-%d/x" % i, "GET",
                 {"Authorization": "AWS4-HMAC-SHA256 Credential=%s/20200101/us-east-1/s3/"
                  "aws4_request, SignedHeaders=host, Signature=%s" % (CLIENT_KEY, "0" * 64),
                  "x-amz-date": "20200101T000000Z", "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        harness.signed_request(self.larder.url, "GET", "/trust/pub/open.txt")
        req = urllib.request.Request("http://127.0.0.1:%d/admin/stats" % self.ADMIN_PORT,
                                     headers={"Authorization": "Bearer " + ADMIN_TOKEN})
        deadline = time.monotonic() + 5
        while True:
            doc = json.load(urllib.request.urlopen(req, timeout=10))
            if "trust" in doc["buckets"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertIn("trust", doc["buckets"])
        junk = [b for b in doc["buckets"] if b.startswith("junk-")]
        self.assertEqual(junk, [], "refused requests made stats rows")

    # -- item 12: response-* overrides need a signed request
    def test_anonymous_response_override_is_refused(self):
        st, _, body = send(self.larder.url + "/trust/pub/open.txt", "GET")
        self.assertEqual((st, body), (200, b"open"))
        resp = send(self.larder.url + "/trust/pub/open.txt?response-content-type=text%2Fhtml",
                    "GET")
        self.expect_error(resp, 400, "InvalidRequest", "Request specific response headers "
                          "cannot be used for anonymous GET requests.")

    def test_percent_encoded_parameter_name_is_refused(self):
        # S3 decodes parameter names, so "response%2Dcontent-type" is an
        # override there; larder, matching names as sent, would miss it.
        resp = send(self.larder.url + "/trust/pub/open.txt?response%2Dcontent-type=text%2Fhtml",
                    "GET")
        self.expect_error(resp, 400, "InvalidArgument",
                          "Query parameter names must not be percent-encoded.")

    # -- item 15: a SigV2 presigned URL's x-amz-* parameters are forwarded
    def test_sigv2_presigned_query_amz_headers_are_forwarded(self):
        url = self.v2.generate_presigned_url(
            "put_object", Params={"Bucket": "trust", "Key": "uploads/v2acl.bin",
                                  "ACL": "public-read", "Metadata": {"from": "query"}},
            ExpiresIn=300)
        self.assertIn("x-amz-acl=public-read", url)
        self.assert_query_headers_forwarded(url, "uploads/v2acl.bin")

    def assert_query_headers_forwarded(self, url, key):
        """A PUT of url (x-amz-acl=public-read and x-amz-meta-from=query in its
        query) sends both upstream as headers and no x-amz-* parameter."""
        before = self.upstream.mark()
        st, _, body = send(url, "PUT", body=b"upload")
        self.assertEqual(st, 200, body)
        sent = self.upstream.from_larder(before)
        self.assertEqual(len(sent), 1)
        hdrs = {k.lower(): v for k, v in sent[0]["headers"]}
        self.assertEqual(hdrs.get("x-amz-acl"), "public-read")
        self.assertNotIn("x-amz-", sent[0]["target"].lower())
        head = self.direct.head_object(Bucket="trust", Key=key)
        self.assertEqual(head["Metadata"], {"from": "query"})

    # -- item 16: X-Amz-Expires out of range is 403
    def test_presigned_v4_expires_out_of_range_is_access_denied(self):
        base = self.s3.generate_presigned_url(
            "get_object", Params={"Bucket": "trust", "Key": "pub/open.txt"}, ExpiresIn=300)
        week = ("X-Amz-Expires must be less than a week (in seconds); that is, the given "
                "X-Amz-Expires must be less than 604800 seconds")
        for value, message in (("604801", week), ("0", "X-Amz-Expires must be non-negative"),
                               ("-5", "X-Amz-Expires must be non-negative")):
            url = base.replace("X-Amz-Expires=300", "X-Amz-Expires=" + value)
            self.expect_error(send(url, "GET"), 403, "AccessDenied", message)

    # -- item 17: duplicates, credential scope (log forging: tests/unit/base/test_log.c)
    def test_duplicate_copy_source_headers_are_refused(self):
        url = self.larder.url + "/trust/uploads/dup.bin"
        # Signed as one header "a,b" (how repeated headers are canonicalised),
        # sent as two.
        h = harness.sign_headers("PUT", url, CLIENT_KEY, CLIENT_SECRET, headers={
            "x-amz-copy-source": "trust/pub/open.txt,trust/datasets/private/model.bin"})
        del h["x-amz-copy-source"]
        resp = send(url, "PUT", h, extra=[("x-amz-copy-source", "trust/pub/open.txt"),
                                          ("x-amz-copy-source", "trust/datasets/private/model.bin")])
        self.expect_error(resp, 400, "InvalidArgument")

    def test_duplicate_prefix_query_parameters_are_refused(self):
        c = self.larder.client(key=PFX_KEY, secret=PFX_SECRET)
        c.list_objects_v2(Bucket="trust", Prefix="pub/")
        url = self.larder.url + "/trust?list-type=2&prefix=pub%2F&prefix=datasets%2F"
        h = harness.sign_headers("GET", url, PFX_KEY, PFX_SECRET)
        self.expect_error(send(url, "GET", h), 400, "InvalidArgument")

    def test_credential_scope_for_another_region_is_refused(self):
        url = self.larder.url + "/trust/pub/open.txt"
        h = harness.sign_headers("GET", url, CLIENT_KEY, CLIENT_SECRET)
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        req = AWSRequest(method="GET", url=url, headers={"X-Amz-Content-SHA256":
                                                         h["X-Amz-Content-SHA256"]})
        S3SigV4Auth(Credentials(CLIENT_KEY, CLIENT_SECRET), "s3", "eu-west-3").add_auth(req)
        err = self.expect_error(send(url, "GET", dict(req.headers.items())), 400,
                                "AuthorizationHeaderMalformed",
                                "The authorization header is malformed; the region 'eu-west-3' "
                                "is wrong; expecting '%s'" % harness.REGION)
        self.assertEqual(err.get("Region"), harness.REGION)
        other = self.larder.client(region_name="eu-west-3")
        url = other.generate_presigned_url(
            "get_object", Params={"Bucket": "trust", "Key": "pub/open.txt"}, ExpiresIn=300)
        err = self.expect_error(send(url, "GET"), 400, "AuthorizationQueryParametersError",
                                "Error parsing the X-Amz-Credential parameter; the region "
                                "'eu-west-3' is wrong; expecting '%s'" % harness.REGION)
        self.assertEqual(err.get("Region"), harness.REGION)

    def test_credential_scope_for_another_service_is_refused(self):
        url = self.larder.url + "/trust/pub/open.txt"
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        req = AWSRequest(method="GET", url=url, headers={
            "X-Amz-Content-SHA256": harness.sign_headers("GET", url, CLIENT_KEY,
                                                         CLIENT_SECRET)["X-Amz-Content-SHA256"]})
        S3SigV4Auth(Credentials(CLIENT_KEY, CLIENT_SECRET), "iam", harness.REGION).add_auth(req)
        self.expect_error(send(url, "GET", dict(req.headers.items())), 400,
                          "AuthorizationHeaderMalformed",
                          "The authorization header is malformed; incorrect service \"iam\". "
                          "This endpoint belongs to \"s3\".")

    def test_presigned_v4_hoisted_amz_query_parameters_are_forwarded(self):
        # The JavaScript SDK's presigner moves x-amz-* headers into the
        # query; they are signed there and S3 applies them as headers.
        url = (self.larder.url + "/trust/uploads/hoisted.bin?x-amz-acl=public-read"
               "&x-amz-meta-from=query")
        signed = presign_v4("PUT", url)
        self.assert_query_headers_forwarded(signed, "uploads/hoisted.bin")

    def test_query_header_with_line_break_is_refused(self):
        # A signed but hostile presigned URL: its query-carried header must
        # not add headers of its own to the upstream request.
        url = (self.larder.url + "/trust/uploads/crlf.bin?x-amz-meta-a=1%0D%0Ax-amz-acl:"
               "%20public-read")
        signed = presign_v4("PUT", url)
        before = self.upstream.mark()
        self.expect_error(send(signed, "PUT", body=b"x"), 400, "InvalidArgument")
        self.assertEqual(self.upstream.from_larder(before), [])


    # -- the second review (2026-11-25): sources named in the query, control
    # bytes in header values, a presigned URL that signs the body's digest
    def writer_v2(self):
        return boto3.session.Session().client(
            "s3", endpoint_url=self.larder.url, region_name=harness.REGION,
            aws_access_key_id=W_KEY, aws_secret_access_key=W_SECRET,
            config=Config(signature_version="s3", retries={"max_attempts": 1},
                          s3={"addressing_style": "path"}))

    def test_copy_source_in_a_presigned_query_is_checked(self):
        # S3 applies a presigned URL's x-amz-* parameters as headers, so a
        # copy source there is as much a read of the source as the header.
        private = "trust/datasets/private/model.bin"
        v4 = presign_v4("PUT", self.larder.url + "/trust/uploads/stolen-v4?x-amz-copy-source=" +
                        urllib.parse.quote(private, safe=""), W_KEY, W_SECRET)
        v2 = self.writer_v2().generate_presigned_url(
            "copy_object", Params={"Bucket": "trust", "Key": "uploads/stolen-v2",
                                   "CopySource": private}, ExpiresIn=300)
        self.assertIn("x-amz-copy-source=", v2)
        for url in (v4, v2):
            before = self.upstream.mark()
            self.expect_error(send(url, "PUT", body=b""), 403, "AccessDenied")
            self.assertEqual(self.upstream.from_larder(before), [])
        for key in ("uploads/stolen-v4", "uploads/stolen-v2"):
            with self.assertRaises(Exception):
                self.direct.head_object(Bucket="trust", Key=key)
        # from a source the key may read, the same URL copies
        self.direct.put_object(Bucket="trust", Key="uploads/src", Body=b"mine")
        url = presign_v4("PUT", self.larder.url + "/trust/uploads/copied?x-amz-copy-source=" +
                         urllib.parse.quote("trust/uploads/src", safe=""), W_KEY, W_SECRET)
        st, _, body = send(url, "PUT", body=b"")
        self.assertEqual(st, 200, body)
        got = self.direct.get_object(Bucket="trust", Key="uploads/copied")["Body"].read()
        self.assertEqual(got, b"mine")

    def test_copy_source_in_both_header_and_query_is_refused(self):
        url = presign_v4("PUT", self.larder.url + "/trust/uploads/both?x-amz-copy-source=" +
                         urllib.parse.quote("trust/datasets/private/model.bin", safe=""),
                         W_KEY, W_SECRET, headers={"x-amz-copy-source": "trust/pub/open.txt"})
        before = self.upstream.mark()
        self.expect_error(send(url, "PUT", {"x-amz-copy-source": "trust/pub/open.txt"}, b""),
                          400, "InvalidArgument", "Only one x-amz-copy-source header is allowed")
        self.assertEqual(self.upstream.from_larder(before), [])

    def test_copy_source_with_a_nul_is_refused(self):
        # Cut at the NUL, the name checked ("uploads/a") would be inside the
        # grant while S3 is asked for the whole one.
        url = self.larder.url + "/trust/uploads/b"
        h = harness.sign_headers("PUT", url, W_KEY, W_SECRET, headers={
            "x-amz-copy-source": "trust/uploads/a%00/../../datasets/private/model.bin"})
        before = self.upstream.mark()
        self.expect_error(send(url, "PUT", h, b""), 403, "AccessDenied")
        self.assertEqual(self.upstream.from_larder(before), [])

    def test_rename_source_needs_read_and_write_there(self):
        url = self.larder.url + "/trust/uploads/renamed?renameObject"
        for source in ("/trust/datasets/private/model.bin", "/trust/pub/open.txt"):
            h = harness.sign_headers("PUT", url, W_KEY, W_SECRET,
                                     headers={"x-amz-rename-source": source})
            before = self.upstream.mark()
            self.expect_error(send(url, "PUT", h, b""), 403, "AccessDenied")
            self.assertEqual(self.upstream.from_larder(before), [])
        # within the grant it goes upstream (whatever S3 makes of it there)
        h = harness.sign_headers("PUT", url, W_KEY, W_SECRET,
                                 headers={"x-amz-rename-source": "/trust/uploads/old-name"})
        before = self.upstream.mark()
        st, _, body = send(url, "PUT", h, b"")
        self.assertNotEqual(st, 403, body)
        self.assertEqual(len(self.upstream.from_larder(before)), 1)

    def test_header_value_with_a_bare_cr_is_refused(self):
        # libmicrohttpd keeps a bare CR inside the value; an upstream that
        # ends the line there would see a header larder never checked.
        url = self.larder.url + "/trust/uploads/smuggled"
        h = harness.sign_headers("PUT", url, W_KEY, W_SECRET, body=b"")
        port = int(self.larder.url.rsplit(":", 1)[1])
        req = (b"PUT /trust/uploads/smuggled HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port +
               b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in h.items()) +
               b"Content-Length: 0\r\n"
               b"User-Agent: x\rx-amz-copy-source: trust/datasets/private/model.bin\r\n"
               b"Connection: close\r\n\r\n")
        before = self.upstream.mark()
        head, _, body = harness.raw_exchange(port, req).partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 400 "), head)
        self.assertEqual(error_of(body)["Code"], "InvalidArgument")
        self.assertEqual(self.upstream.from_larder(before), [])
        with self.assertRaises(Exception):
            self.direct.head_object(Bucket="trust", Key="uploads/smuggled")

    def test_presigned_put_that_signs_the_digest_keeps_the_body_to_it(self):
        import hashlib
        good, other = b"approved content", b"another body altogether"
        digest = hashlib.sha256(good).hexdigest()
        url = presign_v4("PUT", self.larder.url + "/trust/uploads/pinned", W_KEY, W_SECRET,
                         headers={"X-Amz-Content-SHA256": digest})
        self.assertIn("x-amz-content-sha256", urllib.parse.unquote(url).lower())
        self.expect_error(send(url, "PUT", {"X-Amz-Content-SHA256": digest}, other), 400,
                          "XAmzContentSHA256Mismatch")
        with self.assertRaises(Exception):
            self.direct.head_object(Bucket="trust", Key="uploads/pinned")
        before = self.upstream.mark()
        st, _, body = send(url, "PUT", {"X-Amz-Content-SHA256": digest}, good)
        self.assertEqual(st, 200, body)
        sent = self.upstream.from_larder(before)
        self.assertEqual(dict(sent[0]["headers"]).get("x-amz-content-sha256"), digest)
        got = self.direct.get_object(Bucket="trust", Key="uploads/pinned")["Body"].read()
        self.assertEqual(got, good)

    def test_presigned_url_signed_over_a_query_digest_does_not_verify(self):
        # S3 signs a presigned URL over UNSIGNED-PAYLOAD and never holds
        # the body to an X-Amz-Content-Sha256 query parameter: a URL signed
        # over that digest fails there, and must here, or anyone holding it
        # could upload any body while the signer thought it pinned one.
        import hashlib
        from botocore.auth import S3SigV4QueryAuth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        good, other = b"approved content", b"another body altogether"
        digest = hashlib.sha256(good).hexdigest()
        req = AWSRequest(method="PUT", url=self.larder.url + "/trust/uploads/qpinned?"
                         "X-Amz-Content-Sha256=" + digest)
        auth = S3SigV4QueryAuth(Credentials(W_KEY, W_SECRET), "s3", harness.REGION,
                                expires=300)
        auth.payload = lambda request: digest
        auth.add_auth(req)
        before = self.upstream.mark()
        self.expect_error(send(req.url, "PUT", body=other), 403, "SignatureDoesNotMatch")
        self.assertEqual(self.upstream.from_larder(before), [])
        with self.assertRaises(Exception):
            self.direct.head_object(Bucket="trust", Key="uploads/qpinned")


class TrustAuthRegion(LarderCase):
    """Which regions a client may sign for when larder's upstream region is
    not us-east-1."""
    LARDER_ENV = {"LARDER_UPSTREAM_REGION": "eu-west-1"}
    CONFIG_TEXT = "[bucket far]\nregion = ap-south-1\n"

    def status_signed_for(self, region, path):
        url = self.larder.url + path
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        req = AWSRequest(method="GET", url=url, headers={"X-Amz-Content-SHA256":
                                                         "UNSIGNED-PAYLOAD"})
        S3SigV4Auth(Credentials(CLIENT_KEY, CLIENT_SECRET), "s3", region).add_auth(req)
        return send(url, "GET", dict(req.headers.items()))

    def test_credential_scope_regions_accepted(self):
        self.direct.create_bucket(Bucket="near")
        for region in ("us-east-1", "eu-west-1"):
            st, _, body = self.status_signed_for(region, "/near?list-type=2")
            self.assertEqual(st, 200, (region, body))
        err = error_of(self.status_signed_for("eu-west-3", "/near?list-type=2")[2])
        self.assertEqual((err["Code"], err["Region"]), ("AuthorizationHeaderMalformed",
                                                         "eu-west-1"))
        # A bucket configured elsewhere: its region too, and the error names it.
        err = error_of(self.status_signed_for("ap-south-1", "/near?list-type=2")[2])
        self.assertEqual(err["Region"], "eu-west-1")
        st, _, body = self.status_signed_for("eu-west-3", "/far?list-type=2")
        self.assertEqual(error_of(body)["Region"], "ap-south-1")
        st, _, body = self.status_signed_for("ap-south-1", "/far?list-type=2")
        self.assertNotEqual(error_of(body).get("Code"), "AuthorizationHeaderMalformed", body)
