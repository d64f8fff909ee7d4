"""Presigned URLs as boto3 and the AWS CLI make them with their default settings.

Against a custom endpoint both still presign with SigV2
(?AWSAccessKeyId=...&Signature=...&Expires=...); a training script that hands
such a URL to a data loader must work through larder unchanged.
"""
import subprocess
import time
import urllib.parse

import boto3
from botocore.config import Config

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, LarderCase, s3_error

BODY = b"presigned v2 \x00\xff" * 100


def curl(url):
    """(status, body) of a plain GET with curl, as a user would fetch it."""
    out = subprocess.run(["curl", "-s", "-g", "-o", "-", "-w", "\n%{http_code}", url],
                         capture_output=True, timeout=60)
    body, _, status = out.stdout.rpartition(b"\n")
    return int(status), body


class PresignV2(LarderCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3.create_bucket(Bucket="presign")
        cls.key = "dir/obj ü+~%.bin"
        cls.s3.put_object(Bucket="presign", Key=cls.key, Body=BODY)
        # boto3 exactly as a user gets it: no signature_version, no addressing style.
        cls.default = boto3.session.Session().client(
            "s3", endpoint_url=cls.larder.url, region_name="us-east-1",
            aws_access_key_id=CLIENT_KEY, aws_secret_access_key=CLIENT_SECRET,
            config=Config(retries={"max_attempts": 1}))

    def url(self, **params):
        p = {"Bucket": "presign", "Key": self.key}
        p.update(params)
        return self.default.generate_presigned_url("get_object", Params=p, ExpiresIn=300)

    def test_boto3_default_presign_is_v2_and_works(self):
        self.s3.put_object(Bucket="presign", Key="fresh/v2", Body=BODY)
        url = self.url(Key="fresh/v2")
        self.assertIn("AWSAccessKeyId=", url, "boto3 no longer presigns with SigV2 here")
        mark = self.upstream.mark()
        self.assertEqual(curl(url), (200, BODY))
        sent = self.upstream.from_larder(mark)
        self.assertEqual(len(sent), 1, "one cache fill of a cold object")
        self.assertNotIn("Signature=", sent[0]["target"], "presign parameters went upstream")
        mark = self.upstream.mark()
        self.assertEqual(curl(url), (200, BODY))
        self.assertEqual(self.upstream.from_larder(mark), [], "a second read is a hit")

    def test_response_override(self):
        url = self.url(ResponseContentDisposition='attachment; filename="x y.bin"')
        st, body = curl(url)
        self.assertEqual((st, body), (200, BODY))

    def test_aws_cli_presign(self):
        out = self.larder.aws("s3", "presign", "s3://presign/" + self.key, "--expires-in", "120")
        self.assertEqual(out.returncode, 0, out.stderr)
        url = out.stdout.decode().strip()
        self.assertEqual(curl(url), (200, BODY))

    def test_tampered_and_expired_refused(self):
        url = self.url()
        parts = urllib.parse.urlsplit(url)
        q = urllib.parse.parse_qs(parts.query)
        other = url.replace(urllib.parse.quote(self.key.split("/")[1]), "other")
        st, body = curl(other)
        self.assertEqual((st, s3_error(body)[0]), (403, "SignatureDoesNotMatch"), body)
        later = url.replace("Expires=%s" % q["Expires"][0],
                            "Expires=%d" % (int(q["Expires"][0]) + 60))
        st, body = curl(later)
        self.assertEqual((st, s3_error(body)[0]), (403, "SignatureDoesNotMatch"), body)
        short = self.default.generate_presigned_url(
            "get_object", Params={"Bucket": "presign", "Key": self.key}, ExpiresIn=1)
        time.sleep(2.2)
        st, body = curl(short)
        self.assertEqual((st, s3_error(body)[0]), (403, "AccessDenied"), body)

    def test_v2_header_signed_requests(self):
        """An old client that signs headers with SigV2 (signature_version='s3')."""
        old = boto3.session.Session().client(
            "s3", endpoint_url=self.larder.url, region_name="us-east-1",
            aws_access_key_id=CLIENT_KEY, aws_secret_access_key=CLIENT_SECRET,
            config=Config(signature_version="s3", retries={"max_attempts": 1},
                          s3={"addressing_style": "path"}))
        old.put_object(Bucket="presign", Key="v2/put me", Body=b"v2 body",
                       Metadata={"k": "v"})
        got = old.get_object(Bucket="presign", Key="v2/put me")
        self.assertEqual(got["Body"].read(), b"v2 body")
        self.assertEqual(got["Metadata"], {"k": "v"})
        bad = boto3.session.Session().client(
            "s3", endpoint_url=self.larder.url, region_name="us-east-1",
            aws_access_key_id=CLIENT_KEY, aws_secret_access_key="wrong",
            config=Config(signature_version="s3", retries={"max_attempts": 1},
                          s3={"addressing_style": "path"}))
        self.assertS3Error(lambda: bad.get_object(Bucket="presign", Key="v2/put me"),
                           403, "SignatureDoesNotMatch")


if __name__ == "__main__":
    import unittest
    unittest.main()
