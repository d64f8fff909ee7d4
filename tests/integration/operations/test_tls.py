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


def signed_cert(where, name, names, issuer=None, days=(-1, 2), ca=False):
    """A certificate (EC key) for names (IP addresses or DNS names), valid from
    days[0] to days[1] from now, signed by issuer ((cert, key) paths) or by
    itself; returns its (cert, key) paths."""
    import datetime
    import ipaddress
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, name)])
    sign_key, issuer_name = key, subject
    if issuer:
        with open(issuer[0], "rb") as f:
            issuer_name = x509.load_pem_x509_certificate(f.read()).subject
        with open(issuer[1], "rb") as f:
            sign_key = serialization.load_pem_private_key(f.read(), None)
    alt = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now + datetime.timedelta(days=days[0]))
               .not_valid_after(now + datetime.timedelta(days=days[1]))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(sign_key, hashes.SHA256())
    paths = os.path.join(where, name + ".pem"), os.path.join(where, name + "-key.pem")
    with open(paths[0], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths[1], "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return paths


STS_ANSWER = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIATLSTEST</AccessKeyId>
<SecretAccessKey>tls-test-secret</SecretAccessKey><SessionToken>tls-test-token</SessionToken>
<Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"""


class TlsOrigin:
    """An https origin on loopback that answers every GET with BODY (ranges
    too) and counts the requests that reached it."""
    BODY = b"bytes only a verified upstream may hand out"

    def __init__(self, cert, key, old_tls=False):
        import http.server
        import ssl
        import threading
        origin = self
        self.requests = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):  # STS: AssumeRoleWithWebIdentity
                origin.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = STS_ANSWER.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                origin.requests += 1
                body, first = origin.BODY, 0
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes="):
                    lo, _, hi = rng[6:].partition("-")
                    first = int(lo)
                    last = min(int(hi) if hi else len(body) - 1, len(body) - 1)
                    self.send_response(206)
                    self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, len(body)))
                    body = body[first:last + 1]
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", '"e1"')
                self.send_header("Last-Modified", "Mon, 30 Nov 2026 10:00:00 GMT")
                self.end_headers()
                self.wfile.write(body)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        if old_tls:  # TLS 1.0 and 1.1 only, which OpenSSL's defaults here refuse too
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
                ctx.minimum_version = ssl.TLSVersion.TLSv1
                ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        class Server(http.server.ThreadingHTTPServer):
            def get_request(self):  # accept() runs the handshake: count it, good or bad
                origin.connections += 1
                return super().get_request()

        self.connections = 0
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = "https://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Tls(LarderCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="larder-tls-")
        cls.cert, key = make_cert(cls.tmp)
        cls.LARDER_ENV = {"LARDER_TLS_CERT": cls.cert, "LARDER_TLS_KEY": key}
        super().setUpClass()
        cls.https = cls.larder.url.replace("http://", "https://")

    @classmethod
    def tearDownClass(cls):
        import shutil
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

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

    def test_query_of_too_many_parameters_is_closed_at_once(self):
        # Over TLS larder cannot write its refusal past libmicrohttpd
        # (test_operations ..._is_answered_at_once has the plain answer): the
        # connection is closed at once, where the client waited for
        # LARDER_CLIENT_TIMEOUT.
        import socket
        import ssl
        import time
        ctx = ssl.create_default_context(cafile=self.cert)
        for n, closed in ((100, False), (600, True)):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", self.larder.port), 10),
                                server_hostname="127.0.0.1")
            try:
                s.sendall(b"GET /b/k?" + b"&".join(b"p%d" % i for i in range(n)) +
                          b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                t0 = time.monotonic()
                try:
                    got = s.recv(100)
                except (socket.timeout, OSError) as e:
                    got = e
                self.assertLess(time.monotonic() - t0, 5, got)
                if closed:  # end of stream or a reset, no answer
                    self.assertFalse(isinstance(got, bytes) and got, got)
                else:
                    self.assertTrue(got.startswith(b"HTTP/1.1 4"), got)
            finally:
                s.close()

    def test_half_configured_tls_stops_the_start(self):
        out = subprocess.run([harness.larder_binary(), "serve", "--check"],
                             env={"PATH": os.environ["PATH"], "LARDER_TLS_CERT": self.cert},
                             capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn(b"LARDER_TLS_KEY", out.stderr)



    def check(self, **env):
        return subprocess.run([harness.larder_binary(), "serve", "--check"],
                              env=dict({"PATH": os.environ["PATH"]}, **env),
                              capture_output=True, timeout=30)

    def test_a_key_that_cannot_serve_the_certificate_stops_the_start(self):
        # --check said "configuration ok" and the start failed with "cannot listen on ...: No
        # such file or directory", naming neither file (GnuTLS's reason at info only).
        other_cert, other_key = make_cert(tempfile.mkdtemp(dir=self.tmp))
        locked = os.path.join(self.tmp, "locked.pem")
        subprocess.run(["openssl", "pkey", "-in", other_key, "-aes256", "-passout", "pass:pw",
                        "-out", locked], check=True, capture_output=True)
        key = self.LARDER_ENV["LARDER_TLS_KEY"]
        for cert_file, key_file, says in ((self.cert, other_key, b"is not the key of"),
                                          (key, self.cert, b"holds no certificate"),
                                          (self.cert, locked, b"passphrase")):
            with self.subTest(key=key_file, says=says):
                out = self.check(LARDER_TLS_CERT=cert_file, LARDER_TLS_KEY=key_file)
                self.assertEqual(out.returncode, 2, out.stderr)
                self.assertIn(says, out.stderr)
        self.assert_start_refused(self.cert, other_key, b"LARDER_TLS_KEY")

    def assert_start_refused(self, cert, key, says):
        """serve (not --check) with this pair exits 2 and says so."""
        larder = harness.Larder(upstream=self.upstream, env={
            "LARDER_TLS_CERT": cert, "LARDER_TLS_KEY": key, "LARDER_LOG_LEVEL": "warn"})
        try:
            proc = subprocess.run([harness.larder_binary(), "serve"], env=larder.env,
                                  capture_output=True, timeout=30)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn(says, proc.stderr)
        finally:
            larder.cleanup()

    def test_a_pair_only_openssl_reads_stops_the_start_as_a_setting(self):
        # A secp256k1 key: OpenSSL (the pair check) reads it, GnuTLS (the port) does not.
        # --check said "configuration ok" and the start exited 1 with "cannot listen", the
        # reason logged at info only.
        where = tempfile.mkdtemp(dir=self.tmp)
        cert, key = os.path.join(where, "k1.pem"), os.path.join(where, "k1-key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:secp256k1", "-nodes", "-days", "2", "-subj", "/CN=k1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        out = self.check(LARDER_TLS_CERT=cert, LARDER_TLS_KEY=key)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn(b"LARDER_TLS_CERT", out.stderr)
        self.assertIn(b"GnuTLS", out.stderr)
        self.assert_start_refused(cert, key, b"GnuTLS")

    def test_a_ca_file_without_a_certificate_is_an_error(self):
        # curl took it, and every exchange with the upstream then failed.
        key = self.LARDER_ENV["LARDER_TLS_KEY"]
        out = self.check(LARDER_UPSTREAM_CA_FILE=key)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn(b"LARDER_UPSTREAM_CA_FILE", out.stderr)
        self.assertIn(b"holds no certificate", out.stderr)
        self.assertEqual(self.check(LARDER_UPSTREAM_CA_FILE=self.cert).returncode, 0)

    def test_upstream_verification_turned_off_is_a_warning(self):
        # It was silent: nothing at start or in --check said that larder
        # would take any certificate from an https upstream.
        for url in ("https://s3.example.test", None):
            with self.subTest(url=url):
                env = {"LARDER_UPSTREAM_TLS_VERIFY": "false"}
                if url:
                    env["LARDER_UPSTREAM_URL"] = url
                out = self.check(**env)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertIn(b"LARDER_UPSTREAM_TLS_VERIFY", out.stderr)
                self.assertIn(b"not verified", out.stderr)
        out = self.check(LARDER_UPSTREAM_TLS_VERIFY="false",
                         LARDER_UPSTREAM_URL="http://127.0.0.1:9")
        self.assertNotIn(b"LARDER_UPSTREAM_TLS_VERIFY", out.stderr, "no TLS to verify")
        self.assertNotIn(b"LARDER_UPSTREAM_TLS_VERIFY", self.check().stderr)

    def test_an_upstream_certificate_that_does_not_verify_is_refused(self):
        # Nothing tested that larder checks the upstream's certificate at all.
        where = tempfile.mkdtemp(dir=self.tmp)
        ca = signed_cert(where, "ca", [], ca=True)
        other_ca = signed_cert(where, "other-ca", [], ca=True)
        here = ["127.0.0.1", "localhost"]
        cases = (("good", dict(names=here, issuer=ca), 200, ""),
                 ("self", dict(names=here), 503, "self-signed"),
                 ("othername", dict(names=["s3.example.test"], issuer=ca), 503, "name"),
                 ("expired", dict(names=here, issuer=ca, days=(-9, -1)), 503, "expired"),
                 ("untrusted", dict(names=here, issuer=other_ca), 503, "issuer"))
        for name, how, status, why in cases:
            with self.subTest(cert=name):
                origin = TlsOrigin(*signed_cert(where, name, **how))
                larder = harness.Larder(env={
                    "LARDER_UPSTREAM_URL": origin.url, "LARDER_UPSTREAM_CA_FILE": ca[0],
                    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
                    "LARDER_UPSTREAM_RETRIES": "1", "LARDER_LOG_LEVEL": "warn"})
                try:
                    larder.start()
                    r = harness.signed_request(larder.url, "GET", "/tls-bucket/obj")
                    self.assertEqual(r.status, status, r)
                    if status == 200:
                        self.assertEqual(r.body, TlsOrigin.BODY)
                        continue
                    self.assertNotIn(TlsOrigin.BODY[:10], r.body)
                    self.assertEqual(origin.requests, 0, "a request went to the origin")
                    # A certificate that failed fails again: not retried (it was, with
                    # LARDER_UPSTREAM_RETRIES' backoff, before the client heard).
                    self.assertEqual(origin.connections, 1)
                    lines = [line for line in larder.log().splitlines()
                             if "could not learn it upstream" in line]
                    self.assertTrue(lines, larder.log()[-2000:])
                    self.assertIn(why, lines[0])
                finally:
                    self.assertEqual(larder.stop(), 0)
                    larder.cleanup()
                    origin.close()

    def test_a_certificate_renewed_in_place_is_not_taken_for_reloaded(self):
        # The files are read at start only, and a SIGHUP after a renewal (the
        # usual hook of a certificate tool) said "reloaded" and nothing else.
        import signal
        import shutil
        import time
        where = tempfile.mkdtemp(dir=self.tmp)
        cert, key = os.path.join(where, "cert.pem"), os.path.join(where, "key.pem")
        shutil.copy(self.cert, cert)
        shutil.copy(self.LARDER_ENV["LARDER_TLS_KEY"], key)
        larder = harness.Larder(upstream=self.upstream, env={"LARDER_TLS_CERT": cert,
                                                             "LARDER_TLS_KEY": key}).start()

        def reload():
            before = larder.log().count("reloaded:")
            larder.signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while larder.log().count("reloaded:") == before and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # what the reload did not apply is logged right after
            return larder.log()[larder.log().rfind("reloaded:"):]

        try:
            self.assertNotIn("LARDER_TLS_CERT", reload())
            renewed_cert, renewed_key = make_cert(tempfile.mkdtemp(dir=self.tmp))
            shutil.copy(renewed_cert, cert)
            shutil.copy(renewed_key, key)
            said = reload()
            self.assertIn("LARDER_TLS_CERT", said)
            self.assertIn("until a restart", said)
        finally:
            self.assertEqual(larder.stop(), 0)
            larder.cleanup()

    def test_an_upstream_below_tls_1_2_is_refused(self):
        # The floor was the system's OpenSSL configuration: one that allows
        # TLS 1.0 (OPENSSL_CONF here) let larder fetch over TLS 1.1, which no
        # S3 endpoint speaks, so only a downgrade would bring it about.
        where = tempfile.mkdtemp(dir=self.tmp)
        ca = signed_cert(where, "ca", [], ca=True)
        conf = os.path.join(where, "openssl.cnf")
        with open(conf, "w") as f:
            f.write("openssl_conf = conf\n[conf]\nssl_conf = ssl\n[ssl]\nsystem_default = tls\n"
                    "[tls]\nMinProtocol = TLSv1\nCipherString = DEFAULT:@SECLEVEL=0\n")
        origin = TlsOrigin(*signed_cert(where, "old", ["127.0.0.1"], issuer=ca), old_tls=True)
        larder = harness.Larder(env={
            "LARDER_UPSTREAM_URL": origin.url, "LARDER_UPSTREAM_CA_FILE": ca[0],
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret",
            "LARDER_UPSTREAM_RETRIES": "1", "LARDER_LOG_LEVEL": "warn", "OPENSSL_CONF": conf})
        try:
            larder.start()
            r = harness.signed_request(larder.url, "GET", "/tls-bucket/obj")
            self.assertEqual(r.status, 503, r)
            self.assertEqual(origin.requests, 0, "a request went to the origin over TLS 1.1")
        finally:
            self.assertEqual(larder.stop(), 0)
            larder.cleanup()
            origin.close()

    def test_an_sts_endpoint_behind_a_private_ca_takes_aws_ca_bundle(self):
        # LARDER_UPSTREAM_CA_FILE covers S3 only, and AWS_CA_BUNDLE (the SDKs' setting) was
        # not read: an STS endpoint (AWS_ENDPOINT_URL_STS) under a private CA could not be
        # reached unless its CA went into the system's store.
        where = tempfile.mkdtemp(dir=self.tmp)
        ca = signed_cert(where, "ca", [], ca=True)
        sts = TlsOrigin(*signed_cert(where, "sts", ["127.0.0.1"], issuer=ca))
        token = os.path.join(where, "token")
        with open(token, "w") as f:
            f.write("eyJhbGciOiJSUzI1NiJ9.tls-test.c2ln")
        larder = harness.Larder(env={
            "LARDER_UPSTREAM_URL": self.upstream.url, "AWS_ENDPOINT_URL_STS": sts.url,
            "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/tls-test",
            "AWS_WEB_IDENTITY_TOKEN_FILE": token, "AWS_CA_BUNDLE": ca[0],
            "AWS_EC2_METADATA_DISABLED": "true", "LARDER_LOG_LEVEL": "info"})
        try:
            larder.start()
            self.assertEqual(sts.requests, 1, larder.log()[-2000:])
            self.assertNotIn("certificate", larder.log())
            self.assertEqual(larder.stop(), 0)
        finally:
            if larder.proc and larder.alive():
                larder.stop()
            larder.cleanup()
            sts.close()

    def test_an_upstream_that_cannot_be_reached_is_logged_with_why(self):
        # A cold read answered 503 with only "upstream 0, retry N" lines at info: no reason.
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
        s.close()
        larder = harness.Larder(upstream=self.upstream, env={
            "LARDER_UPSTREAM_URL": "http://127.0.0.1:%d" % closed, "LARDER_LOG_LEVEL": "warn",
            "LARDER_UPSTREAM_RETRIES": "1"}).start()
        try:
            r = harness.signed_request(larder.url, "GET", "/some-bucket/cold")
            self.assertEqual(r.status, 503, r)
            lines = [line for line in larder.log().splitlines()
                     if "could not learn it upstream" in line]
            self.assertTrue(lines, larder.log()[-2000:])
            self.assertIn("onnect", lines[0])  # curl's "Couldn't connect", "Connection refused"
        finally:
            self.assertEqual(larder.stop(), 0)
            larder.cleanup()

    def test_an_expired_certificate_is_a_warning(self):
        # openssl req here cannot backdate a certificate (-not_before came in OpenSSL 3.4).
        import datetime
        ended = datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=3)
        expired, expired_key = signed_cert(tempfile.mkdtemp(dir=self.tmp), "old", [],
                                           days=(-30, -3))
        out = self.check(LARDER_TLS_CERT=expired, LARDER_TLS_KEY=expired_key)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"expired on " + ended.isoformat().encode(), out.stderr)

    def test_only_tls_1_2_and_up_with_forward_secrecy(self):
        # GnuTLS's defaults took TLS 1.0 and 1.1, and RSA key exchange; S3 takes neither.
        port = self.larder.port
        for args, ok in ((["-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0"], False),
                         (["-tls1_2", "-cipher", "AES128-SHA:@SECLEVEL=0"], False),
                         (["-tls1_2"], True), (["-tls1_3"], True)):
            with self.subTest(args=args):
                out = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                                      "-brief"] + args, input=b"", capture_output=True,
                                     timeout=30)
                text = out.stdout + out.stderr
                self.assertEqual(b"Protocol version" in text, ok, text[-2000:])

    def test_a_connection_closed_before_its_handshake_logs_nothing(self):
        # Each TCP check of the port (a load balancer's, every few seconds) logged
        # "Error: received handshake message out of context." at info.
        import socket
        import time
        before = self.larder.log()
        for _ in range(5):
            socket.create_connection(("127.0.0.1", self.larder.port), 5).close()
        time.sleep(0.5)
        self.assertNotIn("handshake", self.larder.log()[len(before):])


if __name__ == "__main__":
    unittest.main()
