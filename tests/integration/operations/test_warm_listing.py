"""Warming a prefix whose ListObjectsV2 pages come from a scripted origin.

What an operator sees: `POST /admin/prefetch {"bucket", "prefix"}` lists
the prefix page by page; when upstream answers pages that would make the
listing go on for ever, the job fails with a message saying why, instead
of listing (and holding more keys) until larder runs out of memory.
"""
import shutil
import tempfile
import unittest
from xml.sax.saxutils import escape

import harness
from admin_calls import AdminCalls
from fault_origin import FaultOrigin
from test_cache_faults import fetch, larder_env, start_larder

TOKEN = "warm-listing-test-token"
BUCKET = "lst"


def page(keys, truncated, token=None):
    """A ListObjectsV2 answer listing keys (each 3 bytes long)."""
    contents = "".join("<Contents><Key>%s</Key><Size>3</Size></Contents>" % escape(k)
                       for k in keys)
    nxt = ("<NextContinuationToken>%s</NextContinuationToken>" % escape(token)
           if token is not None else "")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult>'
            "<Name>%s</Name><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys>"
            "<IsTruncated>%s</IsTruncated>%s%s</ListBucketResult>"
            % (BUCKET, len(keys), "true" if truncated else "false", contents, nxt))


class WarmListing(AdminCalls, unittest.TestCase):
    ADMIN_TOKEN = TOKEN

    @classmethod
    def setUpClass(cls):
        cls.origin = FaultOrigin().start()
        for i in range(6):
            cls.origin.put(BUCKET, "d/%d" % i, b"abc")
        cls.cache_dir = tempfile.mkdtemp(prefix="larder-warm-listing-")
        port = harness.free_port()
        cls.admin = "http://127.0.0.1:%d" % port
        try:
            cls.larder = start_larder(cls.origin, larder_env(
                cls.cache_dir, LARDER_ADMIN_LISTEN="127.0.0.1:%d" % port,
                LARDER_ADMIN_TOKEN=TOKEN))
        except BaseException:
            cls.origin.stop()
            shutil.rmtree(cls.cache_dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            code = cls.larder.stop()
            san = cls.larder.sanitizer_text()
            if code != 0 or san:
                raise AssertionError("larder exit %r on SIGTERM; log tail:\n%s\n%s"
                                     % (code, cls.larder.log()[-3000:], san[:20000]))
        finally:
            cls.larder.cleanup()
            cls.origin.stop()
            shutil.rmtree(cls.cache_dir, ignore_errors=True)

    def warm(self, prefix):
        st, r = self.call("POST", "/admin/prefetch", {"bucket": BUCKET, "prefix": prefix})
        self.assertEqual(st, 202, r)
        self.addCleanup(self.call, "DELETE", "/admin/jobs/" + r["job"])  # one left listing
        return self.wait_job(r["job"], timeout=30)

    def test_upstream_trouble_is_not_a_refusal(self):
        """A bucket check that upstream could not answer (503 SlowDown, a 500) is refused as
        upstream's trouble, 503 or 502 upstream_unavailable, which a retry may get past; it
        was 403 bucket_unreadable, as if larder's credentials could not read the bucket."""
        body = {"bucket": BUCKET, "keys": ["d/0"]}
        for status, code, want in ((503, "SlowDown", 503), (500, "InternalError", 502)):
            self.origin.fail_next(1, status=status, code=code, methods=("HEAD",), bucket=BUCKET)
            st, r = self.call("POST", "/admin/prefetch", body)
            self.assertEqual((st, r.get("error")), (want, "upstream_unavailable"), r)
            self.assertIn("upstream answered %d" % status, r.get("message", ""), r)
        st, r = self.call("POST", "/admin/prefetch", body)  # the retry
        self.assertEqual(st, 202, r)
        self.assertEqual(self.wait_job(r["job"], timeout=30)["state"], "done")
        self.origin.fail_next(1, status=403, code="AccessDenied", message="Access Denied",
                              methods=("HEAD",), bucket=BUCKET)
        st, r = self.call("POST", "/admin/prefetch", body)
        self.assertEqual((st, r.get("error")), (403, "bucket_unreadable"), r)

    def test_paged_listing_warms_every_page(self):
        def pages(q):
            at = int(q.get("continuation-token", "0"))
            keys = ["d/%d" % i for i in (2 * at, 2 * at + 1)]
            return page(keys, at < 2, str(at + 1) if at < 2 else None)
        self.origin.list_pages[BUCKET] = pages
        info = self.warm("d/")
        self.assertEqual((info["state"], info["objects_done"],
                                             info["errors"]), ("done", 6, 0), info)

    def test_an_object_replaced_since_its_listing_is_warmed_whole(self):
        # The listing (paged as the job goes: it may be minutes old) said 3 bytes; the object is
        # 3 MiB now. Only chunk 0 was warmed, and the job said done with bytes_done past
        # bytes_total; the next read went upstream.
        data = bytes(range(256)) * (3 * 4096)
        self.origin.put(BUCKET, "g/grown", data)
        self.origin.list_pages[BUCKET] = lambda q: page(["g/grown"], False)
        info = self.warm("g/")
        self.assertEqual((info["state"], info["errors"], info["bytes_done"], info["bytes_total"]),
                         ("done", 0, len(data), len(data)), info)
        m = self.origin.mark()
        r = fetch(self.larder.url, "GET", harness.key_path(BUCKET, "g/grown"))
        self.assertEqual((r.status, r.body == data, r.cache), (200, True, "hit"))
        self.assertEqual(self.origin.requests(m, "GET", bucket=BUCKET), [])

    def test_a_continuation_token_that_comes_back_fails_the_job(self):
        for cycle in (["same"], ["t1", "t2", "t3"]):
            def pages(q, cycle=cycle):
                at = q.get("continuation-token")
                nxt = cycle[(cycle.index(at) + 1) % len(cycle)] if at else cycle[0]
                return page(["d/0", "d/1"], True, nxt)
            self.origin.list_pages[BUCKET] = pages
            info = self.warm("d/")
            self.assertEqual(info["state"], "failed", info)
            self.assertIn("continuation token it gave before", info["error"])


    def test_a_truncated_page_without_a_token_fails_the_job(self):
        # S3 always says where to go on: without that, the rest of the prefix
        # would go unwarmed while the job said "done".
        for token in (None, ""):
            self.origin.list_pages[BUCKET] = lambda q, token=token: \
                page(["d/0", "d/1"], True, token)
            info = self.warm("d/")
            self.assertEqual(info["state"], "failed", info)
            self.assertIn("truncated page without a NextContinuationToken", info["error"])


if __name__ == "__main__":
    unittest.main()
