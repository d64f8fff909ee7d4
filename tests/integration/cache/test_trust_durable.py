"""What larder's NVMe tier remembers across a restart: invalidations (writes and
deletes through larder, admin purges) stay done, recovery keeps only the newest
version of each object, a read meeting many corrupt chunks is refetched whole,
and entries cut to another chunk size are not served.

Each test restarts larder on the same LARDER_CACHE_DIR, by SIGTERM (a clean
stop) and by kill -9, against a moto upstream. Chunk size is 1 MiB.
"""
import base64
import glob
import hashlib
import http.client
import json
import os
import subprocess
import tempfile
import time
import unittest
import urllib.request

import harness
import test_cluster
from test_admin import admin_request
from test_cache import BUCKET, CacheCase, MiB, blob, etag_of, request

TOKEN = "durable-test-token-0123456789abcdef"


def send(base, method, path, headers=None, body=b""):
    """A signed request with a body: (status, body)."""
    h = harness.sign_headers(method, base + path, harness.CLIENT_KEY, harness.CLIENT_SECRET,
                             headers, body)
    host, port = base.replace("http://", "").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def seg_files(cache_dir):
    return sorted(glob.glob(os.path.join(cache_dir, "seg-*.log")))


def find_in_segments(cache_dir, needle):
    """Every (path, offset) of needle in the segment files."""
    out = []
    for p in seg_files(cache_dir):
        with open(p, "rb") as f:
            buf = f.read()
        i = buf.find(needle)
        while i >= 0:
            out.append((p, i))
            i = buf.find(needle, i + 1)
    return out


def probes_of(data):
    """A 64-byte piece of every 1 MiB chunk (or the whole of a small object)."""
    pieces = [data[i:i + MiB] for i in range(0, len(data), MiB)]
    return [p[min(1000, max(0, len(p) - 64)):][:64] for p in pieces]


class DurableCase(CacheCase):
    """CacheCase (a private cache directory, 1 MiB chunks) with an admin port;
    restart() keeps both."""
    ADMIN_PORT = harness.free_port()
    EXTRA_ENV = {
        "LARDER_DISK_CACHE_SIZE": "256MiB",
        "LARDER_METADATA_TTL": "3600",
        "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % ADMIN_PORT,
        "LARDER_ADMIN_TOKEN": TOKEN,
    }

    def restart(self, kill=False):
        """Stops larder (SIGTERM and a clean exit, or kill -9) and starts it
        again on the same cache directory."""
        if kill:
            self.larder.proc.kill()
            self.larder.proc.wait()
        else:
            self.assertEqual(self.larder.stop(), 0, self.larder.log()[-3000:])
        san = self.larder.sanitizer_text()
        self.assertEqual(san, "", san[:5000])
        self.larder.start()
        self.assertTrue(harness.wait_port(self.ADMIN_PORT, 10))

    def get(self, key):
        return request(self.larder.url, "GET", harness.key_path(BUCKET, key))

    def write(self, key, data):
        status, body = send(self.larder.url, "PUT", harness.key_path(BUCKET, key), body=data)
        self.assertEqual(status, 200, body)

    def delete(self, key):
        status, body = send(self.larder.url, "DELETE", harness.key_path(BUCKET, key))
        self.assertEqual(status, 204, body)

    def cached(self, key, data):
        """Reads key through larder until its chunks are in a segment file."""
        r = self.get(key)
        self.assertEqual((r.status, r.complete), (200, True), r)
        self.assertTrue(r.body == data, "read of %s before the restart" % key)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(find_in_segments(self.cache_dir, p) for p in probes_of(data)):
                return
            time.sleep(0.05)
        self.fail("%s never reached the NVMe tier" % key)

    def assertServes(self, key, data, what):
        r = self.get(key)
        self.assertEqual((r.status, r.complete), (200, True), "%s: %r" % (what, r))
        self.assertTrue(r.body == data, "%s: %s read back as another version (etag %s, want %s)"
                        % (what, key, r.headers.get("etag"), etag_of(data)))


class DurableInvalidations(DurableCase):

    def overwrite_many(self, tag, kill, read_new):
        keys = ["%s/%02d" % (tag, i) for i in range(12)]
        new = {}
        for i, k in enumerate(keys):
            old = blob(1000 + i, 3000 + i)
            self.write(k, old)
            self.cached(k, old)
            new[k] = blob(2000 + i, 4000 + i)
            self.write(k, new[k])
            if read_new:
                self.cached(k, new[k])
        self.restart(kill=kill)
        for k in keys:
            self.assertServes(k, new[k], "after the restart")

    def test_overwrite_then_read_survives_sigterm(self):
        # Both versions' chunk 0 are on disk: the newest must win.
        self.overwrite_many("ow-read", kill=False, read_new=True)

    def test_overwrite_unread_survives_kill9(self):
        # Only the old version is on disk: the overwrite itself must be remembered.
        self.overwrite_many("ow-unread", kill=True, read_new=False)

    def test_delete_survives_restart(self):
        data = blob(3, 2 * MiB + 17)
        self.write("del/a", data)
        self.cached("del/a", data)
        self.delete("del/a")
        self.restart()
        r = self.get("del/a")
        self.assertEqual(r.status, 404, "a deleted object came back after a restart: %r" % r)
        self.assertNotEqual(r.cache, "hit", r)

    def test_delete_objects_survives_restart(self):
        data = blob(4, 5000)
        self.write("multi/a", data)
        self.cached("multi/a", data)
        body = ("<Delete><Object><Key>multi/a</Key></Object></Delete>").encode()
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        status, resp = send(self.larder.url, "POST", "/%s?delete" % BUCKET,
                            {"Content-MD5": md5, "Content-Type": "application/xml"}, body)
        self.assertEqual(status, 200, resp)
        self.restart(kill=True)
        r = self.get("multi/a")
        self.assertEqual(r.status, 404, "an object deleted by DeleteObjects came back: %r" % r)

    def test_purge_survives_restart(self):
        # Changed upstream behind larder's back, purged, restarted: the new version.
        old, new = blob(5, 3 * MiB), blob(6, 3 * MiB)
        self.direct.put_object(Bucket=BUCKET, Key="purge/p", Body=old)
        self.cached("purge/p", old)
        self.direct.put_object(Bucket=BUCKET, Key="purge/p", Body=new)
        status, _, body = admin_request(self.ADMIN_PORT, "POST", "/admin/purge", TOKEN,
                                        json.dumps({"bucket": BUCKET, "prefix": "purge/"}))
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["purged_objects"], 1)
        self.restart()
        self.assertServes("purge/p", new, "after a purge and a restart")

    def test_write_after_delete_is_kept(self):
        # A tombstone hides only what is older than itself.
        v1, v2 = blob(7, 1500), blob(8, 2500)
        self.write("again/k", v1)
        self.cached("again/k", v1)
        self.delete("again/k")
        self.write("again/k", v2)
        self.cached("again/k", v2)
        self.restart()
        m = self.upstream.mark()
        r = self.get("again/k")
        self.assertEqual((r.status, r.cache, r.body == v2), (200, "hit", True), r)
        self.assertEqual(self.upstream.count(m), 0)


    def test_multipart_parts_write_no_tombstones(self):
        # Only the completion changes the object: its two tombstones (one
        # before it goes upstream, one when S3 answered), none per part
        # (each is an fdatasync on the worker).
        tombs = os.path.join(self.cache_dir, "tombstones.log")
        size0 = os.path.getsize(tombs)
        s3 = self.larder.client()
        key = "mp/obj"
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        parts = []
        for n in (1, 2, 3):
            body = blob(40 + n, 5 * MiB if n < 3 else 1000)
            e = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=up, PartNumber=n, Body=body)
            parts.append({"PartNumber": n, "ETag": e["ETag"]})
        s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up,
                                     MultipartUpload={"Parts": parts})
        self.assertEqual(os.path.getsize(tombs) - size0, 2 * (24 + len(BUCKET) + len(key)))


class ManyCorruptChunks(DurableCase):

    def test_more_than_three_corrupt_chunks_are_refetched(self):
        data = blob(9, 12 * MiB + 123)
        self.direct.put_object(Bucket=BUCKET, Key="rot/six", Body=data)
        self.cached("rot/six", data)
        self.assertEqual(self.larder.stop(), 0)
        hit = 0
        for p in probes_of(data):
            for path, off in find_in_segments(self.cache_dir, p):
                with open(path, "r+b") as f:
                    f.seek(off + 7)
                    b = f.read(1)
                    f.seek(off + 7)
                    f.write(bytes([b[0] ^ 0xA5]))
                hit += 1
        self.assertGreaterEqual(hit, 13, "every chunk of the object corrupted on disk")
        self.larder.start()
        m = self.upstream.mark()
        r = self.get("rot/six")
        self.assertEqual((r.status, r.complete), (200, True), r)
        self.assertTrue(r.body == data, "the whole object, byte-exact")
        self.assertGreaterEqual(self.upstream.count(m), 13, "the corrupt chunks were refetched")


class ChunkSizeChange(DurableCase):
    """A chunk is found by its id, (bucket, key, ETag, index): under another
    LARDER_CHUNK_SIZE an index names other bytes of the object, and the
    NVMe entries cut to the old size must not be served."""

    def test_restart_with_another_chunk_size_serves_the_right_bytes(self):
        # Three 1 MiB chunks; at 2 MiB chunk 1 is bytes [2, 3) MiB, as long
        # as chunk 1 at 1 MiB ([1, 2) MiB). Read at each size in turn.
        data = blob(31, 3 * MiB)
        self.direct.put_object(Bucket=BUCKET, Key="cut/three", Body=data)
        self.cached("cut/three", data)
        try:
            for size in ("2MiB", "1MiB"):
                self.larder.env["LARDER_CHUNK_SIZE"] = size
                self.restart()
                r = request(self.larder.url, "GET", harness.key_path(BUCKET, "cut/three"),
                            {"Range": "bytes=%d-%d" % (2 * MiB, 3 * MiB - 1)})
                self.assertEqual(r.status, 206, r)
                self.assertTrue(r.body == data[2 * MiB:],
                                "the last MiB after a restart with %s chunks" % size)
                self.assertServes("cut/three", data, "after a restart with %s chunks" % size)
                self.cached("cut/three", data)
            self.assertIn("every entry is discarded", self.larder.log())
        finally:
            self.larder.env["LARDER_CHUNK_SIZE"] = "1MiB"


class FullCacheFileSystem(DurableCase):
    """A write through larder is acknowledged once S3 took it; its tombstone
    must then be on disk even when the cache's file system is full (another
    tenant, logs), else a restart gives the old version back. The cache
    directory is on a 16 MiB tmpfs of its own (needs root to mount)."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("mounting a tmpfs needs root")
        cls.mnt = tempfile.mkdtemp(prefix="larder-full-")
        if subprocess.call(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", cls.mnt]) != 0:
            os.rmdir(cls.mnt)
            raise unittest.SkipTest("cannot mount a tmpfs here")
        cls.EXTRA_ENV = dict(DurableCase.EXTRA_ENV, LARDER_CACHE_DIR=os.path.join(cls.mnt, "c"),
                             LARDER_DISK_CACHE_SIZE="4MiB", LARDER_METADATA_TTL="immutable")
        try:
            super().setUpClass()
        except BaseException:
            cls.unmount()
            raise
        cls.cache_dir = cls.EXTRA_ENV["LARDER_CACHE_DIR"]

    @classmethod
    def unmount(cls):
        subprocess.call(["umount", cls.mnt])
        os.rmdir(cls.mnt)

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.unmount()

    def test_write_on_a_full_file_system_survives_restart(self):
        # Written straight to S3: no tombstone yet, so the file has no page
        # a new one could share.
        old, new = blob(41, 3000), blob(42, 3000)
        self.direct.put_object(Bucket=BUCKET, Key="full/a", Body=old)
        self.cached("full/a", old)
        filler = self.fill()
        try:
            self.write("full/a", new)  # S3 took it: acknowledged
        finally:
            os.unlink(filler)
        self.restart()
        self.assertServes("full/a", new, "after a restart")
        self.assertNotIn("writing a tombstone", self.larder.log())


    def fill(self):
        """Fills the tmpfs; returns the filler's path (remove it to undo)."""
        filler = os.path.join(self.mnt, "filler")
        try:
            with open(filler, "wb") as f:
                for _ in range(16 * 16 + 1):  # 64 KiB at a time, past 16 MiB
                    f.write(b"\0" * 65536)
                    f.flush()
            self.fail("the tmpfs never filled")
        except OSError:
            pass
        return filler

    def start_log_with_size(self, size):
        """The log of a start with LARDER_DISK_CACHE_SIZE=size; larder is
        then started again with the class's 4 MiB."""
        self.larder.stop()
        self.larder.env["LARDER_DISK_CACHE_SIZE"] = size
        try:
            self.larder.start()
            self.assertTrue(harness.wait_port(self.ADMIN_PORT, 10), self.larder.log()[-3000:])
            return self.larder.log()
        finally:
            self.larder.stop()
            self.larder.env["LARDER_DISK_CACHE_SIZE"] = "4MiB"
            self.larder.start()
            self.assertTrue(harness.wait_port(self.ADMIN_PORT, 10))

    def test_tier_larger_than_its_file_system_is_said(self):
        # LARDER_DISK_CACHE_SIZE past what the file system holds was taken
        # without a word: the tier filled it, then switched itself off.
        # Since 2026-11-30 the tier is cut to fit (store/disk.c, fit_file_system).
        self.assertRegex(self.start_log_with_size("64MiB"), r"warn .*LARDER_DISK_CACHE_SIZE is "
                         r"67108864 bytes, but its file system has room for \d+ .*: the tier "
                         r"uses \d+")
        self.assertNotIn("LARDER_DISK_CACHE_SIZE is", self.larder.log())

    def test_tier_that_fits_its_file_system_is_not_warned(self):
        # The check ran after the start had preallocated the head segment
        # (a quarter of the size, up to 64 MiB): those blocks counted as
        # taken, and a 13 MiB tier on the 16 MiB file system (room for it
        # and the tombstones' 1 MiB) was told to shrink.
        self.assertNotIn("LARDER_DISK_CACHE_SIZE is", self.start_log_with_size("13MiB"))

    def test_start_on_a_full_file_system(self):
        # A start rewrites tombstones.log without the records no entry needs
        # any more: on a full file system that failed, and larder exited 2
        # (a pod would crash-loop until someone freed space). The rewrite
        # only saves space: the file is kept as it is.
        self.write("full/unneeded", b"x")  # a tombstone older than any entry
        old, new = blob(43, 3000), blob(44, 3000)
        self.direct.put_object(Bucket=BUCKET, Key="full/b", Body=old)
        self.cached("full/b", old)
        self.write("full/b", new)
        self.assertEqual(self.larder.stop(), 0, self.larder.log()[-3000:])
        filler = self.fill()
        try:
            self.larder.start()
            self.assertTrue(harness.wait_port(self.ADMIN_PORT, 10), self.larder.log()[-3000:])
            self.assertServes("full/b", new, "after a restart on a full file system")
            self.assertIn("kept as it is", self.larder.log())
        finally:
            os.unlink(filler)


class DurableClusterInvalidation(test_cluster.ClusterBase):
    """Two nodes with NVMe tiers: an invalidation a node receives from the
    other one survives its restart."""
    NODES = 2
    NVME = True

    def received(self, node):
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % node.admin_port,
                                     headers={"Authorization": "Bearer " + test_cluster.TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith('larder_cluster_invalidations_total{direction="received"}'):
                    return float(line.split()[-1])
        return 0.0

    def test_received_invalidation_survives_restart(self):
        old, new = blob(50, 4000), blob(51, 4100)
        self.direct.put_object(Bucket="shared", Key="dur/x", Body=old)
        reader = self.nodes[1]
        self.assertEqual(self.read(reader, "dur/x"), old)
        deadline = time.monotonic() + 20
        while not find_in_segments(self.cache_dirs[1], old[1000:1064]):
            self.assertLess(time.monotonic(), deadline, "never reached node 1's NVMe tier")
            time.sleep(0.05)
        before = self.received(reader)
        self.nodes[0].client().put_object(Bucket="shared", Key="dur/x", Body=new)
        deadline = time.monotonic() + 10
        while self.received(reader) <= before:
            self.assertLess(time.monotonic(), deadline, "node 1 never heard of the write")
            time.sleep(0.05)
        self.assertEqual(reader.stop(), 0)
        reader.start()
        self.wait_members(2)
        self.assertEqual(self.read(reader, "dur/x"), new,
                         "the old version came back on the node that was told of the write")


if __name__ == "__main__":
    unittest.main()
