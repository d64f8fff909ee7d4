"""Credentials chain against a real STS implementation (moto's server).

Starts `python3 -m moto.server` on a free loopback port and runs the
creds_probe driver (tests/unit/auth/creds_probe.c) with a web identity
environment pointed at it: AssumeRoleWithWebIdentity is unsigned, so moto
answers it without any setup. The probe prints only the source, the key id
and the expiry; nothing secret crosses this test's output.

The build directory is $LARDER_BUILD_DIR (default "build", relative to the
repository root). The test skips when the probe is not built or moto is not
installed.

    python3 tests/integration/run.py test_creds_sts_moto
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

import harness

REPO = Path(__file__).resolve().parents[3]
ROLE_ARN = "arn:aws:iam::123456789012:role/larder-it"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.larder-integration-test-token.c2ln"


def build_dir():
    d = Path(os.environ.get("LARDER_BUILD_DIR", "build"))
    return d if d.is_absolute() else REPO / d


def probe_path():
    return build_dir() / "tests" / "unit" / "auth" / "creds_probe"


def wait_http(url, proc, timeout):
    """Until url answers anything over HTTP (an error status counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            time.sleep(0.1)
    return False


class CredsStsMoto(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.probe = probe_path()
        if not (cls.probe.is_file() and os.access(cls.probe, os.X_OK)):
            raise unittest.SkipTest(
                f"creds_probe is not built at {cls.probe} "
                "(run ninja in the build dir, or set LARDER_BUILD_DIR)")
        if importlib.util.find_spec("moto") is None:
            raise unittest.SkipTest("moto is not installed for this python3")

        cls.tmp = tempfile.TemporaryDirectory(prefix="larder-creds-it-")
        cls.port = harness.free_port()
        cls.log = open(Path(cls.tmp.name) / "moto.log", "w+b")
        cls.moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(cls.port)],
            stdout=cls.log, stderr=subprocess.STDOUT)
        if not wait_http(f"http://127.0.0.1:{cls.port}/moto-api/", cls.moto, 30):
            cls._stop_moto()
            cls.log.seek(0)
            tail = cls.log.read()[-2000:].decode(errors="replace")
            cls.log.close()
            cls.tmp.cleanup()
            raise RuntimeError(f"moto.server did not come up on port {cls.port}:\n{tail}")

        cls.token_file = Path(cls.tmp.name) / "web-identity-token"
        cls.token_file.write_text(TOKEN + "\n")
        cls.home = Path(cls.tmp.name) / "home"
        cls.home.mkdir()

    @classmethod
    def _stop_moto(cls):
        cls.moto.terminate()
        try:
            cls.moto.wait(timeout=10)
        except subprocess.TimeoutExpired:
            cls.moto.kill()
            cls.moto.wait()

    @classmethod
    def tearDownClass(cls):
        cls._stop_moto()
        cls.log.close()
        cls.tmp.cleanup()

    def env(self, **extra):
        # Nothing from the caller's AWS setup (or ~/.aws) may leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "HOME"}
        env.update(HOME=str(self.home), AWS_EC2_METADATA_DISABLED="true")
        env.update(extra)
        return env

    def web_identity_env(self, **extra):
        return self.env(AWS_WEB_IDENTITY_TOKEN_FILE=str(self.token_file),
                        AWS_ROLE_ARN=ROLE_ARN,
                        AWS_ROLE_SESSION_NAME="larder-it",
                        **extra)

    def run_probe(self, env, expect_ok=True):
        r = subprocess.run([str(self.probe)], env=env, capture_output=True, text=True, timeout=60)
        self.assertNotIn(TOKEN, r.stdout + r.stderr)
        if expect_ok:
            self.assertEqual(r.returncode, 0, f"creds_probe failed: {r.stderr.strip()}")
            fields = dict(kv.split("=", 1) for kv in r.stdout.split())
            self.assertEqual(set(fields), {"source", "access_key", "expiration"})
            return fields, r
        self.assertNotEqual(r.returncode, 0)
        return None, r

    def test_web_identity_via_moto(self):
        before = int(time.time())
        f, _ = self.run_probe(self.web_identity_env(
            AWS_ENDPOINT_URL_STS=f"http://127.0.0.1:{self.port}"))
        self.assertEqual(f["source"], "web-identity")
        self.assertRegex(f["access_key"], r"^[A-Z0-9]{16,128}$")
        exp = int(f["expiration"])
        # moto's default duration is an hour; allow for clock rounding.
        self.assertGreater(exp, before + 60)
        self.assertLess(exp, before + 2 * 86400)

    def test_legacy_endpoint_variable(self):
        f, _ = self.run_probe(self.web_identity_env(
            AWS_STS_ENDPOINT_URL=f"http://127.0.0.1:{self.port}/"))
        self.assertEqual(f["source"], "web-identity")

    def test_each_call_gets_new_credentials(self):
        env = self.web_identity_env(AWS_ENDPOINT_URL_STS=f"http://127.0.0.1:{self.port}")
        a, _ = self.run_probe(env)
        b, _ = self.run_probe(env)
        self.assertNotEqual(a["access_key"], b["access_key"])

    def test_env_keys_win_over_web_identity(self):
        f, _ = self.run_probe(self.web_identity_env(
            AWS_ENDPOINT_URL_STS=f"http://127.0.0.1:{self.port}",
            AWS_ACCESS_KEY_ID="AKIAEXAMPLEENVKEY01",
            AWS_SECRET_ACCESS_KEY="not-a-real-secret"))
        self.assertEqual(f, {"source": "env", "access_key": "AKIAEXAMPLEENVKEY01", "expiration": "0"})

    def test_unreachable_sts_is_an_error(self):
        _, r = self.run_probe(self.web_identity_env(
            AWS_ENDPOINT_URL_STS=f"http://127.0.0.1:{harness.free_port()}"), expect_ok=False)
        self.assertIn("web-identity", r.stderr)

    def test_nothing_configured(self):
        _, r = self.run_probe(self.env(), expect_ok=False)
        self.assertIn("no AWS credentials found", r.stderr)


if __name__ == "__main__":
    unittest.main()
