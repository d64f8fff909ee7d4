"""Time as larder tells it and as it measures it: the Date every answer
carries, what a RequestTimeTooSkewed names, and timeouts that a step of the
wall clock (NTP) must not move.

The clock steps use doubles/timeshift.c, an LD_PRELOAD library built here
with the system's C compiler: it offsets the wall clock of the larder
process only, by an amount the test rewrites in a file, while the monotonic
clock runs on."""
import datetime
import email.utils
import os
import re
import select
import shutil
import socket
import struct
import tempfile
import time
import unittest
import xml.etree.ElementTree as ET

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, LarderCase

BUCKET = "clock-bucket"
IMF_FIXDATE = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d "
                         r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
                         r"\d\d:\d\d:\d\d GMT$")


def error_fields(body):
    root = ET.fromstring(body)
    return {child.tag: child.text for child in root}


class Dates(LarderCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.direct.put_object(Bucket=BUCKET, Key="obj", Body=b"0123456789")

    def request(self, method, path, headers=None):
        h = harness.sign_headers(method, self.larder.url + path, CLIENT_KEY, CLIENT_SECRET,
                                 headers)
        return harness.http_request(self.larder.url, method, path, h)

    def assertDateNow(self, headers, what):
        date = headers.get("date")
        self.assertIsNotNone(date, "%s: no Date header: %r" % (what, headers))
        self.assertRegex(date, IMF_FIXDATE, what)
        when = email.utils.parsedate_to_datetime(date)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.assertLess(abs((now - when).total_seconds()), 60, what)

    def test_cached_answers_carry_a_date(self):
        """RFC 9110 6.6.1: a server with a clock dates its 2xx, 3xx and 4xx
        answers, as S3 does; SDKs correct their clock skew by it and a cache
        in front computes ages from it. Answers from the cache had none."""
        path = "/%s/obj" % BUCKET
        st, h, _ = self.request("GET", path)
        self.assertEqual((st, h.get("x-larder-cache")), (200, "miss"))
        self.assertDateNow(h, "GET (miss)")
        etag = h["etag"]
        for what, method, extra, status in (
                ("GET (hit)", "GET", None, 200),
                ("HEAD", "HEAD", None, 200),
                ("ranged GET", "GET", {"Range": "bytes=2-4"}, 206),
                ("If-None-Match", "GET", {"If-None-Match": etag}, 304),
                ("If-Match", "GET", {"If-Match": '"nope"'}, 412)):
            with self.subTest(what=what):
                st, h, _ = self.request(method, path, extra)
                self.assertEqual(st, status)
                self.assertDateNow(h, what)
                self.assertEqual(len([1 for k in h if k == "date"]), 1)

    def test_skewed_request_names_both_times(self):
        """S3's RequestTimeTooSkewed carries RequestTime (as sent),
        ServerTime and MaxAllowedSkewMilliseconds."""
        when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=20)
        path = "/%s/obj" % BUCKET
        h = harness.sign_headers("GET", self.larder.url + path, CLIENT_KEY, CLIENT_SECRET,
                                 when=when)
        st, hdrs, body = harness.http_request(self.larder.url, "GET", path, h)
        self.assertEqual(st, 403, body)
        f = error_fields(body)
        self.assertEqual(f["Code"], "RequestTimeTooSkewed")
        self.assertEqual(f.get("RequestTime"), h["X-Amz-Date"], body)
        self.assertEqual(f.get("MaxAllowedSkewMilliseconds"), "900000", body)
        server = datetime.datetime.strptime(f.get("ServerTime") or "", "%Y-%m-%dT%H:%M:%SZ")
        server = server.replace(tzinfo=datetime.timezone.utc)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.assertLess(abs((now - server).total_seconds()), 60, body)
        self.assertDateNow(hdrs, "the error")


def build_timeshift(out_dir):
    """doubles/timeshift.c built into out_dir (harness.build_preload)."""
    return harness.build_preload("timeshift.c", out_dir)


class WallClockSteps(unittest.TestCase):
    """A step of the wall clock must neither close healthy connections nor
    keep slow ones open: the header deadline is a duration."""
    TIMEOUT = 4  # LARDER_CLIENT_TIMEOUT

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="larder-clock-")
        cls.shift_file = os.path.join(cls.tmp, "offset")
        with open(cls.shift_file, "wb") as f:
            f.write(b"\0" * 4096)
        try:
            lib = build_timeshift(cls.tmp)
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise
        cls.upstream = harness.Upstream().start()
        cls.larder = harness.Larder(cls.upstream, env={
            "LD_PRELOAD": lib, "TIMESHIFT_FILE": cls.shift_file,
            "LARDER_CLIENT_TIMEOUT": str(cls.TIMEOUT)})
        # An ASan build wants its runtime first among the libraries.
        cls.larder.env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
        try:
            cls.larder.start()
        except BaseException:
            cls.upstream.cleanup()
            cls.larder.cleanup()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            code = cls.larder.stop()
            cls.larder.check_sanitizers()
            if code != 0:
                raise AssertionError("larder exited %s; its log:\n%s" % (code, cls.larder.log()))
        finally:
            cls.larder.cleanup()
            cls.upstream.cleanup()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def shift(self, seconds):
        with open(self.shift_file, "r+b") as f:
            f.write(struct.pack("<q", int(seconds * 1e9)))

    def tearDown(self):
        self.shift(0)
        time.sleep(1.2)  # the deadline's next round sees the clock back

    def test_forward_step_keeps_a_request_in_progress(self):
        """An hour forward, in the middle of a request's headers: the
        request still gets its answer (it closed the connection)."""
        s = socket.create_connection(("127.0.0.1", self.larder.port), timeout=10)
        try:
            s.sendall(b"GET /%s/obj HTTP/1.1\r\nHost: x\r\n" % BUCKET.encode())
            time.sleep(0.5)
            self.shift(3600)
            time.sleep(2.5)  # more than two rounds of the deadline, within the timeout
            try:
                s.sendall(b"Connection: close\r\n\r\n")
                answer = s.recv(4096)
            except OSError as e:
                answer = repr(e).encode()
            # Anonymous: refused by larder itself, nothing reaches S3.
            self.assertTrue(answer.startswith(b"HTTP/1.1 403"), answer[:200])
        finally:
            s.close()

    def test_backward_step_still_ends_slow_headers(self):
        """An hour back: headers dribbled in a byte at a time are still cut
        off at LARDER_CLIENT_TIMEOUT (they were kept for the hour)."""
        s = socket.create_connection(("127.0.0.1", self.larder.port), timeout=10)
        try:
            s.sendall(b"GET /%s/obj HTTP/1.1\r\nHost: x\r\nX-Slow: " % BUCKET.encode())
            time.sleep(0.3)
            self.shift(-3600)
            start = time.monotonic()
            closed_after = None
            while time.monotonic() - start < 3 * self.TIMEOUT:
                try:
                    s.sendall(b"a")
                    ready, _, _ = select.select([s], [], [], 0.3)
                    gone = bool(ready) and s.recv(4096) == b""
                except OSError:
                    gone = True
                if gone:
                    closed_after = time.monotonic() - start
                    break
            self.assertIsNotNone(closed_after, "slow headers kept open past %ds"
                                 % (3 * self.TIMEOUT))
            self.assertLess(closed_after, self.TIMEOUT + 3)
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
