"""A node whose disk stalls must still stop serving what another node's write replaced.

A write's answer waits (at most about a second) until every node that heard its invalidation
acknowledged it; from then on S3 gives any reader the new version, so every node must too. The
invalidation also writes a tombstone to the NVMe tier and syncs it (so that a restart does not
bring the old metadata back), and a disk may take seconds to sync: node-1's does here
(doubles/syncstall.c delays each fsync of a file in its cache folder by what the test asks).
The node must forget the old version in memory first, at once, and let the tombstone follow;
so too for a purge posted to another node, which comes on the same channel.
"""
import os
import re
import shutil
import signal
import tempfile
import time

import harness
from test_cluster import ClusterBase

STALL_MS = 3000
# Held until the test ends the hold (a file appears), at most HOLD_MS: a hold of fixed length
# ended, on a busy machine, before the write that should have met it was published.
HOLD_KEY, HOLD_MS = "hold/acks", 30000


class ClusterStalledDisk(ClusterBase):
    NODES = 2
    NVME = True

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="larder-syncstall-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)  # after tearDownClass, or a failure
        cls.stall_file = os.path.join(cls.tmp, "stall-ms")
        cls.release_file = os.path.join(cls.tmp, "hold-released")
        cls.lib = harness.build_preload("syncstall.c", cls.tmp)
        cls.hold = harness.build_preload("logstall.c", cls.tmp)
        super().setUpClass()

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        if i == 1:
            # logstall: the thread that hears the other node's messages holds still
            # after it logs a purge of HOLD_KEY until release_file exists
            # (test_unacknowledged_...).
            n.env.update({"LD_PRELOAD": cls.lib + ":" + cls.hold,
                          "SYNCSTALL_FILE": cls.stall_file,
                          "SYNCSTALL_DIR": os.path.realpath(cls.cache_dirs[1]),
                          "LOGSTALL_MATCH": '"%s"' % HOLD_KEY, "LOGSTALL_MS": str(HOLD_MS),
                          "LOGSTALL_RELEASE": cls.release_file})
            # An ASan build wants its runtime first among the libraries.
            n.env["ASAN_OPTIONS"] = n.env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
        return n

    def stall(self, ms):
        with open(self.stall_file, "w") as f:
            f.write("%d\n" % ms)

    def tearDown(self):
        self.stall(0)

    def cached_everywhere(self, keys):
        for k in keys:
            self.direct.put_object(Bucket="shared", Key=k, Body=b"old " + k.encode())
            for n in self.nodes:
                self.assertEqual(self.read(n, k), b"old " + k.encode())

    def unacknowledged(self, node):
        """How many of node's writes went on without every acknowledgement."""
        text = self.metrics_text(node)
        m = re.search(r'^larder_cluster_invalidations_total\{direction="unacknowledged"\} '
                      r'(\d+)$', text, re.M)
        self.assertTrue(m, text)
        return int(m.group(1))

    def write_then_read(self, keys):
        """Each key written through node-0, then read through node-1 right after the answer:
        the keys node-1 served something else for, with what it served. Checks, after the
        caller's checks of those, that no write waited out the bound (1 s) on node-1's
        acknowledgement (node-0 counts those): sent once its memory forgot the key, not
        after its disk. Counted rather than timed: a loaded machine once took 2.4 s for a
        PUT whose acknowledgement had come."""
        writer, reader = self.nodes
        stale = []
        before = self.unacknowledged(writer)
        for k in keys:
            writer.client().put_object(Bucket="shared", Key=k, Body=b"new " + k.encode())
            got = self.read(reader, k)
            if got != b"new " + k.encode():
                stale.append((k, got))
        self.addCleanup(self.assertEqual, self.unacknowledged(writer) - before, 0,
                        "writes waited out their bound for node-1's acknowledgement")
        return stale

    def release_hold(self):
        open(self.release_file, "w").close()

    def test_unacknowledged_write_is_counted_and_said(self):
        # A node that does not apply an invalidation in time (its listening thread held
        # here, right after it heard a purge): the write's answer goes on after its
        # bound, and the writer counts and says it (before, it said nothing).
        writer, reader = self.nodes
        self.cached_everywhere(["counted/x"])
        self.addCleanup(self.release_hold)  # also when an assertion fails
        before = self.unacknowledged(writer)
        self.admin(writer, "POST", "/admin/purge", {"bucket": "shared", "key": HOLD_KEY})
        deadline = time.monotonic() + 10
        while HOLD_KEY not in self.nodes[1].log() and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        writer.client().put_object(Bucket="shared", Key="counted/x", Body=b"new")
        self.assertGreaterEqual(time.monotonic() - t0, 1.0)  # the bound was waited out
        self.assertEqual(self.unacknowledged(writer) - before, 1)
        self.assertIn("went on after waiting for the other nodes to apply its invalidation: "
                      "1 of 2 answered", writer.log())  # itself and not node-1
        self.release_hold()
        # node-1 hears again and applies what it missed.
        deadline = time.monotonic() + 10
        while self.read(reader, "counted/x") != b"new" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.read(reader, "counted/x"), b"new")

    def test_reads_after_a_write_while_the_disk_stalls(self):
        # Several writes in a row: the later ones arrive while the first's tombstone is
        # still being synced.
        keys = ["stall/%d" % i for i in range(3)]
        self.cached_everywhere(keys)
        self.stall(STALL_MS)
        stale = self.write_then_read(keys)
        self.assertEqual(stale, [], "node-1 served what writes through node-0 had replaced")

    def test_reads_after_a_purge_while_the_disk_stalls(self):
        # A purge posted to node-0 reaches node-1 on the same channel as the invalidations;
        # node-1 wrote and synced its tombstone on the thread that hears them, so the writes
        # after it waited out the bound for node-1's acknowledgement, and node-1 served the
        # old versions meanwhile.
        writer, reader = self.nodes
        keys = ["purged/%d" % i for i in range(3)]
        self.cached_everywhere(["other/p"] + keys)
        self.stall(STALL_MS)
        r = self.admin(writer, "POST", "/admin/purge", {"bucket": "shared", "prefix": "other/"})
        self.assertEqual(r["purged_objects"], 1)
        stale = self.write_then_read(keys)
        self.assertEqual(stale, [], "node-1 served what writes through node-0 had replaced")
        self.stall(0)
        # The purge was applied on node-1 too: it reads the object from S3 again.
        mark = self.upstream.mark()
        self.assertEqual(self.read(reader, "other/p"), b"old other/p")
        self.assertTrue(self.gets(mark, "other/p"), "node-1 did not purge other/p")

    def test_killed_before_its_tombstones_synced(self):
        # node-1 dies while the tombstones of what it already forgot are not on its disk yet;
        # started again, it must not serve the old versions from what its disk kept.
        keys = ["killed/%d" % i for i in range(3)]
        self.cached_everywhere(keys)
        self.stall(STALL_MS)
        stale = self.write_then_read(keys)
        reader = self.nodes[1]
        reader.signal(signal.SIGKILL)
        reader.proc.wait()
        self.stall(0)
        with open(os.path.join(self.cache_dirs[1], "tombstones.log"), "rb") as f:
            tombs = f.read()
        self.assertNotIn(keys[-1].encode(), tombs, "the disk stalled too little for this test")
        self.wait_members(1, timeout=30)
        reader.start()
        self.wait_members(2)
        for k in keys:
            got = self.read(reader, k)
            if got != b"new " + k.encode():
                stale.append((k, got))
        self.assertEqual(stale, [], "node-1 served what writes through node-0 had replaced")
