"""A node that hears the invalidation channel before the other nodes count it as a member.

A write's answer waits until every member Redis delivered its invalidation to acknowledged it;
a node that subscribed but is not in the writer's member list yet (it joins: its membership
entry is written at its first heartbeat and read by the others at theirs, a second or two) is
not waited for. If that node applied the invalidation late, a read sent to it after the
answer got the version the write replaced. Here node-1's membership writes are refused (Redis
ACL, -set) while it subscribes, and its listening thread is held right after it logs a purge
heard from node-0 (doubles/logstall.c), so that the invalidations which follow the purge are
applied late: reads and listings through node-1 must not be served from what it trusted.
"""
import shutil
import tempfile
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

    def rejoin_refused(self, stall_ms):
        """node-1 starts again and subscribes, but Redis refuses its membership entry: node-0
        does not count it (as in the heartbeat or two after a node joins). Its listening
        thread will be held stall_ms after the next purge it hears from node-0."""
        writer, joiner = self.nodes
        self.assertEqual(joiner.stop(), 0)
        self.wait_members(1)
        self.redis_cli("ACL", "SETUSER", "node-1", "-set")
        self.addCleanup(self.redis_cli, "ACL", "SETUSER", "node-1", "+set")
        joiner.env["LOGSTALL_MS"] = str(stall_ms)
        joiner.start()
        self.wait_view(joiner, lambda v: v["subscribed"], "node-1 did not subscribe")
        self.assertEqual(len(self.view(writer)["members"]), 1)

    def write_behind_a_held_thread(self, prefix, stall_ms):
        """Reads and lists prefix through node-1 (trusted and kept), then holds node-1's
        listening thread with a purge and writes through node-0, which does not wait for
        node-1. Checks what node-1 served then; returns when the hold began."""
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
        got = {"read": self.read(joiner, key), "listed": self.listed(joiner, prefix)}
        self.assertEqual(got, {"read": b"new", "listed": [key, key + "2"]})
        return t0

    def test_reads_while_the_thread_is_held_briefly(self):
        """Held 0.8 s."""
        self.rejoin_refused(800)
        self.write_behind_a_held_thread("held/", 800)

    def test_reads_while_the_thread_is_held_long(self):
        """Held 4 s."""
        self.rejoin_refused(4000)
        self.write_behind_a_held_thread("late/", 4000)
