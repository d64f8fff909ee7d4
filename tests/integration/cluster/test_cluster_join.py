"""A node that hears the invalidation channel before the other nodes count it as a member.

A write's answer waits until every member Redis delivered its invalidation to acknowledged it;
a node that subscribed but is not in the writer's member list yet (it joins: its membership
entry is written at its first heartbeat and read by the others at theirs, a second or two) is
not waited for. If that node applied the invalidation late, a read sent to it after the
answer got the version the write replaced. Here node-1's membership writes are refused (Redis
ACL, -set) while it subscribes, and its listening thread is held right after it logs a purge
heard from node-0 (doubles/logstall.c), so that the invalidations which follow the purge are
applied late: reads and listings through node-1 must not be served from what it trusted.

While it may not be counted (docs/cluster.md, "the read barrier"), a read through node-1 first
waits until node-1 applied what Redis had pushed to it before the read came (a PING on its
subscribed connection, answered after those messages), at most 1 s; past that it revalidates.
"""
import os
import re
import shutil
import tempfile
import threading
import time

import harness
from test_cluster import ClusterBase


class ClusterJoinerNotYetCounted(ClusterBase):
    NODES = 2

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="larder-join-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.lib = harness.build_preload("logstall.c", cls.tmp)
        super().setUpClass()

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        if i == 1:
            user = "node-1"
            cls.redis_cli("ACL", "SETUSER", user, "on", ">pw-" + user, "~*", "&*", "+@all")
            n.env["LARDER_REDIS_URL"] = "redis://%s:pw-%s@127.0.0.1:%d" % (
                user, user, cls.redis.port)
            n.env.update({"LD_PRELOAD": cls.lib, "LOGSTALL_MATCH": "from another node"})
            n.env["ASAN_OPTIONS"] = n.env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
            n.write_config("[bucket shared]\nlist_cache_ttl = 60\n")
            n.env["LARDER_CONFIG"] = n.config_path
        return n

    def listed(self, node, prefix):
        r = node.client().list_objects_v2(Bucket="shared", Prefix=prefix)
        return [o["Key"] for o in r.get("Contents", [])]

    def barriers(self, node):
        """(waited, lapsed): reads that waited for the read barrier, and of those, reads that
        gave up on it, from GET /admin/cluster and /metrics (between two reads: they agree)."""
        b = self.view(node)["read_barriers"]
        got = dict(re.findall(r'^larder_cluster_read_barriers_total\{result="(\w+)"\} (\d+)$',
                              self.metrics_text(node), re.M))
        self.assertEqual({k: int(v) for k, v in got.items()},
                         {"passed": b["waited"] - b["lapsed"], "lapsed": b["lapsed"]})
        return b["waited"], b["lapsed"]

    def rejoin_refused(self, stall_ms, release=""):
        """node-1 starts again and subscribes, but Redis refuses its membership entry: node-0
        does not count it (as in the heartbeat or two after a node joins). Its listening
        thread will be held stall_ms after the next purge it hears from node-0, or until the
        file release exists."""
        writer, joiner = self.nodes
        self.assertEqual(joiner.stop(), 0)
        self.wait_members(1)
        self.redis_cli("ACL", "SETUSER", "node-1", "-set")
        self.addCleanup(self.redis_cli, "ACL", "SETUSER", "node-1", "+set")
        joiner.env["LOGSTALL_MS"] = str(stall_ms)
        joiner.env["LOGSTALL_RELEASE"] = release
        joiner.start()
        self.wait_view(joiner, lambda v: v["subscribed"] and v["joining"],
                       "node-1 did not subscribe")
        self.assertEqual(len(self.view(writer)["members"]), 1)

    def write_behind_a_held_thread(self, prefix, stall_ms, release=None):
        """Reads and lists prefix through node-1 (trusted and kept), then holds node-1's
        listening thread with a purge and writes through node-0, which does not wait for
        node-1. Checks what node-1 served then; returns when the hold began. With release
        (the hold's release file), the hold ends 0.2 s after the read was sent."""
        writer, joiner = self.nodes
        key = prefix + "k"
        self.direct.put_object(Bucket="shared", Key=key, Body=b"old")
        self.assertEqual(self.read(joiner, key), b"old")
        self.assertEqual(self.read(joiner, key), b"old")  # trusted (immutable)
        self.assertEqual(self.listed(joiner, prefix), [key])
        self.assertEqual(self.listed(joiner, prefix), [key])  # kept (list_cache_ttl)
        t0 = time.monotonic()
        r = self.admin(writer, "POST", "/admin/purge", {"bucket": "shared", "prefix": "other/"})
        self.assertEqual(r["purged_objects"], 0)
        writer.client().put_object(Bucket="shared", Key=key, Body=b"new")
        writer.client().put_object(Bucket="shared", Key=key + "2", Body=b"added")
        wrote = time.monotonic() - t0
        self.assertLess(wrote, stall_ms / 1e3, "too slow for this test: node-1 heard the writes")
        if release:
            ends = threading.Timer(0.2, lambda: open(release, "w").close())
            ends.start()
            self.addCleanup(ends.cancel)
        got = {"read": self.read(joiner, key), "listed": self.listed(joiner, prefix)}
        self.assertEqual(got, {"read": b"new", "listed": [key, key + "2"]})
        return t0

    def test_reads_wait_for_the_held_thread(self):
        """Held until 0.2 s after the read was sent (however long the writes took): the read
        and the listing wait until node-1 applied the writes' messages (the barrier passes
        within its 1 s bound), and are fresh without revalidating."""
        release = os.path.join(self.tmp, "release-held")
        self.rejoin_refused(30000, release)
        joiner = self.nodes[1]
        waited, lapsed = self.barriers(joiner)
        self.write_behind_a_held_thread("held/", 30000, release)
        waited_now, lapsed_now = self.barriers(joiner)
        self.assertGreaterEqual(waited_now - waited, 6, "every read and listing waited")
        self.assertEqual(lapsed_now, lapsed, "none gave up: the barrier passed")

    def test_reads_past_the_bound_revalidate(self):
        """Held until both are done: the read and the listing give up after 1 s, and ask S3.
        (Held 4 s before: on a busy machine the writes took long enough that the hold ended
        while the listing waited, and it did not give up.)"""
        release = os.path.join(self.tmp, "release-late")
        self.addCleanup(lambda: open(release, "w").close())  # also when an assertion fails
        self.rejoin_refused(30000, release)
        joiner = self.nodes[1]
        _, lapsed = self.barriers(joiner)
        self.write_behind_a_held_thread("late/", 30000)
        # Both were fresh (write_behind_a_held_thread), and both gave up on the barrier.
        self.assertEqual(self.barriers(joiner)[1] - lapsed, 2, "the read and the listing")
        # The hold ends: node-1 applies the writes' messages (it forgets late/k once more).
        open(release, "w").close()
        self.assertEqual(self.read(joiner, "late/k"), b"new")
        # Let in, it joins. For three heartbeats after its entry landed (node-0 reads it at its
        # next), each read through it waits for the barrier, asking S3 nothing; then no more.
        self.redis_cli("ACL", "SETUSER", "node-1", "+set")
        self.wait_members(2)
        self.assertEqual(self.view(joiner)["read_barriers"]["lapsed"], lapsed + 2)
        waited = self.barriers(joiner)[0]
        mark = self.upstream.mark()
        for _ in range(2):
            self.assertEqual(self.read(joiner, "late/k"), b"new")
        self.assertEqual(self.gets(mark, "late/k"), [], "reads in the first heartbeats")
        self.assertEqual(self.barriers(joiner)[0] - waited, 2)
        self.wait_view(joiner, lambda v: not v["joining"], "node-1 still joining", timeout=5)
        waited = self.barriers(joiner)[0]
        self.assertEqual(self.read(joiner, "late/k"), b"new")
        self.assertEqual(self.barriers(joiner)[0], waited, "reads once node-0 counts node-1")
