"""Requests larder must refuse, with the S3 error a client expects, without
forwarding them upstream."""
import datetime
import subprocess
import time
import unittest
from urllib.parse import quote

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, LarderCase, s3_error

RO_KEY, RO_SECRET = "LARDERREADONLY000001", "read-only-secret-000000000000000000000001"
PFX_KEY, PFX_SECRET = "LARDERPREFIXDATA0001", "prefix-data-secret-0000000000000000000001"
BKA_KEY, BKA_SECRET = "LARDERBUCKETA0000001", "bucket-a-secret-000000000000000000000001"
RWP_KEY, RWP_SECRET = "LARDERPREFIXRW000001", "prefix-rw-secret-00000000000000000000001"
PLUS_KEY, PLUS_SECRET = "LARDERPREFIXPLUS0001", "prefix-plus-secret-000000000000000000001"
PLUSRW_KEY, PLUSRW_SECRET = "LARDERPREFIXPLUSRW01", "prefix-plus-rw-secret-000000000000000001"

CONFIG = """
[key %s]
secret = %s
access = read-only
buckets = ref-a, ref-b, ref-h

[key %s]
secret = %s
access = read-only
buckets = ref-a/data/, ref-h/data/

[key %s]
secret = %s
access = read-write
buckets = ref-a, ref-v

[key %s]
secret = %s
access = read-write
buckets = ref-a/rw/, ref-v/rw/, ref-h/data/

[key %s]
secret = %s
access = read-only
buckets = ref-a/c+d/

[key %s]
secret = %s
access = read-write
buckets = ref-a/p+q/
""" % (RO_KEY, RO_SECRET, PFX_KEY, PFX_SECRET, BKA_KEY, BKA_SECRET, RWP_KEY, RWP_SECRET,
       PLUS_KEY, PLUS_SECRET, PLUSRW_KEY, PLUSRW_SECRET)


class Refusals(LarderCase):
    CONFIG_TEXT = CONFIG

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for b in ("ref-a", "ref-b"):
            cls.direct.create_bucket(Bucket=b)
        for k in ("data/x", "database/x", "plain"):
            cls.direct.put_object(Bucket="ref-a", Key=k, Body=("ref-a " + k).encode())
        cls.direct.put_object(Bucket="ref-b", Key="plain", Body=b"ref-b plain")

    def refused(self, fn, status, code):
        """fn must fail with status/code, and nothing may reach upstream."""
        before = self.upstream.mark()
        resp = self.assertS3Error(fn, status, code)
        headers = resp["ResponseMetadata"]["HTTPHeaders"]
        self.assertTrue(headers.get("x-amz-request-id"), headers)
        time.sleep(0.2)
        self.assertEqual(self.upstream.requests(before), [],
                         "a refused request reached upstream")
        return resp

    def raw_refused(self, method, path, headers, status, code, body=None):
        before = self.upstream.mark()
        st, hdrs, data = harness.http_request(self.larder.url, method, path, headers, body)
        self.assertEqual(st, status, data[:1000])
        got_code, rid = s3_error(data)
        self.assertEqual(got_code, code, data[:1000])
        self.assertTrue(hdrs.get("x-amz-request-id"))
        self.assertEqual(rid, hdrs.get("x-amz-request-id"), data[:1000])
        time.sleep(0.2)
        self.assertEqual(self.upstream.requests(before), [], "a refused request reached upstream")

    # -- authentication
    def test_wrong_secret(self):
        bad = self.larder.client(secret="definitely-not-the-secret")
        self.refused(lambda: bad.get_object(Bucket="ref-a", Key="plain"), 403,
                     "SignatureDoesNotMatch")
        self.refused(lambda: bad.put_object(Bucket="ref-a", Key="plain", Body=b"overwrite"), 403,
                     "SignatureDoesNotMatch")
        self.assertEqual(self.direct.get_object(Bucket="ref-a", Key="plain")["Body"].read(),
                         b"ref-a plain")

    def test_unknown_key(self):
        c = self.larder.client(key="LARDERNOSUCHKEY00001", secret="whatever")
        self.refused(lambda: c.list_objects_v2(Bucket="ref-a"), 403, "InvalidAccessKeyId")

    def test_upstream_key_is_not_a_client_key(self):
        c = self.larder.client(key=self.upstream.access_key, secret=self.upstream.secret_key)
        self.refused(lambda: c.get_object(Bucket="ref-a", Key="plain"), 403, "InvalidAccessKeyId")

    def test_anonymous(self):
        self.raw_refused("GET", "/ref-a/plain", {}, 403, "AccessDenied")
        self.raw_refused("GET", "/ref-a?list-type=2", {}, 403, "AccessDenied")
        self.raw_refused("PUT", "/ref-a/anon", {"Content-Length": "3"}, 403, "AccessDenied",
                         body=b"abc")

    def test_browser_form_upload_is_not_implemented(self):
        # POST Object (generate_presigned_post) signs a policy in the form,
        # which larder does not read: it was refused as an anonymous request
        # (403 AccessDenied, a permissions problem to the user).
        import requests
        post = self.s3.generate_presigned_post("ref-a", "form/upload.txt")
        before = self.upstream.mark()
        r = requests.post(self.larder.url + "/ref-a", data=post["fields"],
                          files={"file": ("upload.txt", b"form body")}, timeout=30)
        self.assertEqual(r.status_code, 501, r.text[:1000])
        self.assertEqual(s3_error(r.content)[0], "NotImplemented")
        self.assertIn("presigned PUT", r.text)
        self.assertEqual(self.upstream.requests(before), [])

    def test_expired_presigned_url(self):
        url = self.s3.generate_presigned_url("get_object", Params={"Bucket": "ref-a",
                                                                   "Key": "plain"}, ExpiresIn=1)
        time.sleep(2.5)
        before = self.upstream.mark()
        r = subprocess.run(["curl", "-sS", "-g", "-D", "-", url], capture_output=True, timeout=30)
        head, _, body = r.stdout.partition(b"\r\n\r\n")
        self.assertIn(b" 403", head.split(b"\r\n")[0], r.stdout[:1000])
        self.assertEqual(s3_error(body)[0], "AccessDenied", body)
        self.assertEqual(self.upstream.requests(before), [])

    def test_presigned_url_tampered(self):
        url = self.s3.generate_presigned_url("get_object", Params={"Bucket": "ref-a",
                                                                   "Key": "plain"}, ExpiresIn=300)
        # a valid URL works ...
        st, _, data = harness.http_request(self.larder.url, "GET", url[len(self.larder.url):])
        self.assertEqual((st, data), (200, b"ref-a plain"))
        # ... the same URL for another key does not
        path = url[len(self.larder.url):].replace("/ref-a/plain?", "/ref-a/database/x?")
        self.raw_refused("GET", path, {}, 403, "SignatureDoesNotMatch")

    def test_skewed_clock(self):
        for minutes in (20, -20):
            with self.subTest(minutes=minutes):
                when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
                    minutes=minutes)
                url = self.larder.url + "/ref-a/plain"
                h = harness.sign_headers("GET", url, CLIENT_KEY, CLIENT_SECRET, when=when)
                self.raw_refused("GET", "/ref-a/plain", h, 403, "RequestTimeTooSkewed")
        # 5 minutes off is within the allowed skew
        when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
        h = harness.sign_headers("GET", self.larder.url + "/ref-a/plain", CLIENT_KEY,
                                 CLIENT_SECRET, when=when)
        st, _, data = harness.http_request(self.larder.url, "GET", "/ref-a/plain", h)
        self.assertEqual((st, data), (200, b"ref-a plain"))

    def test_tampered_signed_header(self):
        url = self.larder.url + "/ref-a/tampered"
        h = harness.sign_headers("PUT", url, CLIENT_KEY, CLIENT_SECRET,
                                 headers={"x-amz-meta-owner": "alice"}, body=b"payload")
        # The unmodified request is accepted (the test can tell the difference) ...
        st, _, data = harness.http_request(self.larder.url, "PUT", "/ref-a/tampered", h, b"payload")
        self.assertEqual(st, 200, data)
        h["x-amz-meta-owner"] = "mallory"
        self.raw_refused("PUT", "/ref-a/tampered", h, 403, "SignatureDoesNotMatch", body=b"payload")
        self.assertEqual(self.direct.head_object(Bucket="ref-a", Key="tampered")["Metadata"],
                         {"owner": "alice"})

    def test_tampered_path(self):
        h = harness.sign_headers("GET", self.larder.url + "/ref-a/plain", CLIENT_KEY, CLIENT_SECRET)
        self.raw_refused("GET", "/ref-a/database/x", h, 403, "SignatureDoesNotMatch")

    def test_body_not_matching_signed_hash(self):
        url = self.larder.url + "/ref-a/body-swap"
        h = harness.sign_headers("PUT", url, CLIENT_KEY, CLIENT_SECRET, body=b"signed body")
        # larder may only see the mismatch once the body has streamed upstream;
        # what matters is the refusal and that no object was created.
        st, _, data = harness.http_request(self.larder.url, "PUT", "/ref-a/body-swap", h,
                                           b"other body!")
        self.assertIn(st, (400, 403), data)
        self.assertIn(s3_error(data)[0], ("XAmzContentSHA256Mismatch", "SignatureDoesNotMatch",
                                          "BadDigest"), data)
        self.assertS3Error(lambda: self.direct.head_object(Bucket="ref-a", Key="body-swap"),
                           404, "404")

    def test_payload_hash_that_is_no_hash(self):
        # x-amz-content-sha256 names a digest or one of the payload modes; S3
        # answers anything else 400 InvalidArgument naming the header and its
        # value, with a body or without (a GET got XAmzContentSHA256Mismatch:
        # the error for a digest that does not match the body).
        import xml.etree.ElementTree as ET
        for method, path, body in (("GET", "/ref-a/plain", b""),
                                   ("PUT", "/ref-a/no-hash", b"some bytes")):
            with self.subTest(method=method):
                url = self.larder.url + path
                h = harness.sign_headers(method, url, CLIENT_KEY, CLIENT_SECRET, body=body,
                                         payload="GIBBERISH")
                self.assertEqual(h.get("X-Amz-Content-SHA256"), "GIBBERISH", h)
                self.raw_refused(method, path, h, 400, "InvalidArgument", body or None)
                _, _, data = harness.http_request(self.larder.url, method, path, h, body or None)
                err = ET.fromstring(data)
                self.assertEqual((err.findtext("ArgumentName"), err.findtext("ArgumentValue")),
                                 ("x-amz-content-sha256", "GIBBERISH"), data)
                self.assertIn("must be UNSIGNED-PAYLOAD", err.findtext("Message"), data)
        self.assertS3Error(lambda: self.direct.head_object(Bucket="ref-a", Key="no-hash"),
                           404, "404")

    # -- policy
    def test_read_only_key(self):
        ro = self.larder.client(key=RO_KEY, secret=RO_SECRET)
        self.assertEqual(ro.get_object(Bucket="ref-a", Key="plain")["Body"].read(), b"ref-a plain")
        self.assertEqual(ro.get_object(Bucket="ref-b", Key="plain")["Body"].read(), b"ref-b plain")
        self.refused(lambda: ro.put_object(Bucket="ref-a", Key="ro-write", Body=b"x"), 403,
                     "AccessDenied")
        self.refused(lambda: ro.delete_object(Bucket="ref-a", Key="plain"), 403, "AccessDenied")
        self.refused(lambda: ro.create_multipart_upload(Bucket="ref-a", Key="ro-mp"), 403,
                     "AccessDenied")
        self.refused(lambda: ro.copy_object(Bucket="ref-a", Key="ro-copy",
                                            CopySource="ref-a/plain"), 403, "AccessDenied")
        self.refused(lambda: ro.delete_objects(Bucket="ref-a", Delete={"Objects": [{"Key": "plain"}]}),
                     403, "AccessDenied")
        self.assertEqual(self.direct.get_object(Bucket="ref-a", Key="plain")["Body"].read(),
                         b"ref-a plain")

    def test_prefix_grant(self):
        c = self.larder.client(key=PFX_KEY, secret=PFX_SECRET)
        self.assertEqual(c.get_object(Bucket="ref-a", Key="data/x")["Body"].read(), b"ref-a data/x")
        self.refused(lambda: c.get_object(Bucket="ref-a", Key="database/x"), 403, "AccessDenied")
        self.refused(lambda: c.get_object(Bucket="ref-a", Key="plain"), 403, "AccessDenied")
        self.refused(lambda: c.head_object(Bucket="ref-a", Key="database/x"), 403, "403")

    def test_prefix_grant_listing_with_a_plus(self):
        # A raw '+' in a query value is a space to upstream (moto, as a form
        # decoder reads it): "prefix=c+d%2F" lists "c d/", which a grant of
        # c+d/ does not cover.
        for k in ("c d/hidden", "c+d/mine"):
            self.direct.put_object(Bucket="ref-a", Key=k, Body=k.encode())
        # Signed as S3 canonicalises the query: a raw '+' is "%2B" there.
        h = harness.sign_headers("GET", self.larder.url + "/ref-a?list-type=2&prefix=c%2Bd%2F",
                                 PLUS_KEY, PLUS_SECRET)
        self.raw_refused("GET", "/ref-a?list-type=2&prefix=c+d%2F", h, 403, "AccessDenied")
        # the grant's own prefix, percent-encoded, still lists
        c = self.larder.client(key=PLUS_KEY, secret=PLUS_SECRET)
        self.assertEqual([o["Key"] for o in c.list_objects_v2(Bucket="ref-a",
                                                              Prefix="c+d/")["Contents"]],
                         ["c+d/mine"])

    def test_prefix_grant_copy_source_with_a_plus(self):
        # S3 may read a raw '+' in x-amz-copy-source as a space: a key granted
        # p+q/ copying "ref-a/p+q/src" could be reading "p q/src". The grant
        # must cover both readings; the source sent as SDKs send it (%2B)
        # still copies.
        self.direct.put_object(Bucket="ref-a", Key="p+q/src", Body=b"mine")
        self.direct.put_object(Bucket="ref-a", Key="p q/src", Body=b"not mine")
        url = self.larder.url + "/ref-a/p%2Bq/dst"
        h = harness.sign_headers("PUT", url, PLUSRW_KEY, PLUSRW_SECRET,
                                 headers={"x-amz-copy-source": "ref-a/p+q/src"})
        self.raw_refused("PUT", "/ref-a/p%2Bq/dst", h, 403, "AccessDenied")
        c = self.larder.client(key=PLUSRW_KEY, secret=PLUSRW_SECRET)
        c.copy_object(Bucket="ref-a", Key="p+q/dst", CopySource="ref-a/p+q/src")
        self.assertEqual(self.direct.get_object(Bucket="ref-a", Key="p+q/dst")["Body"].read(),
                         b"mine")

    def test_fragment_in_the_target_refused(self):
        # No client sends a '#' (it starts a fragment), and curl cuts the
        # target there on its way upstream: the policy would have read a
        # prefix that upstream never sees, and listed the whole bucket.
        # Signed as S3 canonicalises the query: a raw '#' is "%23" there.
        h = harness.sign_headers("GET", self.larder.url + "/ref-a?list-type=2%23&prefix=data%2F",
                                 PFX_KEY, PFX_SECRET)
        self.raw_refused("GET", "/ref-a?list-type=2#&prefix=data%2F", h, 400, "InvalidURI")
        h = harness.sign_headers("GET", self.larder.url + "/ref-a/data/x%23y", PFX_KEY, PFX_SECRET)
        self.raw_refused("GET", "/ref-a/data/x#y", h, 400, "InvalidURI")

    def test_header_name_that_is_not_a_token_is_refused(self):
        # RFC 9110 5.1/5.6.2: "Name : v", a control byte in a name, and a line folded into
        # the name (libmicrohttpd keeps the fold) are 400, not the 500 curl's refusal to
        # send them upstream made (SDKs retry a 500).
        url = self.larder.url + "/ref-a/newkey"
        for extra in (b"X-Foo : bar", b"X\x01Foo: v", b"X-Foo: a\r\n\tb c"):
            h = harness.sign_headers("PUT", url, harness.CLIENT_KEY, harness.CLIENT_SECRET,
                                     body=b"hello")
            h["Host"] = "127.0.0.1:%d" % self.larder.port
            head = "PUT /ref-a/newkey HTTP/1.1\r\n" + "".join(
                "%s: %s\r\n" % kv for kv in h.items() if kv[0].lower() != "content-length")
            req = head.encode() + b"Content-Length: 5\r\n" + extra + b"\r\n\r\nhello"
            before = self.upstream.mark()
            out = harness.raw_exchange(self.larder.port, req, timeout=10)
            self.assertTrue(out.startswith(b"HTTP/1.1 400 "), (extra, out[:300]))
            self.assertIn(b"<Code>InvalidArgument</Code>", out, extra)
            self.assertEqual(self.upstream.requests(before), [], extra)

    def test_key_too_long_is_answered_in_full(self):
        # S3's KeyTooLongError past 1,024 bytes; and an error document longer than
        # 8 KiB (the key in <Resource>, '&' escaped five times over) still goes out.
        for key in ("k" * 1025, "k" * 8200, "&" * 1700):
            path = "/ref-a/" + quote(key, safe="&")
            h = harness.sign_headers("GET", self.larder.url + path, harness.CLIENT_KEY,
                                     harness.CLIENT_SECRET)
            self.raw_refused("GET", path, h, 400, "KeyTooLongError")

    def test_restore_with_an_output_location_refused(self):
        # A SELECT restore writes its results, with larder's credentials, to
        # the bucket its body names: a key with write access to rw/ only
        # could write into ref-b. A plain restore still goes through.
        c = self.larder.client(key=RWP_KEY, secret=RWP_SECRET)
        self.direct.put_object(Bucket="ref-a", Key="rw/cold", Body=b"cold", StorageClass="GLACIER")
        body = (b"<RestoreRequest><Days>1</Days><Type>SELECT</Type><OutputLocation><S3>"
                b"<BucketName>ref-b</BucketName><Prefix>out/</Prefix></S3></OutputLocation>"
                b"</RestoreRequest>")
        url = self.larder.url + "/ref-a/rw/cold?restore"
        h = harness.sign_headers("POST", url, RWP_KEY, RWP_SECRET, body=body)
        self.raw_refused("POST", "/ref-a/rw/cold?restore", h, 403, "AccessDenied", body=body)
        r = c.restore_object(Bucket="ref-a", Key="rw/cold", RestoreRequest={"Days": 1})
        self.assertIn(r["ResponseMetadata"]["HTTPStatusCode"], (200, 202))

    def test_create_session_refused(self):
        # CreateSession (directory buckets) answers with credentials of the
        # identity that signed it upstream: larder's own, read-write. A key,
        # even one with the whole bucket, never gets them.
        for key, secret in ((RO_KEY, RO_SECRET), (BKA_KEY, BKA_SECRET)):
            with self.subTest(key=key):
                h = harness.sign_headers("GET", self.larder.url + "/ref-a?session", key, secret)
                self.raw_refused("GET", "/ref-a?session", h, 403, "AccessDenied")
        # the same keys still list the bucket
        ro = self.larder.client(key=RO_KEY, secret=RO_SECRET)
        self.assertIn("plain", [o["Key"] for o in ro.list_objects_v2(Bucket="ref-a")["Contents"]])

    def test_delete_objects_under_a_prefix_grant(self):
        # DeleteObjects names its keys in the body: a key granted ref-a/rw/
        # may delete many at once when every one is under rw/, and nothing
        # at all when one is not (the request never reaches upstream).
        c = self.larder.client(key=RWP_KEY, secret=RWP_SECRET)
        for k in ("rw/1", "rw/2", "rw/3 & <odd>", "rw-not/1", "rw/sub/4"):
            self.direct.put_object(Bucket="ref-a", Key=k, Body=k.encode())

        def exists(k):
            try:
                self.direct.head_object(Bucket="ref-a", Key=k)
                return True
            except Exception:
                return False

        r = c.delete_objects(Bucket="ref-a", Delete={"Objects": [{"Key": "rw/1"},
                                                                {"Key": "rw/3 & <odd>"}]})
        self.assertEqual(sorted(d["Key"] for d in r.get("Deleted", [])), ["rw/1", "rw/3 & <odd>"])
        self.assertFalse(exists("rw/1") or exists("rw/3 & <odd>"))
        for outside in ("rw-not/1", "plain", "rw/../plain"):
            with self.subTest(outside=outside):
                self.refused(lambda: c.delete_objects(Bucket="ref-a", Delete={
                    "Objects": [{"Key": "rw/2"}, {"Key": outside}]}), 403, "AccessDenied")
        self.assertTrue(exists("rw/2") and exists("rw-not/1") and exists("plain"))
        # A body that is not a DeleteObjects document: MalformedXML, as S3 says.
        bad = b"<Delete><Object></Object></Delete>"
        h = harness.sign_headers("POST", self.larder.url + "/ref-a?delete", RWP_KEY, RWP_SECRET,
                                 body=bad)
        self.raw_refused("POST", "/ref-a?delete", h, 400, "MalformedXML", body=bad)
        # The AWS CLI's recursive delete (a listing, then DeleteObjects).
        out = self.larder.aws("s3", "rm", "--recursive", "s3://ref-a/rw/", key=RWP_KEY,
                              secret=RWP_SECRET)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertFalse(exists("rw/2") or exists("rw/sub/4"))
        self.assertTrue(exists("rw-not/1"))
        # A read-only prefix key still may not.
        ro = self.larder.client(key=PFX_KEY, secret=PFX_SECRET)
        self.refused(lambda: ro.delete_objects(Bucket="ref-a", Delete={
            "Objects": [{"Key": "data/x"}]}), 403, "AccessDenied")

    def test_a_prefix_grant_does_not_govern_access(self):
        # A read-write key on ref-a/rw/ writes and removes objects there, as
        # s3:PutObject and s3:DeleteObject would. Making them public, tagging
        # them (tags can decide access in IAM policies) or locking them are
        # other permissions at S3 (s3:PutObjectAcl, s3:PutObjectTagging,
        # s3:PutObjectRetention, s3:BypassGovernanceRetention ...), which
        # larder would exercise with its own credentials: only a whole-bucket
        # grant may.
        c = self.larder.client(key=RWP_KEY, secret=RWP_SECRET)
        self.direct.put_object(Bucket="ref-a", Key="rw/acl", Body=b"mine")
        all_users = 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'
        until = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
        put = dict(Bucket="ref-a", Key="rw/pub", Body=b"x")
        cases = {
            "x-amz-acl": lambda: c.put_object(**put, ACL="public-read"),
            "x-amz-grant-read": lambda: c.put_object(**put, GrantRead=all_users),
            "x-amz-grant-full-control": lambda: c.put_object(**put, GrantFullControl=all_users),
            "x-amz-tagging": lambda: c.put_object(**put, Tagging="team=other"),
            "legal hold": lambda: c.put_object(**put, ObjectLockLegalHoldStatus="ON"),
            "retention": lambda: c.put_object(**put, ObjectLockMode="COMPLIANCE",
                                              ObjectLockRetainUntilDate=until),
            "multipart": lambda: c.create_multipart_upload(Bucket="ref-a", Key="rw/pub",
                                                           ACL="public-read"),
            "copy": lambda: c.copy_object(Bucket="ref-a", Key="rw/pub", CopySource="ref-a/rw/acl",
                                          ACL="public-read-write"),
            "PUT ?acl": lambda: c.put_object_acl(Bucket="ref-a", Key="rw/acl", ACL="public-read"),
            "PUT ?tagging": lambda: c.put_object_tagging(
                Bucket="ref-a", Key="rw/acl", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]}),
            "DELETE ?tagging": lambda: c.delete_object_tagging(Bucket="ref-a", Key="rw/acl"),
            "PUT ?legal-hold": lambda: c.put_object_legal_hold(Bucket="ref-a", Key="rw/acl",
                                                              LegalHold={"Status": "ON"}),
            "PUT ?retention": lambda: c.put_object_retention(
                Bucket="ref-a", Key="rw/acl",
                Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until}),
            "bypass on delete": lambda: c.delete_object(Bucket="ref-a", Key="rw/acl",
                                                        BypassGovernanceRetention=True),
            "bypass on DeleteObjects": lambda: c.delete_objects(
                Bucket="ref-a", Delete={"Objects": [{"Key": "rw/acl"}]},
                BypassGovernanceRetention=True),
        }
        for name, fn in cases.items():
            with self.subTest(name):
                resp = self.refused(fn, 403, "AccessDenied")
                if name == "x-amz-acl":
                    self.assertIn("whole bucket", resp["Error"]["Message"])
        # The same in a presigned URL's query, as SDK presigners put them.
        from botocore.auth import S3SigV4QueryAuth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        for query in ("x-amz-acl=public-read", "x-amz-grant-read=" + all_users.replace('"', "%22"),
                      "x-amz-tagging=team%3Dother"):
            with self.subTest(query):
                req = AWSRequest(method="PUT", url=self.larder.url + "/ref-a/rw/pub?" + query)
                S3SigV4QueryAuth(Credentials(RWP_KEY, RWP_SECRET), "s3", harness.REGION,
                                 expires=300).add_auth(req)
                path = req.url[len(self.larder.url):]
                self.raw_refused("PUT", path, {"Content-Length": "1"}, 403, "AccessDenied",
                                 body=b"x")
        with self.assertRaises(Exception):
            self.direct.head_object(Bucket="ref-a", Key="rw/pub")
        grants = self.direct.get_object_acl(Bucket="ref-a", Key="rw/acl")["Grants"]
        self.assertNotIn("AllUsers", str(grants))
        self.assertEqual(self.direct.get_object_tagging(Bucket="ref-a", Key="rw/acl")["TagSet"],
                         [])
        # The canned ACLs that grant nothing past an object's default still
        # go through (some clients send one on every upload).
        for acl in ("private", "bucket-owner-full-control"):
            with self.subTest(acl):
                c.put_object(Bucket="ref-a", Key="rw/canned", Body=acl.encode(), ACL=acl)
                self.assertEqual(self.direct.get_object(Bucket="ref-a",
                                                        Key="rw/canned")["Body"].read(),
                                 acl.encode())
        # A whole-bucket grant governs its bucket.
        b = self.larder.client(key=BKA_KEY, secret=BKA_SECRET)
        b.put_object(Bucket="ref-a", Key="rw/pub", Body=b"x", ACL="public-read", Tagging="t=1")
        b.put_object_acl(Bucket="ref-a", Key="rw/acl", ACL="public-read")
        self.assertIn("AllUsers", str(self.direct.get_object_acl(Bucket="ref-a",
                                                                 Key="rw/acl")["Grants"]))
        self.assertEqual(self.direct.get_object_tagging(Bucket="ref-a", Key="rw/pub")["TagSet"],
                         [{"Key": "t", "Value": "1"}])

    def test_a_prefix_grant_uploads_with_the_cli_and_boto3(self):
        # What the usual writers send on their own (checksums, content
        # types, multipart) is a plain write under the prefix.
        import os
        import tempfile
        body = os.urandom(9 * 1024 * 1024)  # past the CLI's 8 MiB multipart threshold
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "ckpt.bin")
            with open(src, "wb") as f:
                f.write(body)
            out = self.larder.aws("s3", "cp", src, "s3://ref-a/rw/cli/ckpt.bin", key=RWP_KEY,
                                  secret=RWP_SECRET)
            self.assertEqual(out.returncode, 0, out.stderr)
            out = self.larder.aws("s3", "sync", d, "s3://ref-a/rw/sync/", key=RWP_KEY,
                                  secret=RWP_SECRET)
            self.assertEqual(out.returncode, 0, out.stderr)
            c = self.larder.client(key=RWP_KEY, secret=RWP_SECRET)
            c.upload_file(src, "ref-a", "rw/boto3/ckpt.bin")
        for k in ("rw/cli/ckpt.bin", "rw/sync/ckpt.bin", "rw/boto3/ckpt.bin"):
            with self.subTest(k):
                self.assertEqual(self.direct.get_object(Bucket="ref-a", Key=k)["Body"].read(),
                                 body)

    def test_a_prefix_grant_does_not_remove_versions_for_good(self):
        # In a versioned bucket a DELETE adds a delete marker and the versions
        # stay, to be read back. Removing a version for good is
        # s3:DeleteObjectVersion at S3, besides s3:DeleteObject: only a
        # whole-bucket grant may, one object or many.
        self.direct.create_bucket(Bucket="ref-v")
        self.direct.put_bucket_versioning(Bucket="ref-v",
                                          VersioningConfiguration={"Status": "Enabled"})
        v1 = self.direct.put_object(Bucket="ref-v", Key="rw/ckpt", Body=b"one")["VersionId"]
        v2 = self.direct.put_object(Bucket="ref-v", Key="rw/ckpt", Body=b"two")["VersionId"]
        c = self.larder.client(key=RWP_KEY, secret=RWP_SECRET)
        resp = self.refused(lambda: c.delete_object(Bucket="ref-v", Key="rw/ckpt", VersionId=v1),
                            403, "AccessDenied")
        self.assertIn("removing a version", resp["Error"]["Message"])
        self.refused(lambda: c.delete_objects(Bucket="ref-v", Delete={"Objects": [
            {"Key": "rw/ckpt"}, {"Key": "rw/ckpt", "VersionId": v1}]}), 403, "AccessDenied")

        def versions():
            got = self.direct.list_object_versions(Bucket="ref-v", Prefix="rw/")
            return sorted(v["VersionId"] for v in got.get("Versions", []))

        self.assertEqual(versions(), sorted([v1, v2]))
        # Plain deletes add markers; the versions stay.
        c.delete_object(Bucket="ref-v", Key="rw/ckpt")
        c.delete_objects(Bucket="ref-v", Delete={"Objects": [{"Key": "rw/ckpt"}]})
        self.assertEqual(versions(), sorted([v1, v2]))
        # A whole-bucket grant removes them.
        b = self.larder.client(key=BKA_KEY, secret=BKA_SECRET)
        b.delete_object(Bucket="ref-v", Key="rw/ckpt", VersionId=v1)
        b.delete_objects(Bucket="ref-v", Delete={"Objects": [{"Key": "rw/ckpt", "VersionId": v2}]})
        self.assertEqual(versions(), [])

    def test_a_prefix_grant_reads_only_the_current_version(self):
        # A prefix grant reads an object as s3:GetObject there would. Its
        # earlier versions (bytes overwritten or deleted, perhaps on purpose),
        # and its ACL, tags and lock, are other permissions at S3
        # (s3:GetObjectVersion, s3:GetObjectAcl, s3:GetObjectTagging,
        # s3:ListBucketVersions ...), which larder would exercise with its own
        # credentials: only a whole-bucket grant may.
        self.direct.create_bucket(Bucket="ref-h")
        self.direct.put_bucket_versioning(Bucket="ref-h",
                                          VersioningConfiguration={"Status": "Enabled"})
        old = self.direct.put_object(Bucket="ref-h", Key="data/doc", Body=b"removed on purpose",
                                     Tagging="pii=yes")["VersionId"]
        self.direct.put_object(Bucket="ref-h", Key="data/doc", Body=b"cleaned")
        pfx = self.larder.client(key=PFX_KEY, secret=PFX_SECRET)
        rw = self.larder.client(key=RWP_KEY, secret=RWP_SECRET)
        doc = dict(Bucket="ref-h", Key="data/doc")
        cases = {
            "GET ?versionId": lambda: pfx.get_object(**doc, VersionId=old),
            "GET ?versionId, read-write": lambda: rw.get_object(**doc, VersionId=old),
            "GET ?acl": lambda: pfx.get_object_acl(**doc),
            "GET ?tagging": lambda: pfx.get_object_tagging(**doc),
            "GET ?retention": lambda: pfx.get_object_retention(**doc),
            "GET ?legal-hold": lambda: pfx.get_object_legal_hold(**doc),
            "ListObjectVersions": lambda: pfx.list_object_versions(Bucket="ref-h", Prefix="data/"),
            "copy of a version": lambda: rw.copy_object(
                Bucket="ref-h", Key="data/copy",
                CopySource={"Bucket": "ref-h", "Key": "data/doc", "VersionId": old}),
        }
        for name, fn in cases.items():
            with self.subTest(name):
                resp = self.refused(fn, 403, "AccessDenied")
                self.assertIn("needs a grant of the whole bucket", resp["Error"]["Message"])
        with self.subTest("HEAD ?versionId"):
            self.refused(lambda: pfx.head_object(**doc, VersionId=old), 403, "403")
        with self.subTest("presigned GET ?versionId"):
            url = pfx.generate_presigned_url("get_object", Params=dict(doc, VersionId=old))
            self.raw_refused("GET", url[len(self.larder.url):], {}, 403, "AccessDenied")
        # The current version, its listing and a copy of it stay the grant's.
        self.assertEqual(pfx.get_object(**doc)["Body"].read(), b"cleaned")
        self.assertEqual(pfx.head_object(**doc)["ContentLength"], len(b"cleaned"))
        listed = pfx.list_objects_v2(Bucket="ref-h", Prefix="data/")
        self.assertEqual([o["Key"] for o in listed["Contents"]], ["data/doc"])
        rw.copy_object(Bucket="ref-h", Key="data/copy", CopySource="ref-h/data/doc")
        self.assertEqual(self.direct.get_object(Bucket="ref-h", Key="data/copy")["Body"].read(),
                         b"cleaned")
        # A whole-bucket grant reads them all.
        whole = self.larder.client(key=RO_KEY, secret=RO_SECRET)
        self.assertEqual(whole.get_object(**doc, VersionId=old)["Body"].read(),
                         b"removed on purpose")
        self.assertEqual(whole.get_object_tagging(**doc, VersionId=old)["TagSet"],
                         [{"Key": "pii", "Value": "yes"}])
        self.assertEqual(len(whole.list_object_versions(Bucket="ref-h", Prefix="data/doc")
                             ["Versions"]), 2)
        self.assertTrue(whole.get_object_acl(**doc)["Grants"])

    def test_bucket_grant(self):
        c = self.larder.client(key=BKA_KEY, secret=BKA_SECRET)
        c.put_object(Bucket="ref-a", Key="bucket-a-write", Body=b"ok")
        self.assertEqual(c.get_object(Bucket="ref-a", Key="bucket-a-write")["Body"].read(), b"ok")
        self.refused(lambda: c.get_object(Bucket="ref-b", Key="plain"), 403, "AccessDenied")
        self.refused(lambda: c.put_object(Bucket="ref-b", Key="x", Body=b"x"), 403, "AccessDenied")
        self.refused(lambda: c.list_objects_v2(Bucket="ref-b"), 403, "AccessDenied")
        # copying from a bucket the key may not read is refused too
        self.refused(lambda: c.copy_object(Bucket="ref-a", Key="stolen", CopySource="ref-b/plain"),
                     403, "AccessDenied")


if __name__ == "__main__":
    unittest.main()
