"""Test harness: a signature-enforcing moto upstream, the larder process, clients.

What the upstream enforces (found by reading moto 5.x's source: moto/core/
authorization.py, moto/iam/access_control.py, moto/s3/responses.py, and by
experiment; test_upstream_harness.py proves each point):

* Signature checking in moto is off until INITIAL_NO_AUTH_ACTION_COUNT requests
  have been served. Moto.start() leaves it off, creates an IAM user with an
  admin policy and an access key through moto's IAM API, then POSTs "0" to
  /moto-api/reset-auth: from then on every S3 request must carry an
  Authorization header whose SigV4 signature moto recomputes (with botocore's
  S3SigV4Auth) from the access key's secret. A wrong secret gets 403
  SignatureDoesNotMatch, an unknown key 403 InvalidAccessKeyId, an unsigned
  request 403 (AccessDenied for buckets, an empty 403 body for objects).
* What moto gets wrong or does not check:
  - Canonical URI. moto signs over werkzeug's request.url, i.e. the path
    percent-decoded and re-quoted with werkzeug's safe set and turned into an
    IRI. Keys containing '+', '%', any of !$&'()*,:;=@ or any non-ASCII
    character therefore get SignatureDoesNotMatch even when correctly signed
    (space, '~', '//', trailing '/' and long ASCII keys are fine).
    moto_upstream.py fixes this by giving moto's check the raw request-target
    (option --moto-canonical-uri=raw, the default); with the fix, wrong secrets
    on such keys are still rejected.
  - Payload hash. moto takes x-amz-content-sha256 from the header and never
    compares it with the body, so a body altered after signing passes.
  - Clock skew. moto never compares X-Amz-Date with its clock.
  - Presigned URLs. With auth on, a query-signed request (no Authorization
    header) crashes moto's check (KeyError -> 500 HTML); with auth off moto does
    not verify query signatures at all. So presigned URLs are tested only
    against larder (which re-signs them into header-signed upstream requests).
  - boto3's generate_presigned_url produces SigV2 query auth
    (AWSAccessKeyId=..&Signature=..) unless the client is configured with
    signature_version='s3v4'; the client factory here sets s3v4.
* Second opinion. For the checks moto skips, moto_upstream.py runs an
  independent verifier (sigv4check.py, stdlib only, written from the AWS spec)
  on every request as it arrived on the wire -- canonical URI, query, headers,
  clock skew -- and compares the body with x-amz-content-sha256 as it streams
  in. Its verdicts are in the upstream log; Upstream.assert_signed_correctly()
  makes a test fail when anything larder sent upstream was not byte-correct.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from urllib.parse import quote

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REGION = "us-east-1"

# Fixed client key used by most tests (larder's LARDER_CLIENT_KEY).
CLIENT_KEY = "LARDERTESTKEY0000001"
CLIENT_SECRET = "larder-test-secret-0000000000000000000001"
DIRECT_UA = "larder-test-direct"


def need_client(why, hint=""):
    """Skips the calling test (or class) when why names a missing client;
    under CI=true fails instead, since CI installs every client
    (scripts/deps.sh) and a skip there would hide that it did not."""
    if why:
        if os.environ.get("CI") == "true":
            raise AssertionError(why + hint)
        raise unittest.SkipTest(why + hint)


_ports_given = set()
_port_cursor = None


def _port_range():
    """LARDER_TEST_PORTS=LO-HI (run.py --jobs sets it per runner): ports are
    then taken from that range only, so runners side by side never hand out
    the same port. None: the kernel's choice (port 0)."""
    spec = os.environ.get("LARDER_TEST_PORTS")
    if not spec:
        return None
    lo, hi = (int(x) for x in spec.split("-"))
    return lo, hi


def free_port():
    """A port nothing listens on now, and one this process has not handed out
    before. A test picks the ports of all its processes before any of them
    binds, and the kernel may offer a port that is free only because its
    owner has not started yet: a cluster node once got another node's admin
    port, exited, and the test took the other node's answer for its own."""
    global _port_cursor
    rng = _port_range()
    for _ in range(1000):
        want = 0
        if rng:
            lo, hi = rng
            if _port_cursor is None:  # a runner's next module starts elsewhere in the range
                _port_cursor = lo + (os.getpid() * 7919) % (hi - lo)
            want = _port_cursor
            _port_cursor += 1
            if _port_cursor >= hi:  # round again: what was handed out then is long gone
                _port_cursor = lo
                _ports_given.clear()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", want))
            except OSError:
                continue  # in use, or still in TIME_WAIT from an earlier test
            port = s.getsockname()[1]
        if port not in _ports_given:
            _ports_given.add(port)
            return port
    raise RuntimeError("no port left that this test run has not handed out")


def wait_port(port, timeout, proc=None, host="127.0.0.1"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def accept_queue(port):
    """Connections to an IPv4 port of this host that no process has accepted yet: the sum of
    the accept queues of the sockets listening on it (Linux; /proc/net/tcp shows a listening
    socket's queue as its rx_queue). 0: the listener has taken every connection made so far
    (each a file descriptor of its own, or closed)."""
    total = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                total += int(fields[4].split(":")[1], 16)
    return total


def plain_larder_binary():
    """The build users run (jemalloc, no sanitizers): for memory figures."""
    build = os.environ.get("LARDER_BUILD_DIR") or "build"
    if not os.path.isabs(build):
        build = os.path.join(REPO, build)
    return os.path.join(build, "gateway", "larder")


class plain_binary:
    """with plain_binary(): larders started inside run the plain build (its
    memory figures mean something), whatever LARDER_BIN says outside."""

    def __enter__(self):
        self.saved = os.environ.get("LARDER_BIN")
        os.environ["LARDER_BIN"] = plain_larder_binary()

    def __exit__(self, *exc):
        if self.saved is None:
            del os.environ["LARDER_BIN"]
        else:
            os.environ["LARDER_BIN"] = self.saved
        return False


def larder_binary():
    if os.environ.get("LARDER_BIN"):
        return os.environ["LARDER_BIN"]
    build = os.environ.get("LARDER_ASAN_BUILD_DIR") or os.path.join(REPO, "build-asan")
    return os.path.join(build, "gateway", "larder")


def run_serve(args, env=None, upstream=True, timeout=30):
    """`larder serve ARGS` run to its end, in the test's environment less every
    AWS_* and LARDER_* variable, plus (upstream=True) stand-in upstream
    settings, plus env. Skips the test when the binary is not built."""
    binary = larder_binary()
    if not os.access(binary, os.X_OK):
        raise unittest.SkipTest("larder binary not built: " + binary)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LARDER_"))}
    if upstream:
        e.update({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
                  "LARDER_UPSTREAM_URL": "http://127.0.0.1:9"})
    e.update(env or {})
    return subprocess.run([binary, "serve"] + list(args), env=e, capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def build_preload(source, out_dir):
    """doubles/SOURCE (an LD_PRELOAD library, C) built into out_dir; returns
    its path. The test is skipped without a compiler (failed under CI, which
    has one). An ASan larder it is loaded into wants verify_asan_link_order=0
    in its ASAN_OPTIONS (its runtime is no longer first)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    need_client(None if cc else "no C compiler to build doubles/" + source)
    lib = os.path.join(out_dir, os.path.splitext(source)[0] + ".so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", lib, os.path.join(HERE, "doubles", source),
                    "-ldl"], check=True, capture_output=True, timeout=120)
    return lib


# ---------------------------------------------------------------- upstream


class Upstream:
    """moto behind moto_upstream.py, with signature enforcement on."""

    def __init__(self, moto_canonical_uri="raw"):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.dir = tempfile.mkdtemp(prefix="larder-moto-")
        self.log_path = os.path.join(self.dir, "requests.jsonl")
        self.out_path = os.path.join(self.dir, "moto.out")
        self.proc = None
        self.access_key = None
        self.secret_key = None
        self.mode = moto_canonical_uri
        self.base = 0

    def start(self):
        import boto3
        import requests
        out = open(self.out_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "doubles", "moto_upstream.py"), "-H", "127.0.0.1",
             "-p", str(self.port), "--log", self.log_path, "--moto-canonical-uri", self.mode],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()
        if not wait_port(self.port, 30, self.proc):
            self.stop()
            raise RuntimeError("moto did not start:\n" + self.output())
        iam = boto3.client("iam", endpoint_url=self.url, region_name=REGION,
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="larder-upstream")
        policy = iam.create_policy(PolicyName="larder-admin", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        iam.attach_user_policy(UserName="larder-upstream", PolicyArn=policy["Policy"]["Arn"])
        key = iam.create_access_key(UserName="larder-upstream")["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        r = requests.post(self.url + "/moto-api/reset-auth", data="0", timeout=10)
        if r.status_code != 200:
            raise RuntimeError("could not switch moto auth on: %s %s" % (r.status_code, r.text))
        self.base = self.mark()  # requests() leaves out the IAM set-up above
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def output(self):
        try:
            with open(self.out_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-8000:]
        except OSError:
            return ""

    def client(self, secret=None, **kw):
        """A boto3 S3 client signing straight to moto with the IAM key. Its
        User-Agent carries DIRECT_UA so the log tells its requests from larder's."""
        kw.setdefault("user_agent_extra", DIRECT_UA)
        return make_s3_client(self.url, self.access_key, secret or self.secret_key, **kw)

    # -- request log
    def _records(self):
        try:
            with open(self.log_path, encoding="utf-8") as f:
                lines = f.readlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written right now
        return out

    def requests(self, since=0):
        """Requests (start records, control calls excluded) with seq > since,
        each with its end record (status, bytes_in, body_sha_ok) merged in.
        A response can reach the client a moment before moto's end record is
        written: wait up to 2 s for the end records of what has started."""
        deadline = time.monotonic() + 2
        while True:
            recs = self._records()
            started = {r["seq"] for r in recs if r["ev"] == "start" and not r.get("control")
                       and r["seq"] > max(since, self.base)}
            ended = {r["seq"] for r in recs if r["ev"] == "end"}
            if started <= ended or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        ends = {r["seq"]: r for r in recs if r["ev"] == "end"}
        out = []
        for r in recs:
            if (r["ev"] == "start" and not r.get("control")
                    and r["seq"] > max(since, self.base)):
                merged = dict(r)
                e = ends.get(r["seq"])
                if e:
                    merged.update(status=e["status"], bytes_in=e["bytes_in"],
                                  bytes_out=e["bytes_out"], body_sha_ok=e["body_sha_ok"])
                out.append(merged)
        return out

    def mark(self):
        """The current sequence number: requests(since=mark()) are newer ones."""
        seqs = [r["seq"] for r in self._records()]
        return max(seqs) if seqs else 0

    def count(self, since=0):
        return len(self.requests(since))

    def from_larder(self, since=0):
        """Requests since `since` not sent by the tests' direct clients."""
        return [r for r in self.requests(since)
                if DIRECT_UA not in dict(r["headers"]).get("user-agent", "")]

    def assert_signed_correctly(self, testcase, since=0):
        """Every request larder sent since `since` was signed correctly per the
        independent verifier, with a byte-canonical path and a body matching its hash."""
        for r in self.from_larder(since):
            sig = r.get("sig") or {}
            where = "%s %s" % (r["method"], r["target"][:200])
            testcase.assertTrue(sig.get("ok"), "upstream request not correctly signed (%s): %s"
                                % (sig.get("reason", "no Authorization"), where))
            testcase.assertEqual(sig.get("access_key"), self.access_key, where)
            testcase.assertTrue(r["path_canonical"], "path not canonically encoded: " + where)
            testcase.assertNotEqual(r.get("body_sha_ok"), False,
                                    "body does not match x-amz-content-sha256: " + where)


# ---------------------------------------------------------------- larder


class Larder:
    """The larder binary (ASan build by default) as a child process."""

    def __init__(self, upstream=None, env=None, config_text=None, client_key=True, binary=None,
                 host="127.0.0.1", port=None):
        self.binary = binary
        self.host, self.port = host, port or free_port()
        self.url = "http://%s:%d" % (host, self.port)
        self.dir = tempfile.mkdtemp(prefix="larder-run-")
        self.san_dir = os.path.join(self.dir, "sanitizers")
        os.mkdir(self.san_dir)
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.access_log_path = os.path.join(self.dir, "access.log")
        self.config_path = os.path.join(self.dir, "larder.conf")
        self.proc = None
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("AWS_", "LARDER_", "ASAN_", "UBSAN_", "LSAN_", "TSAN_"))}
        e.update({
            "LARDER_LISTEN": "%s:%d" % (host, self.port),
            "LARDER_UPSTREAM_REGION": REGION,
            "LARDER_UPSTREAM_ADDRESSING": "path",
            "LARDER_ACCESS_LOG": self.access_log_path,
            # Tests read the access log right after a request: a line per
            # write. test_operations.AccessLogBuffering checks the default.
            "LARDER_ACCESS_LOG_FLUSH_MS": "0",
            "LARDER_LOG_LEVEL": "info",
            "LARDER_WORKERS": "2",
            # Tests that use the admin API give it a free port; the rest turn it
            # off, so larders running side by side never fight over 9090.
            "LARDER_ADMIN_LISTEN": "off",
        })
        if upstream is not None:
            e.update({"LARDER_UPSTREAM_URL": upstream.url,
                      "AWS_ACCESS_KEY_ID": upstream.access_key,
                      "AWS_SECRET_ACCESS_KEY": upstream.secret_key})
        if client_key:
            e.update({"LARDER_CLIENT_KEY": CLIENT_KEY, "LARDER_CLIENT_SECRET": CLIENT_SECRET})
        if config_text is not None:
            self.write_config(config_text)
            e["LARDER_CONFIG"] = self.config_path
        leaks = os.environ.get("LARDER_TEST_DETECT_LEAKS", "1")
        # Sanitizer reports go to files; check_sanitizers() fails the test on any.
        e["ASAN_OPTIONS"] = ("halt_on_error=1:abort_on_error=0:detect_leaks=%s:"
                             "log_path=%s/asan" % (leaks, self.san_dir))
        e["UBSAN_OPTIONS"] = ("halt_on_error=1:print_stacktrace=1:log_path=%s/ubsan"
                              % self.san_dir)
        e["LSAN_OPTIONS"] = "log_path=%s/lsan" % self.san_dir
        # A ThreadSanitizer build (LARDER_BIN; scripts/test.sh runs some modules so).
        e["TSAN_OPTIONS"] = "second_deadlock_stack=1:log_path=%s/tsan" % self.san_dir
        if env:  # a None value unsets the variable (a test of the shipped default)
            e.update(env)
        self.env = {k: v for k, v in e.items() if v is not None}

    def write_config(self, text):
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_path)

    def start(self, timeout=30):
        binary = self.binary or larder_binary()
        if not os.access(binary, os.X_OK):
            raise unittest.SkipTest("larder binary not built: " + binary)
        err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([binary, "serve"], env=self.env, stdout=err, stderr=err,
                                     stdin=subprocess.DEVNULL)
        err.close()
        if not wait_port(self.port, timeout, self.proc, self.host):
            code = self.proc.poll()
            if code is None:
                self.proc.kill()
                self.proc.wait()
            raise RuntimeError("larder did not accept connections on port %d within %ss "
                               "(exit code %s); its log:\n%s%s"
                               % (self.port, timeout, code, self.log(), self.sanitizer_text()))
        # The admin listener starts after the workers' (gateway/server.c): a
        # test that calls it right after a restart found it not there yet on
        # a loaded machine. A larder that stops instead is the test's to see.
        admin = self.env.get("LARDER_ADMIN_LISTEN", "off")
        if admin != "off" and ":" in admin:
            host, port = admin.rsplit(":", 1)
            wait_port(int(port), timeout, self.proc, host.strip("[]") or "127.0.0.1")
        return self

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=30):
        """SIGTERM, wait; returns the exit code (kills and returns None on timeout)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode

    def log(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def access_log(self):
        try:
            with open(self.access_log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def access_records(self):
        return [parse_logfmt(line) for line in self.access_log().splitlines() if line.strip()]

    @staticmethod
    def admin_env():
        """The environment of a larder whose admin API peak_memory() reads."""
        return {"LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % free_port(),
                "LARDER_ADMIN_TOKEN": "memory-" + os.urandom(8).hex()}

    def status_bytes(self, field):
        """A kB field of /proc/PID/status (VmHWM, RssShmem, ...), in bytes,
        while the process lives."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no %s in /proc/%d/status" % (field, self.proc.pid))

    def peak_rss(self):
        """Peak resident set size in bytes (VmHWM), while the process lives."""
        return self.status_bytes("VmHWM")

    def peak_memory(self):
        """Peak memory in bytes: VmHWM plus the most bytes larder's chunks
        held in its memfd (larder_chunk_arena_peak_bytes), which RSS shows
        only where a hit mapped them in. The two peaks may be apart in time,
        and mapped pages count in both: their sum bounds the true peak from
        above. Needs the admin API (admin_env())."""
        m = re.search(r"^larder_chunk_arena_peak_bytes (\d+)$", self.metrics_text(), re.M)
        if not m:
            raise RuntimeError("no larder_chunk_arena_peak_bytes in /metrics")
        return self.peak_rss() + int(m.group(1))

    def metrics_text(self):
        """GET /metrics of the admin API (admin_env())."""
        req = urllib.request.Request(
            "http://%s/metrics" % self.env["LARDER_ADMIN_LISTEN"],
            headers={"Authorization": "Bearer " + self.env["LARDER_ADMIN_TOKEN"]})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read().decode()

    def client_connections(self):
        """larder_client_connections of /metrics (admin_env()): the client connections larder
        counts against LARDER_MAX_CONNECTIONS, from a worker's accept until it saw the close."""
        m = re.search(r"^larder_client_connections (\d+)$", self.metrics_text(), re.M)
        if not m:
            raise RuntimeError("no larder_client_connections in /metrics")
        return int(m.group(1))

    def sanitizer_text(self):
        out = []
        for name in sorted(os.listdir(self.san_dir)) if os.path.isdir(self.san_dir) else []:
            with open(os.path.join(self.san_dir, name), "rb") as f:
                out.append("== %s ==\n%s" % (name, f.read().decode("utf-8", "replace")))
        # UBSan in the ASan build writes to stderr whatever its log_path says.
        log = self.log()
        at = min((i for i in (log.find(": runtime error: "), log.find("Sanitizer:")) if i >= 0),
                 default=-1)
        if at >= 0:
            start = log.rfind("\n", 0, at) + 1
            out.append("== stderr ==\n%s" % log[start:start + 8000])
        return "\n".join(out)

    def check_sanitizers(self, testcase=None):
        text = self.sanitizer_text()
        if text:
            msg = "sanitizer reports from larder:\n" + text[:20000]
            if testcase is not None:
                testcase.fail(msg)
            raise AssertionError(msg)

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not os.environ.get("LARDER_TEST_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def client(self, key=CLIENT_KEY, secret=CLIENT_SECRET, **kw):
        return make_s3_client(self.url, key, secret, **kw)

    def aws(self, *args, key=CLIENT_KEY, secret=CLIENT_SECRET, timeout=300, input=None):
        return run_aws(self.url, key, secret, *args, timeout=timeout, input=input)


def parse_logfmt(line):
    """key=value pairs; values bare or double-quoted with \\ escapes."""
    out, i, n = {}, 0, len(line)
    while i < n:
        while i < n and line[i] == " ":
            i += 1
        j = line.find("=", i)
        if j < 0:
            break
        key = line[i:j]
        i = j + 1
        if i < n and line[i] == '"':
            i += 1
            buf = []
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n:
                    if line[i + 1] == "x" and i + 3 < n:
                        buf.append(chr(int(line[i + 2:i + 4], 16)))
                        i += 4
                        continue
                    buf.append(line[i + 1])
                    i += 2
                    continue
                buf.append(line[i])
                i += 1
            i += 1
            out[key] = "".join(buf)
        else:
            j = line.find(" ", i)
            j = n if j < 0 else j
            out[key] = line[i:j]
            i = j
    return out


# ---------------------------------------------------------------- clients


_sessions = threading.local()


def make_s3_client(endpoint, key, secret, **config):
    """A boto3 S3 client of its own (its connections, settings and event handlers), made
    from its thread's one session: a session of its own per client read botocore's models
    again, 160 ms of CPU against 4, and tests make a client for nearly every read. A
    session is not to be shared between threads; its clients may be."""
    import boto3
    from botocore.config import Config
    opts = dict(s3={"addressing_style": "path"}, signature_version="s3v4",
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=10, read_timeout=30)
    opts.update(config)
    session = getattr(_sessions, "session", None)
    if session is None:
        session = _sessions.session = boto3.session.Session()
    return session.client(
        "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key,
        aws_secret_access_key=secret, config=Config(**opts))


_aws_home = None


def run_aws(endpoint, key, secret, *args, timeout=300, input=None):
    """Runs the AWS CLI against endpoint with env credentials and a private HOME."""
    global _aws_home
    if _aws_home is None:
        _aws_home = tempfile.mkdtemp(prefix="larder-awscli-")
        with open(os.path.join(_aws_home, "config"), "w") as f:
            f.write("[default]\nregion = %s\ns3 =\n    addressing_style = path\n" % REGION)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=_aws_home, AWS_CONFIG_FILE=os.path.join(_aws_home, "config"),
               AWS_SHARED_CREDENTIALS_FILE=os.path.join(_aws_home, "credentials"),
               AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
               AWS_DEFAULT_REGION=REGION, AWS_ENDPOINT_URL=endpoint,
               AWS_MAX_ATTEMPTS="1", AWS_PAGER="")
    return subprocess.run(["aws", "--endpoint-url", endpoint] + list(args), env=env,
                          capture_output=True, timeout=timeout, input=input)


def sign_headers(method, url, key, secret, headers=None, body=b"", when=None, payload=None):
    """Headers for a request signed by botocore's S3SigV4Auth; `when` (a UTC
    datetime) fixes the signing time, e.g. to sign with a skewed clock;
    `payload` is the payload hash to declare (e.g. UNSIGNED-PAYLOAD) instead
    of the hash of `body`."""
    import datetime
    from unittest import mock
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    import hashlib
    req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    if "X-Amz-Content-SHA256" not in req.headers:
        req.headers["X-Amz-Content-SHA256"] = hashlib.sha256(body).hexdigest()
    auth = S3SigV4Auth(Credentials(key, secret), "s3", REGION)
    if payload is not None:
        auth.payload = lambda request: payload
    if when is None:
        auth.add_auth(req)
    else:
        fixed = when.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        with mock.patch("botocore.auth.get_current_datetime", lambda *a, **k: fixed):
            auth.add_auth(req)
    return dict(req.headers.items())


def http_request(base, method, path, headers=None, body=None, timeout=30):
    """One plain HTTP request; returns (status, headers dict lower-cased, body)."""
    host, port = base.replace("http://", "").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def signed_socket(larder, method, path, key=CLIENT_KEY, secret=CLIENT_SECRET, body=b"",
                  sent=None, timeout=10):
    """A connection to larder that has sent a request signed for key: its
    headers, then the first `sent` bytes of body (all of it by default). For
    tests that leave a request unfinished or hang up on it; the caller closes
    the socket."""
    h = sign_headers(method, larder.url + path, key, secret, body=body)
    if body:
        h["Content-Length"] = str(len(body))
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (method, path, larder.port)
    head += "".join("%s: %s\r\n" % kv for kv in h.items() if kv[0].lower() != "host")
    s = socket.create_connection(("127.0.0.1", larder.port), timeout=timeout)
    s.sendall(head.encode() + b"\r\n" + body[:len(body) if sent is None else sent])
    return s


def need_mount_namespace(case):
    """Skips case (a TestCase, or its class in setUpClass) without unshare -m (root)."""
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        raise unittest.SkipTest("needs a mount namespace (unshare -m): run as root")


def bind_mount_wrapper(path, source, target, binary=None):
    """Writes an executable at path that runs binary (larder's by default) in a
    mount namespace of its own where source is bind-mounted over target (a
    private /etc/resolv.conf or CA folder), so tests can change what larder
    sees of the system without touching it."""
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec unshare -m --propagation private sh -c "
                "'mount --bind \"$0\" %s && exec \"$@\"' %s %s \"$@\"\n"
                % (target, source, binary or larder_binary()))
    os.chmod(path, 0o755)
    return path


def raw_exchange(port, data, timeout=10, shutdown_write=False, later=None, pause=0.0):
    """Sends raw bytes (and `later` bytes `pause` seconds after them, as a
    slow client sends its body), returns everything read until close or
    timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if later is not None:
            time.sleep(pause)
            try:
                s.sendall(later)
            except OSError:
                pass  # answered and closed before it: the answer says why
        if shutdown_write:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        s.close()


class Resp:
    """A response read to its end or as far as it came: a body cut short or
    a dropped connection is reported (complete=False, error), never raised."""

    def __init__(self, status, headers, body, complete=True, error=None):
        self.status, self.headers, self.body = status, headers, body
        self.complete, self.error = complete, error

    @property
    def cache(self):
        return self.headers.get("x-larder-cache")

    def __repr__(self):
        return "<%s cache=%s len=%d complete=%s error=%r>" % (
            self.status, self.cache, len(self.body), self.complete, self.error)


def signed_request(base, method, path, headers=None, key=CLIENT_KEY, secret=CLIENT_SECRET,
                   user_agent=None, timeout=60, resp_class=Resp):
    """One SigV4-signed request on a fresh connection; returns resp_class."""
    h = sign_headers(method, base + path, key, secret, headers)
    if user_agent:
        h["User-Agent"] = user_agent
    host, port = base.replace("http://", "").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        try:
            c.request(method, path, headers=h)
            r = c.getresponse()
        except (OSError, http.client.HTTPException) as e:
            return resp_class(None, {}, b"", False, e)
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        try:
            return resp_class(r.status, hdrs, r.read(), True)
        except http.client.IncompleteRead as e:
            return resp_class(r.status, hdrs, e.partial, False, e)
        except (OSError, http.client.HTTPException) as e:
            return resp_class(r.status, hdrs, b"", False, e)
    finally:
        c.close()


def s3_error(body):
    """(Code, RequestId) from an S3 XML error body, or (None, None)."""
    import xml.etree.ElementTree as ET
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None, None
    if root.tag != "Error":
        return None, None
    return root.findtext("Code"), root.findtext("RequestId")


def key_path(bucket, key):
    return "/%s/%s" % (bucket, quote(key.encode("utf-8"), safe="/~"))


# ---------------------------------------------------------------- base class


class S3Asserts:
    def assertS3Error(self, fn, status, code):
        """fn() must raise a botocore ClientError with this HTTP status and Code."""
        from botocore.exceptions import ClientError
        with self.assertRaises(ClientError) as cm:
            fn()
        resp = cm.exception.response
        self.assertEqual(resp["ResponseMetadata"]["HTTPStatusCode"], status, resp)
        self.assertEqual(resp["Error"]["Code"], code, resp)
        return resp


class LarderCase(S3Asserts, unittest.TestCase):
    """One moto upstream and one larder per test class.

    Subclasses may set LARDER_ENV (dict) and CONFIG_TEXT. tearDownClass stops
    larder with SIGTERM and fails when it did not exit 0 or when ASan/UBSan/LSan
    reported anything, or when any request larder sent upstream was not signed
    byte-correctly according to the independent verifier.
    """
    LARDER_ENV = None
    CONFIG_TEXT = None
    PLAIN_BUILD = False  # True: run the plain build (memory figures), not ASan
    PRELOAD = None  # "NAME.c": doubles/NAME.c built (build_preload) and LD_PRELOADed into larder

    @classmethod
    def setUpClass(cls):
        if not os.access(larder_binary(), os.X_OK):
            raise unittest.SkipTest("larder binary not built: " + larder_binary())
        env = cls.LARDER_ENV
        if cls.PRELOAD:
            lib_dir = tempfile.mkdtemp(prefix="larder-preload-")
            cls.addClassCleanup(shutil.rmtree, lib_dir, True)
            env = dict(env or {}, LD_PRELOAD=build_preload(cls.PRELOAD, lib_dir))
        cls.upstream = Upstream().start()
        try:
            cls.larder = Larder(cls.upstream, env=env, config_text=cls.CONFIG_TEXT,
                                binary=plain_larder_binary() if cls.PLAIN_BUILD else None)
            if cls.PRELOAD:  # an ASan build wants its runtime first among the libraries
                cls.larder.env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
            cls.larder.start()
        except BaseException:
            cls.upstream.cleanup()
            if getattr(cls, "larder", None):
                cls.larder.cleanup()
            raise
        cls.s3 = cls.larder.client()
        cls.direct = cls.upstream.client()

    @classmethod
    def tearDownClass(cls):
        problems = []
        try:
            if cls.larder.alive():
                code = cls.larder.stop()
                if code != 0:
                    problems.append("larder exited with %r on SIGTERM; log tail:\n%s"
                                    % (code, cls.larder.log()[-4000:]))
            san = cls.larder.sanitizer_text()
            if san:
                problems.append("sanitizer reports:\n" + san[:20000])
            for r in cls.upstream.from_larder():
                sig = r.get("sig") or {}
                if not sig.get("ok") or not r["path_canonical"] or r.get("body_sha_ok") is False:
                    problems.append("larder sent upstream a request that is not byte-correct: "
                                    "%s %s sig=%s path_canonical=%s body_sha_ok=%s"
                                    % (r["method"], r["target"][:200], sig, r["path_canonical"],
                                       r.get("body_sha_ok")))
                    break
        finally:
            cls.larder.cleanup()
            cls.upstream.cleanup()
        if problems:
            raise AssertionError("\n".join(problems))
