"""A 1 GiB object through larder, both ways, with bounded larder memory.

The bound: larder's peak memory (VmHWM plus the peak of the chunk bytes it keeps
in a memfd, which RSS does not show) must stay under PEAK_RSS_LIMIT: the RAM
tier's size (LARDER_RAM_CACHE_SIZE, 32 MiB here) plus 64 MiB, which covers the
chunks being fetched ahead of the reader (LARDER_READAHEAD x 8 MiB) and the
process's own baseline. It is measured on the plain build (jemalloc), the one
users run: under ASan the quarantine alone keeps up to 256 MiB of freed buffers
resident, which says nothing about larder. Streaming means memory independent
of object size; buffering a 1 GiB body would exceed the bound many times over.
"""
import hashlib
import os
import tempfile
import time
import unittest

from harness import Larder, LarderCase

MiB = 1024 * 1024
SIZE = 1024 * MiB
RAM_TIER = 32 * MiB
PEAK_RSS_LIMIT = RAM_TIER + 64 * MiB


def write_test_file(path, size):
    """Writes size bytes: a random 1 MiB block, each MiB stamped with its index
    so no two MiB are equal; returns the sha256. Memory: one block."""
    block = bytearray(os.urandom(MiB))
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(size // MiB):
            block[:8] = i.to_bytes(8, "big")
            f.write(block)
            h.update(block)
    return h.hexdigest()


class Large(LarderCase):
    PLAIN_BUILD = True
    # Every wait is larder's and the client's shipped one: the test double
    # reads only the range a GET asks for (moto_upstream.py), so moto no
    # longer takes seconds per chunk of a 1 GiB object.
    LARDER_ENV = dict({"LARDER_RAM_CACHE_SIZE": "32MiB"}, **Larder.admin_env())

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3.create_bucket(Bucket="large")
        cls.tmp = tempfile.mkdtemp(prefix="larder-large-")
        cls.path = os.path.join(cls.tmp, "one-gib.bin")
        cls.sha = write_test_file(cls.path, SIZE)
        # moto hashes and stores the whole GiB before it answers the PUT:
        # seconds on a quiet machine, past botocore's 30 s read timeout once
        # on a loaded one. larder's own bound on that wait
        # (LARDER_UPSTREAM_TIMEOUT, 30 s of no progress) is what the test
        # keeps; the client waits longer than it.
        cls.big = cls.larder.client(read_timeout=120)

    @classmethod
    def tearDownClass(cls):
        try:
            os.unlink(cls.path)
            os.rmdir(cls.tmp)
        except OSError:
            pass
        super().tearDownClass()

    def test_1gib_put_and_get(self):
        t0 = time.monotonic()
        with open(self.path, "rb") as f:
            put = self.big.put_object(Bucket="large", Key="big/one-gib.bin", Body=f)
        t_put = time.monotonic() - t0
        head = self.direct.head_object(Bucket="large", Key="big/one-gib.bin")
        self.assertEqual(head["ContentLength"], SIZE)
        self.assertEqual(head["ETag"], put["ETag"])
        rss_after_put = self.larder.peak_memory()

        t0 = time.monotonic()
        got = self.big.get_object(Bucket="large", Key="big/one-gib.bin")
        self.assertEqual(got["ContentLength"], SIZE)
        h, n = hashlib.sha256(), 0
        for chunk in got["Body"].iter_chunks(MiB):
            h.update(chunk)
            n += len(chunk)
        t_get = time.monotonic() - t0
        self.assertEqual(n, SIZE)
        self.assertEqual(h.hexdigest(), self.sha)
        peak = self.larder.peak_memory()
        print("\n    1 GiB: PUT %.1fs, GET %.1fs; larder peak memory %.0f MiB after PUT, %.0f MiB "
              "after GET (limit %d MiB)" % (t_put, t_get, rss_after_put / MiB, peak / MiB,
                                            PEAK_RSS_LIMIT // MiB), flush=True)
        self.assertLess(rss_after_put, PEAK_RSS_LIMIT, "larder buffered the upload")
        self.assertLess(peak, PEAK_RSS_LIMIT, "larder buffered the download")


if __name__ == "__main__":
    unittest.main()
