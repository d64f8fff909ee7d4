"""TLS on the client port (LARDER_TLS_CERT / LARDER_TLS_KEY).

Some SDKs and s3fs set-ups insist on https, and boto3 sends aws-chunked
uploads with trailing checksums only over https: both are exercised with a
self-signed certificate that the clients are told to trust.
"""
import os
import subprocess
import tempfile
import unittest

import boto3
from botocore.config import Config

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, LarderCase


def make_cert(where):
    """A self-signed certificate for 127.0.0.1 and localhost."""
    cert, key = os.path.join(where, "cert.pem"), os.path.join(where, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=larder-test", "-keyout", key, "-out", cert,
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


class Tls(LarderCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="larder-tls-")
        cls.cert, key = make_cert(cls.tmp)
        cls.LARDER_ENV = {"LARDER_TLS_CERT": cls.cert, "LARDER_TLS_KEY": key}
        super().setUpClass()
        cls.https = cls.larder.url.replace("http://", "https://")

    def client(self, **kw):
        return boto3.session.Session().client(
            "s3", endpoint_url=self.https, region_name=harness.REGION,
            aws_access_key_id=CLIENT_KEY, aws_secret_access_key=CLIENT_SECRET,
            verify=self.cert, config=Config(s3={"addressing_style": "path"},
                                            retries={"total_max_attempts": 1}, **kw))

    def test_boto3_over_https(self):
        s3 = self.client()
        s3.create_bucket(Bucket="tls-bucket")
        data = os.urandom(3 * 1024 * 1024 + 11)
        # Over https current boto3 uploads with aws-chunked + a trailing CRC.
        s3.put_object(Bucket="tls-bucket", Key="a/obj", Body=data)
        self.assertEqual(s3.get_object(Bucket="tls-bucket", Key="a/obj")["Body"].read(), data)
        r = s3.get_object(Bucket="tls-bucket", Key="a/obj", Range="bytes=5-104")
        self.assertEqual(r["Body"].read(), data[5:105])
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="tls-bucket")["Contents"]]
        self.assertEqual(keys, ["a/obj"])
        self.assertEqual(self.direct.get_object(Bucket="tls-bucket", Key="a/obj")["Body"].read(),
                         data)

    def test_untrusted_certificate_is_refused_by_the_client(self):
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                              self.https + "/"], capture_output=True, timeout=30)
        self.assertNotEqual(out.returncode, 0, "curl accepted an untrusted certificate")
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                              "--cacert", self.cert, self.https + "/"],
                             capture_output=True, timeout=30)
        self.assertEqual(out.stdout, b"403", "an unsigned request over TLS: AccessDenied")

    def test_plain_http_is_not_served(self):
        st = None
        try:
            st, _, _ = harness.http_request(self.larder.url, "GET", "/")
        except Exception:
            pass
        self.assertIsNone(st, "the TLS port answered plain HTTP")

    def test_half_configured_tls_stops_the_start(self):
        out = subprocess.run([harness.larder_binary(), "serve", "--check"],
                             env={"PATH": os.environ["PATH"], "LARDER_TLS_CERT": self.cert},
                             capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn(b"LARDER_TLS_KEY", out.stderr)


if __name__ == "__main__":
    unittest.main()
