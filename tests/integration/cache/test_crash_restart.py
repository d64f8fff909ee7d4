"""Crash consistency of the NVMe tier: larder killed (kill -9) at chosen
moments, then started again on the same LARDER_CACHE_DIR, must never serve
an object S3 no longer holds.

The origin is fault_origin.FaultOrigin (it can apply a write and answer it
late); chunk size is 1 MiB, as in test_cache_faults.
"""
import os
import threading
import time
import unittest

import harness
from test_cache_faults import BUCKET, NvmeCase, blob, finish_larder, md5_etag, wait_on_disk


class CrashRestart(NvmeCase):

    def slow_write(self, larder, method, key, body):
        """Starts a write through larder whose client sends its headers and
        the first half of its body only: larder has begun the write (and
        written its tombstone), S3 has not applied it. Returns the socket
        and the rest of the body."""
        half = len(body) // 2
        s = harness.signed_socket(larder, method, harness.key_path(BUCKET, key), body=body,
                                  sent=half)
        return s, body[half:]

    def test_read_during_a_write_that_a_crash_cut_short_is_not_served_after_it(self):
        # A PUT through larder writes its tombstone when it begins; S3 applies
        # it only once the whole body is in, which for a large upload (or a
        # multipart completion) takes a while. A cold read meanwhile learns
        # the old version from S3, and its chunk 0 (with that version's
        # metadata) reaches NVMe with a generation newer than the tombstone.
        # If larder dies after S3 applied the write but before it heard the
        # answer (whose tombstone would cover that chunk), the restart served
        # the old version, for ever with immutable metadata.
        key = "cut-short"
        v1, v2 = blob(61, 300000), blob(62, 200000)
        self.origin.put(BUCKET, key, v1)
        a = self.start(LARDER_METADATA_TTL="immutable")
        sock, rest = self.slow_write(a, "PUT", key, v2)
        gate = threading.Event()
        try:
            # Its tombstone is written before the PUT goes upstream.
            tombs = os.path.join(self.cache_dir, "tombstones.log")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and os.path.getsize(tombs) == 0:
                time.sleep(0.02)
            self.assertGreater(os.path.getsize(tombs), 0, "the PUT never began")
            r = self.get(a, key)
            self.assertEqual((r.status, r.headers.get("etag")), (200, md5_etag(v1)), r)
            self.assertTrue(wait_on_disk(self.cache_dir, [v1[1000:1064]]),
                            "v1's chunk 0 never reached the NVMe tier: the test proves nothing")
            # S3 applies the PUT and answers it only once larder is dead.
            m = self.origin.mark()
            self.origin.answer_after_next(methods=("PUT",), key=key, gate=gate)
            sock.sendall(rest)
            self.assertIsNotNone(self.origin.wait_request(BUCKET, key, since=m, method="PUT",
                                                          timeout=60), "the PUT never came")
            self.assertEqual(self.origin.get(BUCKET, key).data, v2, "S3 never applied the PUT")
            a.proc.kill()
            a.proc.wait()
        finally:
            gate.set()
            sock.close()
        b = self.start(LARDER_METADATA_TTL="immutable")
        r = self.get(b, key)
        self.assertEqual((r.status, r.complete), (200, True), r)
        self.assertEqual(r.headers.get("etag"), md5_etag(v2),
                         "the restart served the version S3 had replaced")
        self.assertTrue(r.body == v2)
        finish_larder(self, b)


if __name__ == "__main__":
    unittest.main()
