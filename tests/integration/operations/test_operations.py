"""Operating larder: signals, limits, the access log, hostile input."""
import errno
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, Larder, LarderCase, Upstream, s3_error

MiB = 1024 * 1024


def signed(larder, method, path, key=CLIENT_KEY, secret=CLIENT_SECRET, body=b"", headers=None):
    return harness.sign_headers(method, larder.url + path, key, secret, headers=headers, body=body)


def until(cond, timeout=10, step=0.02):
    """Polls cond() until it is true or timeout seconds have passed; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(step)


def records_when(larder, ready):
    """The access log's records once ready(records) holds (a record is written when its
    request completes, just after its answer went), or as they are at the deadline."""
    until(lambda: ready(larder.access_records()))
    return larder.access_records()


class OwnLarderCase(harness.S3Asserts, unittest.TestCase):
    """Tests that start (and stop) their own larder against a shared upstream.
    A base without tests of its own, so that subclasses run only theirs."""

    @classmethod
    def setUpClass(cls):
        if not os.access(harness.larder_binary(), os.X_OK):
            raise unittest.SkipTest("larder binary not built: " + harness.larder_binary())
        cls.upstream = Upstream().start()
        cls.direct = cls.upstream.client()
        cls.direct.create_bucket(Bucket="ops")

    @classmethod
    def tearDownClass(cls):
        cls.upstream.cleanup()

    def start_larder(self, env=None, config_text=None, client_key=True):
        larder = Larder(self.upstream, env=env, config_text=config_text, client_key=client_key)
        self.addCleanup(larder.cleanup)
        larder.start()
        return larder

    def finish(self, larder, grace=30):
        t0 = time.monotonic()
        code = larder.stop(timeout=grace)
        self.assertEqual(code, 0, "exit code on SIGTERM; log tail:\n" + larder.log()[-3000:])
        larder.check_sanitizers(self)
        self.upstream.assert_signed_correctly(self)
        return time.monotonic() - t0


class OwnLarder(OwnLarderCase):
    """Signals and connection limits, each test with a larder of its own."""

    def test_sigterm_drains_slow_download(self):
        size = 64 * MiB
        data = os.urandom(MiB) * 64
        self.direct.put_object(Bucket="ops", Key="slow.bin", Body=data)
        larder = self.start_larder(env={"LARDER_SHUTDOWN_GRACE": "20"})
        conn = http.client.HTTPConnection("127.0.0.1", larder.port, timeout=30)
        conn.request("GET", "/ops/slow.bin", headers=signed(larder, "GET", "/ops/slow.bin"))
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        h, got = hashlib.sha256(), 0
        while got < 2 * MiB:  # a slow reader
            chunk = resp.read(64 * 1024)
            h.update(chunk)
            got += len(chunk)
            time.sleep(0.02)
        t_term = time.monotonic()
        larder.signal(signal.SIGTERM)
        time.sleep(1.0)  # larder must not exit: a fixed time, something not happening
        self.assertTrue(larder.alive(), "larder exited with a download in flight")
        # a new client while draining is refused or answered, never left hanging
        try:
            harness.http_request(larder.url, "HEAD", "/ops/slow.bin",
                                 signed(larder, "HEAD", "/ops/slow.bin"), timeout=5)
        except socket.timeout:
            self.fail("a new connection hung while larder was draining")
        except (OSError, http.client.HTTPException):
            pass
        while True:
            chunk = resp.read(MiB)
            if not chunk:
                break
            h.update(chunk)
            got += len(chunk)
        self.assertEqual(got, size)
        self.assertEqual(h.hexdigest(), hashlib.sha256(data).hexdigest())
        conn.close()
        code = larder.proc.wait(25)
        self.assertEqual(code, 0, larder.log()[-3000:])
        self.assertLess(time.monotonic() - t_term, 21)
        larder.check_sanitizers(self)

    def test_sigterm_idle_exits_promptly(self):
        larder = self.start_larder(env={"LARDER_SHUTDOWN_GRACE": "20"})
        took = self.finish(larder)
        self.assertLess(took, 5, "an idle larder should not wait out the grace period")

    def test_sigterm_does_not_wait_for_requests_still_arriving(self):
        # A request whose headers have not all arrived has not started:
        # draining waited the whole grace period for it, for a client that
        # is only slow (it may never finish) or, when its last bytes and its
        # close arrived together, for one that was gone (libmicrohttpd saw
        # that close only at the client timeout).
        larder = self.start_larder(env={"LARDER_SHUTDOWN_GRACE": "20"})
        slow = socket.create_connection(("127.0.0.1", larder.port))
        self.addCleanup(slow.close)
        slow.sendall(b"GET /ops/x HTTP/1.1\r\nHost: a\r\nX-Amz-Date: 2026")
        gone = socket.create_connection(("127.0.0.1", larder.port))
        gone.sendall(b"GET /ops/x HTTP/1.1\r\nHost: a\r\n")
        gone.close()
        until(lambda: harness.accept_queue(larder.port) == 0)  # both inside larder first
        self.assertEqual(harness.accept_queue(larder.port), 0)
        took = self.finish(larder)
        self.assertLess(took, 5, "draining waited for requests whose headers never came")

    def download_in_flight(self, larder, key):
        """An 8 MiB object uploaded as key and a GET of it through larder whose first
        64 KiB are read: the rest waits, so the download stays in flight.
        (connection, response, bytes read, the object's bytes)."""
        data = os.urandom(MiB) * 8
        self.direct.put_object(Bucket="ops", Key=key, Body=data)
        conn = http.client.HTTPConnection("127.0.0.1", larder.port, timeout=30)
        conn.request("GET", "/ops/" + key, headers=signed(larder, "GET", "/ops/" + key))
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        return conn, resp, resp.read(64 * 1024), data

    def drain(self, larder):
        """SIGTERM, then until larder says it drains."""
        larder.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "draining for up to" not in larder.log() and time.monotonic() < deadline:
            time.sleep(0.02)

    def finish_download(self, larder, conn, resp, got, data):
        """The download in flight ends whole, and larder exits 0, sanitizers quiet."""
        got += resp.read()
        self.assertEqual(got, data)
        conn.close()
        self.assertEqual(larder.proc.wait(25), 0, larder.log()[-3000:])
        larder.check_sanitizers(self)

    def test_sighup_while_draining_does_not_end_the_drain(self):
        # The access log as shipped (LARDER_ACCESS_LOG_FLUSH_MS unset) runs a
        # flusher thread. It was started before the signals were blocked, so
        # a SIGHUP that came while the main thread was not in sigwait (here:
        # draining; also starting or reloading) reached that thread with its
        # default action: the process died, cutting the download.
        larder = self.start_larder(env={"LARDER_SHUTDOWN_GRACE": "20",
                                        "LARDER_ACCESS_LOG_FLUSH_MS": None})
        download = self.download_in_flight(larder, "hup-drain.bin")
        self.drain(larder)
        larder.signal(signal.SIGHUP)
        time.sleep(0.5)  # larder must not die of it: a fixed time, something not happening
        self.assertTrue(larder.alive(), "a SIGHUP while draining ended larder (exit %s)"
                        % larder.proc.poll())
        self.finish_download(larder, *download)

    def test_admin_answers_while_draining(self):
        # The admin listener was stopped at SIGTERM, before the drain: /readyz
        # could never say 503 "draining" as documented (its port refused
        # connections), nor /healthz and /metrics answer while requests ran.
        token = "drain-token-0123456789abcdef"
        admin_port = harness.free_port()
        larder = self.start_larder(env={"LARDER_SHUTDOWN_GRACE": "20",
                                        "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % admin_port,
                                        "LARDER_ADMIN_TOKEN": token})

        def admin(method, path, body=None):
            c = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=10)
            try:
                c.request(method, path, body=body, headers={"Authorization": "Bearer " + token})
                r = c.getresponse()
                body = r.read()
                json_type = r.getheader("Content-Type", "").startswith("application/json")
                return r.status, json.loads(body) if json_type else body
            finally:
                c.close()

        download = self.download_in_flight(larder, "admin-drain.bin")
        self.drain(larder)
        status, doc = admin("GET", "/readyz")
        self.assertEqual((status, doc["ready"], doc["checks"]["draining"]), (503, False, True))
        self.assertEqual(admin("GET", "/healthz")[0], 200)
        self.assertEqual(admin("GET", "/metrics")[0], 200)
        status, doc = admin("POST", "/admin/prefetch",
                            json.dumps({"bucket": "ops", "keys": ["admin-drain.bin"]}))
        self.assertEqual((status, doc["error"]), (503, "draining"))
        self.finish_download(larder, *download)

    def test_answers_while_draining_close_their_connection(self):
        # A keep-alive connection that goes on sending while larder drains:
        # each answer must end it, or the client's next request may cross
        # the close of the idle connection at the end of the drain and be
        # lost unanswered (a PUT then leaves the client in doubt).
        self.direct.put_object(Bucket="ops", Key="ka-small", Body=b"small")
        larder = self.start_larder(env={"LARDER_SHUTDOWN_GRACE": "20"})
        ka = http.client.HTTPConnection("127.0.0.1", larder.port, timeout=10)
        ka.request("GET", "/ops/ka-small", headers=signed(larder, "GET", "/ops/ka-small"))
        r = ka.getresponse()
        self.assertEqual((r.status, r.read(), r.getheader("Connection")), (200, b"small", None))
        download = self.download_in_flight(larder, "ka-drain.bin")  # the drain goes on
        self.drain(larder)
        ka.request("GET", "/ops/ka-small", headers=signed(larder, "GET", "/ops/ka-small"))
        r = ka.getresponse()
        self.assertEqual((r.status, r.read(), r.getheader("Connection")), (200, b"small", "close"))
        ka.close()
        self.finish_download(larder, *download)

    def test_stop_does_not_wait_for_an_admin_call_on_a_silent_upstream(self):
        # A warm job's bucket check runs on the admin listener's thread and
        # waits on S3; stopping the listener waited for it, holding the exit
        # for up to LARDER_UPSTREAM_TIMEOUT past the drain.
        hole = socket.socket()  # accepts, never answers
        self.addCleanup(hole.close)
        hole.bind(("127.0.0.1", 0))
        hole.listen(8)
        token = "stop-token-0123456789abcdef"
        admin_port = harness.free_port()
        larder = self.start_larder(env={
            "LARDER_UPSTREAM_URL": "http://127.0.0.1:%d" % hole.getsockname()[1],
            "LARDER_UPSTREAM_TIMEOUT": "60", "LARDER_SHUTDOWN_GRACE": "5",
            "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % admin_port, "LARDER_ADMIN_TOKEN": token})
        c = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=90)
        self.addCleanup(c.close)
        c.request("POST", "/admin/prefetch", body=json.dumps({"bucket": "ops", "keys": ["k"]}),
                  headers={"Authorization": "Bearer " + token})
        hole.settimeout(10)
        waiting, _ = hole.accept()  # the bucket check reached the upstream
        self.addCleanup(waiting.close)
        t0 = time.monotonic()
        larder.signal(signal.SIGTERM)
        try:
            code = larder.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.fail("larder was still running 15 s after SIGTERM (grace 5 s, nothing in "
                      "flight but the admin call)")
        self.assertEqual(code, 0, larder.log()[-3000:])
        self.assertLess(time.monotonic() - t0, 7)
        larder.check_sanitizers(self)

    def test_sighup_reloads_keys_keeping_connections(self):
        k1, s1 = "LARDERRELOADKEY00001", "reload-secret-one-000000000000000000000001"
        k2, s2 = "LARDERRELOADKEY00002", "reload-secret-two-000000000000000000000002"
        conf = "[key %s]\nsecret = %s\naccess = read-write\nbuckets = ops\n"
        larder = self.start_larder(config_text=conf % (k1, s1), client_key=False)
        self.direct.put_object(Bucket="ops", Key="hup", Body=b"hup")
        conn = http.client.HTTPConnection("127.0.0.1", larder.port, timeout=10)
        conn.request("GET", "/ops/hup", headers=signed(larder, "GET", "/ops/hup", k1, s1))
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (200, b"hup"))
        local = conn.sock.getsockname()
        c2 = larder.client(key=k2, secret=s2)
        self.assertS3Error(lambda: c2.get_object(Bucket="ops", Key="hup"), 403, "InvalidAccessKeyId")

        larder.write_config(conf % (k2, s2))
        larder.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.assertEqual(c2.get_object(Bucket="ops", Key="hup")["Body"].read(), b"hup")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.assertTrue(larder.alive())
        c1 = larder.client(key=k1, secret=s1)
        self.assertS3Error(lambda: c1.get_object(Bucket="ops", Key="hup"), 403, "InvalidAccessKeyId")
        # the keep-alive connection opened before SIGHUP still works
        self.assertIsNotNone(conn.sock, "larder closed the keep-alive connection")
        conn.request("GET", "/ops/hup", headers=signed(larder, "GET", "/ops/hup", k2, s2))
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (200, b"hup"))
        self.assertEqual(conn.sock.getsockname(), local, "connection was re-opened")
        conn.close()
        self.finish(larder)

    def test_sighup_with_broken_config_keeps_old_keys(self):
        k1, s1 = "LARDERRELOADKEY00003", "reload-secret-three-0000000000000000000003"
        larder = self.start_larder(
            config_text="[key %s]\nsecret = %s\naccess = read-write\nbuckets = ops\n" % (k1, s1),
            client_key=False)
        larder.write_config("[key %s]\nsecret = %s\naccess = sometimes\n" % (k1, s1))
        larder.signal(signal.SIGHUP)
        until(lambda: "reload failed" in larder.log())
        self.assertIn("reload failed, keeping the current keys", larder.log())
        self.assertTrue(larder.alive(), "a bad config on SIGHUP must not kill larder")
        c1 = larder.client(key=k1, secret=s1)
        self.assertEqual(c1.list_objects_v2(Bucket="ops")["ResponseMetadata"]["HTTPStatusCode"], 200)
        self.finish(larder)

    def test_sighup_to_no_keys_at_all_is_warned_of(self):
        # A file caught empty mid-write (a shell's > truncates first) reloads
        # as valid: every request is then refused, which the start warns of
        # and the reload only logged as "reloaded: 0 client keys".
        k1, s1 = "LARDERRELOADKEY00004", "reload-secret-four-00000000000000000000004"
        larder = self.start_larder(
            config_text="[key %s]\nsecret = %s\naccess = read-write\nbuckets = ops\n" % (k1, s1),
            client_key=False)
        self.assertNotIn("no client keys configured", larder.log())
        larder.write_config("")
        larder.signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while "no client keys configured" not in larder.log() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIn("reloaded: 0 client keys", larder.log())
        self.assertIn("no client keys configured", larder.log())
        self.finish(larder)

    def test_connection_limit_gives_slowdown(self):
        larder = self.start_larder(env={"LARDER_MAX_CONNECTIONS": "4",
                                        "LARDER_CLIENT_TIMEOUT": "60"})
        held = []
        for _ in range(4):  # four accepted, served, kept-alive connections
            c = http.client.HTTPConnection("127.0.0.1", larder.port, timeout=10)
            c.request("GET", "/ops?list-type=2", headers=signed(larder, "GET", "/ops?list-type=2"))
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            held.append(c)
        t0 = time.monotonic()
        st, hdrs, body = harness.http_request(larder.url, "GET", "/ops?list-type=2",
                                              signed(larder, "GET", "/ops?list-type=2"),
                                              timeout=10)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(st, 503, body)
        self.assertEqual(s3_error(body)[0], "SlowDown", body)
        for c in held:
            c.close()
        # larder sees the closes in its own time
        ok = until(lambda: harness.http_request(larder.url, "GET", "/ops?list-type=2", signed(
            larder, "GET", "/ops?list-type=2"))[0] == 200, step=0.1)
        self.assertTrue(ok, "larder did not recover after connections closed (200)")
        self.finish(larder)


class UnparsedRequests(OwnLarderCase):
    """Requests whose line and headers do not become a request. libmicrohttpd creates one and
    then may not parse it into its per-connection pool (a query of many parameters: it keeps
    one entry per parameter; larder answers those itself, test_query_of_many_parameters_is_
    answered_at_once): it never reaches larder's handlers, nor its completion callback,
    and its record must still be freed when the connection goes. And headers trickled a byte
    at a time must not hold a connection past LARDER_CLIENT_TIMEOUT (libmicrohttpd's own
    timeout is of inactivity)."""

    def test_trickled_headers_are_cut_off_at_the_client_timeout(self):
        larder = self.start_larder(env={"LARDER_CLIENT_TIMEOUT": "3"})
        s = socket.create_connection(("127.0.0.1", larder.port))
        s.settimeout(0.9)
        t0 = time.monotonic()
        closed = None
        try:
            s.sendall(b"GET /ops/none HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            while time.monotonic() - t0 < 12:
                try:
                    s.sendall(b"a")  # within the inactivity timeout, every time
                    if s.recv(4096) == b"":
                        closed = time.monotonic() - t0
                        break
                except socket.timeout:
                    pass
                except OSError:
                    closed = time.monotonic() - t0
                    break
        finally:
            s.close()
        self.assertIsNotNone(closed, "a connection trickling its headers was kept 12 s")
        self.assertLess(closed, 6, "closed after %.1f s; LARDER_CLIENT_TIMEOUT is 3" % closed)
        r = harness.signed_request(larder.url, "GET", "/ops/none")
        self.assertEqual(r.status, 404, r)  # the others still served
        self.finish(larder)

    def test_query_of_many_parameters_leaks_nothing(self):
        larder = self.start_larder(env={"LARDER_CLIENT_TIMEOUT": "2"})
        req = (b"GET /ops/small?" + b"a&" * 600 + b"b" * 4000 +
               b" HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(3):
            socks = []
            for _ in range(20):
                s = socket.create_connection(("127.0.0.1", larder.port))
                s.sendall(req)
                socks.append(s)
            time.sleep(0.3)
            for s in socks:
                s.close()
        raw = harness.raw_exchange(larder.port, req, timeout=5)
        self.assertIn(b"RequestHeaderSectionTooLarge", raw)  # answered by larder itself
        time.sleep(0.5)
        r = harness.signed_request(larder.url, "GET", "/ops/none")
        self.assertEqual(r.status, 404, r)  # still serving
        self.finish(larder)  # LeakSanitizer reports what was not freed

    def test_requests_that_fill_the_pool_are_answered(self):
        # A request line and headers that leave too little of libmicrohttpd's
        # pool for the header block of larder's refusal: libmicrohttpd closed
        # the connection with no answer ("failed to create response header"
        # in the log) while the access log said a 400 was sent. Past them
        # libmicrohttpd answers 431 or 414 itself.
        larder = self.start_larder()
        pool = 16384 + 16384  # LARDER_MAX_HEADER_SIZE + REQ_POOL_EXTRA

        def ask(method, n, extra=b""):
            req = (method + b" /ops/" + b"k" * (n - 5) + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                   extra + b"Connection: close\r\n\r\n")
            raw = harness.raw_exchange(larder.port, req, timeout=5)
            head, _, body = raw.partition(b"\r\n\r\n")
            status = re.match(rb"HTTP/1\.1 (\d+) ", head)
            return (int(status.group(1)) if status else None), head, body

        for extra in (b"", b"X-Pad: " + b"y" * 2000 + b"\r\n"):
            for n in range(pool - 2700, pool + 64, 24):
                st, head, body = ask(b"GET", n, extra)
                self.assertIn(st, (400, 414, 431), (n, len(extra), head))
                if st == 400:
                    self.assertEqual(s3_error(body)[0], "RequestHeaderSectionTooLarge", body)
        # Where the refusal is written past libmicrohttpd: the access log
        # has what was sent, and a HEAD's answer has no body.
        st, head, body = ask(b"GET", pool - 400)
        self.assertEqual(st, 400, head)
        rid = re.search(rb"\r\nx-amz-request-id: (\w+)", head).group(1).decode()
        recs = records_when(larder, lambda rs: any(a["id"] == rid for a in rs))
        rec = [a for a in recs if a["id"] == rid]
        self.assertEqual([(a["method"], a["status"], a["bytes_out"]) for a in rec],
                         [("GET", "400", str(len(body)))], rec)
        st, head, body = ask(b"HEAD", pool - 400)
        self.assertEqual((st, body), (400, b""), head)
        self.assertIn(b"\r\nContent-Type: application/xml\r\n", head)
        r = harness.signed_request(larder.url, "GET", "/ops/none")
        self.assertEqual(r.status, 404, r)  # still serving
        self.finish(larder)

    def test_refused_query_is_not_read_after_its_pool_is_freed(self):
        # A query larder refuses in the URI callback is then let go by
        # libmicrohttpd, which frees the connection's pool before it says the
        # connection closed; larder's access-log line for the request looked
        # up a header in that pool. A pool over 32 KiB is an mmap() of its
        # own: the third such request crashed larder (SIGSEGV).
        larder = self.start_larder(env={"LARDER_MAX_HEADER_SIZE": "64KiB"})
        query = b"&".join(b"p%d" % i for i in range(60)) + b"&z="
        uri = b"/ops/k?" + query + b"v" * (78848 - 7 - len(query))
        req = b"GET " + uri + b" HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"y" * 1000 + b"\r\n\r\n"
        for i in range(5):
            try:
                raw = harness.raw_exchange(larder.port, req, timeout=5)
            except OSError as e:
                raw = repr(e).encode()
            self.assertIn(b"RequestHeaderSectionTooLarge", raw, (i, raw[:200]))
        r = harness.signed_request(larder.url, "GET", "/ops/none")
        self.assertEqual(r.status, 404, r)  # still serving
        self.finish(larder)


class AccessLogAndHostileInput(LarderCase):
    LARDER_ENV = {"LARDER_MAX_HEADER_SIZE": "8KiB", "LARDER_CLIENT_TIMEOUT": "3"}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket="logged")

    def test_access_log_one_line_per_request(self):
        before = len(self.larder.access_records())
        put = self.s3.put_object(Bucket="logged", Key="dir/a b.txt", Body=b"x" * 1000)
        got = self.s3.get_object(Bucket="logged", Key="dir/a b.txt")
        self.assertEqual(got["Body"].read(), b"x" * 1000)
        bad = self.larder.client(secret="wrong")
        with self.assertRaises(Exception):
            bad.get_object(Bucket="logged", Key="dir/a b.txt")
        records_when(self.larder, lambda rs: len(rs) >= before + 3)
        time.sleep(0.3)  # and no fourth record: a fixed time, something not happening
        recs = self.larder.access_records()[before:]
        self.assertEqual(len(recs), 3, self.larder.access_log()[-3000:])
        fields = ["ts", "id", "key_id", "method", "bucket", "key", "status", "bytes_in",
                  "bytes_out", "duration_ms", "upstream_status", "error", "cache"]
        for r in recs:
            for f in fields:
                self.assertIn(f, r, r)
            float(r["duration_ms"])
        p, g, b = recs
        self.assertEqual(p["id"], put["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"])
        self.assertEqual(g["id"], got["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"])
        self.assertEqual((p["method"], p["bucket"], p["key"], p["status"], p["key_id"]),
                         ("PUT", "logged", "dir/a b.txt", "200", CLIENT_KEY))
        self.assertEqual(p["bytes_in"], "1000")
        self.assertEqual(p["upstream_status"], "200")
        # The first GET of an object is a cache miss that learnt it upstream:
        # boto3 sends x-amz-checksum-mode, so with a whole GET (200; a ranged
        # one, 206, without the mode: test_checksums); the PUT was no object read.
        self.assertEqual((g["method"], g["status"], g["bytes_out"], g["upstream_status"],
                          g["cache"]), ("GET", "200", "1000", "200", "miss"))
        self.assertEqual(p["cache"], "-")
        self.assertEqual((b["status"], b["error"]), ("403", "SignatureDoesNotMatch"))
        self.assertIn(b["upstream_status"], ("0", "-"))
        self.assertEqual(len({p["id"], g["id"], b["id"]}), 3)

    def test_error_bodies_are_counted_as_sent(self):
        # An error's XML body was logged (and counted in the byte metrics) as 0 bytes sent.
        got = []
        for method, key, secret in (("GET", "nope", harness.CLIENT_SECRET),
                                    ("GET", "nope", "wrong"),
                                    ("HEAD", "nope", harness.CLIENT_SECRET)):
            r = harness.signed_request(self.larder.url, method, harness.key_path("logged", key),
                                       secret=secret)
            self.assertIn(r.status, (403, 404), r)
            time.sleep(0.2)
            rid = r.headers["x-amz-request-id"]
            rec = [a for a in self.larder.access_records() if a["id"] == rid]
            self.assertEqual(len(rec), 1, rec)
            got.append((rec[0]["status"], rec[0]["bytes_out"], len(r.body)))
        self.assertEqual([(st, int(n)) for st, n, _ in got],
                         [(st, n) for st, _, n in got])
        self.assertGreater(got[0][2], 100)
        self.assertEqual(got[2][2], 0)  # a HEAD's error has no body

    def alive_and_well(self):
        self.assertTrue(self.larder.alive(), self.larder.log()[-3000:])
        r = self.s3.list_objects_v2(Bucket="logged")
        self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], 200)

    def status_of(self, raw):
        line = raw.split(b"\r\n", 1)[0]
        parts = line.split(b" ")
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None

    def test_malformed_authorization(self):
        for auth in ["AWS4-HMAC-SHA256", "AWS4-HMAC-SHA256 Credential=", "Bearer x",
                     "AWS4-HMAC-SHA256 Credential=" + CLIENT_KEY + "/2024/us-east-1/s3/aws4_request,"
                     " SignedHeaders=host, Signature=zz", "AWS4-HMAC-SHA256 " + "A" * 6000]:
            with self.subTest(auth=auth[:50]):
                before = self.upstream.mark()
                st, hdrs, body = harness.http_request(self.larder.url, "GET", "/logged/x",
                                                      {"Authorization": auth,
                                                       "x-amz-date": "20240101T000000Z",
                                                       "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
                self.assertIn(st, (400, 403), body)
                self.assertIsNotNone(s3_error(body)[0], body)
                self.assertEqual(self.upstream.requests(before), [])
        self.alive_and_well()

    def test_bad_percent_encoding(self):
        for path in ["/logged/%zz", "/logged/abc%", "/logged/a%2", "/logged/%00nul", "/%ff%fe/x"]:
            with self.subTest(path=path):
                raw = harness.raw_exchange(self.larder.port, (
                    "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path
                ).encode(), timeout=10)
                st = self.status_of(raw)
                self.assertIsNotNone(st, raw[:300])
                self.assertTrue(400 <= st < 500, raw[:500])
        self.alive_and_well()

    def test_oversized_headers(self):
        req = ("GET /logged/x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: %s\r\n"
               "Connection: close\r\n\r\n" % ("b" * 16384)).encode()
        raw = harness.raw_exchange(self.larder.port, req, timeout=10)
        st = self.status_of(raw)
        if st is not None:  # answering 431/400 or just closing are both fine
            self.assertIn(st, (400, 413, 431), raw[:300])
        many = "".join("X-H%d: %s\r\n" % (i, "v" * 100) for i in range(200))
        raw = harness.raw_exchange(self.larder.port, ("GET /logged/x HTTP/1.1\r\nHost: a\r\n%s"
                                                      "Connection: close\r\n\r\n" % many).encode(),
                                   timeout=10)
        st = self.status_of(raw)
        if st is not None:
            self.assertIn(st, (400, 413, 431), raw[:300])
        self.alive_and_well()

    def test_query_of_many_parameters_is_answered_at_once(self):
        # libmicrohttpd keeps a 64-byte record per query parameter in the
        # connection's pool; when they did not fit it gave up on the request
        # without a word and the client waited for LARDER_CLIENT_TIMEOUT.
        # S3 answers at once; larder now refuses what its pool cannot take.
        for n, sep in ((600, b"&"), (300, b"=v&"), (1500, b"&")):
            with self.subTest(n=n, sep=sep):
                req = (b"GET /logged/x?" + sep.join(b"p%d" % i for i in range(n)) +
                       b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                before = len(self.larder.access_records())
                t0 = time.monotonic()
                raw = harness.raw_exchange(self.larder.port, req, timeout=10)
                self.assertLess(time.monotonic() - t0, 1.5, raw[:300])
                self.assertEqual(self.status_of(raw), 400, raw[:300])
                head, _, body = raw.partition(b"\r\n\r\n")
                self.assertIn(b"\r\nContent-Type: application/xml\r\n", head)
                self.assertEqual(s3_error(body)[0], "RequestHeaderSectionTooLarge", body)
                self.assertIn(b"<Message>The request has %d query parameters;" % n, body)
                rid = re.search(rb"\r\nx-amz-request-id: (\w+)\r\n", head).group(1).decode()
                # Its one line, whenever the buffered log writes it (an earlier test's
                # request may be written in between: CI saw one).
                deadline = time.monotonic() + 5
                while True:
                    recs = [a for a in self.larder.access_records()[before:] if a["id"] == rid]
                    if recs or time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                time.sleep(0.2)  # and no second one
                recs = [a for a in self.larder.access_records()[before:] if a["id"] == rid]
                self.assertEqual([(a["id"], a["status"], a["error"], a["method"]) for a in recs],
                                 [(rid, "400", "RequestHeaderSectionTooLarge", "-")], recs)
        # Fewer, as many as S3 clients send and more, are served as ever.
        req = (b"GET /logged/x?" + b"&".join(b"p%d=v" % i for i in range(100)) +
               b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = harness.raw_exchange(self.larder.port, req, timeout=10)
        self.assertEqual(self.status_of(raw), 403, raw[:300])  # unsigned: AccessDenied
        self.alive_and_well()

    def test_stalled_client_is_disconnected(self):
        s = socket.create_connection(("127.0.0.1", self.larder.port), timeout=20)
        try:
            s.sendall(b"GET /logged/x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Amz-Da")
            t0 = time.monotonic()
            try:
                data = s.recv(4096)
                while data:  # larder may answer 408 before closing
                    data = s.recv(4096)
            except socket.timeout:
                self.fail("stalled connection still open after 20 s (LARDER_CLIENT_TIMEOUT=3)")
            except ConnectionResetError:
                pass
            took = time.monotonic() - t0
            self.assertGreater(took, 1.5, "closed before the client timeout")
            self.assertLess(took, 10)
        finally:
            s.close()
        self.alive_and_well()

    def test_body_shorter_than_content_length(self):
        body = b"0123456789"
        h = signed(self.larder, "PUT", "/logged/short", body=b"\0" * 1000)
        h["Content-Length"] = "1000"
        head = "PUT /logged/short HTTP/1.1\r\n" + "".join(
            "%s: %s\r\n" % kv for kv in h.items()) + "\r\n"
        harness.raw_exchange(self.larder.port, head.encode() + body, timeout=3,
                             shutdown_write=True)
        time.sleep(1)  # a PUT that must not reach S3: a fixed time, something not happening
        self.assertS3Error(lambda: self.direct.head_object(Bucket="logged", Key="short"), 404, "404")
        # unsigned-payload variant, where larder cannot tell from a hash
        h = signed(self.larder, "PUT", "/logged/short2", headers={
            "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        h["Content-Length"] = "100000"
        head = "PUT /logged/short2 HTTP/1.1\r\n" + "".join(
            "%s: %s\r\n" % kv for kv in h.items()) + "\r\n"
        harness.raw_exchange(self.larder.port, head.encode() + b"x" * 5000, timeout=3)
        time.sleep(1)  # as above
        self.assertS3Error(lambda: self.direct.head_object(Bucket="logged", Key="short2"), 404, "404")
        self.alive_and_well()

    def test_zz_still_serving_after_everything(self):
        self.s3.put_object(Bucket="logged", Key="final", Body=b"ok")
        self.assertEqual(self.s3.get_object(Bucket="logged", Key="final")["Body"].read(), b"ok")



class BadConfiguration(unittest.TestCase):
    """A configuration mistake stops the start, names the setting, exits 2."""

    def run_larder(self, env, *args):
        return harness.run_serve(args, env)

    def test_bad_settings_name_themselves(self):
        for env, needle in (({"LARDER_LISTEN": "127.0.0.1:99999"}, b"LARDER_LISTEN"),
                            ({"LARDER_UPSTREAM_URL": "ftp://x"}, b"LARDER_UPSTREAM_URL"),
                            ({"LARDER_CLIENT_KEY": "only-the-key"}, b"LARDER_CLIENT_SECRET"),
                            ({"LARDER_MAX_CONNECTIONS": "lots"}, b"LARDER_MAX_CONNECTIONS")):
            out = self.run_larder(env)
            self.assertEqual(out.returncode, 2, (env, out.stderr))
            self.assertIn(needle, out.stderr, env)

    def test_check_mode(self):
        out = self.run_larder({"LARDER_CLIENT_KEY": "k", "LARDER_CLIENT_SECRET": "s"}, "--check")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"configuration ok", out.stdout)

    def test_check_mode_finds_what_the_start_would_refuse(self):
        # Each of these passed --check and then failed the start.
        key = {"LARDER_CLIENT_KEY": "k", "LARDER_CLIENT_SECRET": "s"}
        d = tempfile.mkdtemp(prefix="larder-check-")
        self.addCleanup(shutil.rmtree, d, True)
        not_pem = os.path.join(d, "cert.pem")
        with open(not_pem, "w") as f:
            f.write("not a certificate\n")
        cluster = {"LARDER_NODE_ID": "n1", "LARDER_ADVERTISE": "127.0.0.1:8080",
                   "LARDER_CLUSTER_SECRET": "0123456789abcdef0123"}
        for env, needle in (
                ({"LARDER_ACCESS_LOG": os.path.join(d, "no-such-dir", "access.log")},
                 b"LARDER_ACCESS_LOG"),
                ({"LARDER_TLS_CERT": os.path.join(d, "missing.pem"),
                  "LARDER_TLS_KEY": not_pem}, b"LARDER_TLS_CERT"),
                ({"LARDER_TLS_CERT": not_pem, "LARDER_TLS_KEY": not_pem}, b"not a PEM file"),
                (dict(cluster, LARDER_REDIS_URL="redis://user@127.0.0.1:6379"),
                 b"LARDER_REDIS_URL"),
                (dict(cluster, LARDER_REDIS_URL="redis://127.0.0.1:6379/x"), b"LARDER_REDIS_URL")):
            out = self.run_larder(dict(key, **env), "--check")
            self.assertEqual(out.returncode, 2, (env, out.stdout, out.stderr))
            self.assertIn(needle, out.stderr, env)
            self.assertNotIn(b"configuration ok", out.stdout)
        # And what the start takes, --check takes: a log file not there yet, in a folder that is.
        out = self.run_larder(dict(key, LARDER_ACCESS_LOG=os.path.join(d, "new.log")), "--check")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "new.log")), "--check created the log")
        out = self.run_larder(dict(cluster, LARDER_REDIS_URL="redis://:pw@127.0.0.1:6379/2",
                                   **key), "--check")
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_misspelt_variable_is_warned_of(self):
        out = self.run_larder({"LARDER_CLIENT_KEY": "k", "LARDER_CLIENT_SECRET": "s",
                               "LARDER_RAM_CACHE_SZE": "1GiB", "LARDER_ADMIN_URL": "http://x"},
                              "--check")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"LARDER_RAM_CACHE_SZE is not a variable larder reads", out.stderr)
        self.assertNotIn(b"LARDER_ADMIN_URL", out.stderr)  # the CLI's
        self.assertNotIn(b"LARDER_UPSTREAM_URL", out.stderr)

    def test_empty_config_variable_is_unset(self):
        # An empty environment variable counts as unset, LARDER_CONFIG too:
        # no file, not a file named "".
        out = self.run_larder({"LARDER_CONFIG": "", "LARDER_CLIENT_KEY": "k",
                               "LARDER_CLIENT_SECRET": "s"}, "--check")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"configuration ok", out.stdout)
        self.assertIn(b"1 client keys", out.stdout)



class AccessLogBuffering(OwnLarderCase):
    """The access log as shipped: each worker gathers lines and writes them
    in batches (LARDER_ACCESS_LOG_BUFFER, LARDER_ACCESS_LOG_FLUSH_MS), so a
    request costs no write of its own; no line is lost or torn."""

    def read_requests(self, larder, n):
        s3 = larder.client()
        for _ in range(n):
            s3.get_object(Bucket="ops", Key="alog")["Body"].read()

    def test_lines_wait_in_the_buffer_and_all_come_out_at_stop(self):
        self.direct.put_object(Bucket="ops", Key="alog", Body=b"x" * 1000)
        larder = self.start_larder(env={"LARDER_ACCESS_LOG_FLUSH_MS": "60000"})
        self.read_requests(larder, 40)
        time.sleep(1)  # time for every request's completion to run
        # A write per line would show all 40 by now; the buffers hold them.
        self.assertEqual(larder.access_records(), [])
        self.finish(larder)
        recs = larder.access_records()
        self.assertEqual(len(recs), 40)
        for r in recs:
            self.assertEqual((r["method"], r["status"], r["key"]), ("GET", "200", "alog"))

    def test_default_interval_writes_lines_without_more_traffic(self):
        self.direct.put_object(Bucket="ops", Key="alog", Body=b"x" * 1000)
        larder = self.start_larder(env={"LARDER_ACCESS_LOG_FLUSH_MS": None})
        self.read_requests(larder, 5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(larder.access_records()) < 5:
            time.sleep(0.05)
        self.assertEqual(len(larder.access_records()), 5)
        self.finish(larder)


    def test_sighup_reopens_a_renamed_log(self):
        # logrotate renames the file, then sends SIGHUP: larder wrote on to
        # the renamed file for good (only copytruncate rotated it).
        self.direct.put_object(Bucket="ops", Key="alog", Body=b"x" * 1000)
        larder = self.start_larder(env={"LARDER_ACCESS_LOG_FLUSH_MS": None})
        path = larder.access_log_path
        self.read_requests(larder, 1)
        self.wait_lines(path, 1)
        os.rename(path, path + ".1")
        larder.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "reloaded:" not in larder.log() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.read_requests(larder, 2)
        self.wait_lines(path, 2)
        self.finish(larder)
        self.assertEqual(len(self.lines(path + ".1")), 1)
        self.assertEqual(len(self.lines(path)), 2)

    @staticmethod
    def lines(path):
        try:
            with open(path) as f:
                return [ln for ln in f.read().splitlines() if ln.strip()]
        except FileNotFoundError:
            return []

    def wait_lines(self, path, n):
        deadline = time.monotonic() + 5  # the default flush interval is 1 s
        while time.monotonic() < deadline and len(self.lines(path)) < n:
            time.sleep(0.05)
        self.assertEqual(len(self.lines(path)), n, path)


class ThreadNames(OwnLarderCase):
    """Every thread says what it is, so top -H and perf's per-thread views
    split larder's CPU by role (docs/ARCHITECTURE.md, "Threads and loops")."""

    def test_threads_are_named_by_role(self):
        cache = tempfile.mkdtemp(prefix="larder-threads-")
        self.addCleanup(shutil.rmtree, cache, True)
        larder = self.start_larder(env={"LARDER_WORKERS": "3", "LARDER_CACHE_DIR": cache,
                                        "LARDER_DISK_CACHE_SIZE": "64MiB",
                                        "LARDER_ACCESS_LOG_FLUSH_MS": None})
        # The port accepts once it is bound, before the workers' threads are
        # started and have named themselves: wait for them (a person's top -H
        # a moment after the start sees the same).
        want = {"larder-worker": 3, "larder-io": 2, "larder-log": 1}
        deadline = time.monotonic() + 10
        while True:
            names = self.thread_names(larder.proc.pid)
            if time.monotonic() > deadline or all(names.get(k) == v for k, v in want.items()):
                break
            time.sleep(0.05)
        self.assertEqual(names.get("larder-worker"), 3, names)
        self.assertEqual(names.get("larder-io"), 2, names)   # the store's default
        self.assertEqual(names.get("larder-log"), 1, names)  # the access log's flusher
        self.finish(larder)

    def test_only_the_main_thread_takes_the_signals(self):
        # gw_run waits for SIGTERM, SIGINT and SIGHUP with sigwait; any other
        # thread that does not block them takes them with their default
        # action (the process ends) while the main thread is not waiting.
        larder = self.start_larder(env={"LARDER_ACCESS_LOG_FLUSH_MS": None})
        deadline = time.monotonic() + 10
        while self.thread_names(larder.proc.pid).get("larder-worker") != 2:
            self.assertLess(time.monotonic(), deadline, "the workers did not start")
            time.sleep(0.05)
        want = (1 << (signal.SIGHUP - 1)) | (1 << (signal.SIGINT - 1)) | \
            (1 << (signal.SIGTERM - 1))
        task = "/proc/%d/task" % larder.proc.pid
        for tid in os.listdir(task):
            if int(tid) == larder.proc.pid:
                continue  # the main thread: in sigwait, which unblocks them while it waits
            try:
                with open(os.path.join(task, tid, "status")) as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except FileNotFoundError:
                continue
            blocked = int(fields["SigBlk"].strip(), 16)
            self.assertEqual(blocked & want, want, "thread %s (%s) takes the signals"
                             % (tid, fields["Name"].strip()))
        self.finish(larder)

    @staticmethod
    def thread_names(pid):
        """{name: how many threads of pid have it}; threads that end while read are skipped."""
        names = {}
        task = "/proc/%d/task" % pid
        for tid in os.listdir(task):
            try:
                with open(os.path.join(task, tid, "comm")) as f:
                    name = f.read().strip()
            except FileNotFoundError:
                continue
            names[name] = names.get(name, 0) + 1
        return names



class RefusedWorkerThread(OwnLarderCase):
    """The system may refuse a thread (a thread limit reached, no memory). A
    worker's refused at the start stops the start: larder says which worker
    and why, stops and joins the workers that did start, and exits 1. It
    used to serve on (a share of the connections landed on a listener no
    thread ran, and hung) and at the stop join a thread that never was."""

    WORKERS = 3

    def preloaded(self, env):
        larder = Larder(self.upstream, env=env)
        self.addCleanup(larder.cleanup)
        larder.env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
        return larder

    def test_refused_worker_thread_stops_the_start(self):
        tmp = tempfile.mkdtemp(prefix="larder-threadcap-")
        self.addCleanup(shutil.rmtree, tmp, True)
        count = os.path.join(tmp, "count")
        env = {"LD_PRELOAD": harness.build_preload("threadcap.c", tmp),
               "THREADCAP_COUNT": count, "LARDER_WORKERS": str(self.WORKERS)}
        # A first start counts the threads made up to the last worker's: the
        # start says how many workers it started once it made them all.
        larder = self.preloaded(env).start()
        deadline = time.monotonic() + 20
        while "with %d workers" % self.WORKERS not in larder.log():
            self.assertLess(time.monotonic(), deadline, larder.log())
            time.sleep(0.05)
        with open(count) as f:
            last = int(f.read())
        self.finish(larder)
        # Refuse the second worker's thread (worker 1): the first one runs by then.
        larder = self.preloaded(dict(env, THREADCAP_REFUSE=str(last - self.WORKERS + 2)))
        t0 = time.monotonic()
        with open(larder.stderr_path, "wb") as err:
            larder.proc = subprocess.Popen([larder.binary or harness.larder_binary(), "serve"],
                                           env=larder.env, stdout=err, stderr=err,
                                           stdin=subprocess.DEVNULL)
        try:
            code = larder.proc.wait(15)
        except subprocess.TimeoutExpired:
            code = None  # still serving
        log = larder.log()
        self.assertEqual(code, 1, "exit code (None: still running 15 s on); log:\n" + log[-3000:])
        self.assertLess(time.monotonic() - t0, 15)
        self.assertRegex(log, r"error +\[server\] worker 1 of %d: .*thread.*: %s"
                         % (self.WORKERS, re.escape(os.strerror(errno.EAGAIN))))
        self.assertNotIn("listening on", log)
        larder.check_sanitizers(self)

if __name__ == "__main__":
    unittest.main()
