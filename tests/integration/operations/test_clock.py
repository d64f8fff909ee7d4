"""Time as larder tells it: the Date every answer carries, what a
RequestTimeTooSkewed names."""
import datetime
import email.utils
import re
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


if __name__ == "__main__":
    unittest.main()
