"""An access profile started on one node of a cluster records the reads every
node serves, in the order they began, and replays from that node.

Two nodes; the profile is started on node 0, the tagged job reads half its
objects through node 1 (interleaved with node 0); node 0's profile lists all
of them in read order; after purging both nodes, replaying it on node 0 fetches
them in that order, and the job's reads through node 1 then send no GET upstream.
"""
import random
import time

from test_cluster import ClusterBase, blob
from test_cluster_versions import Listener

KiB = 1024


class ClusterProfiles(ClusterBase):
    NODES = 2

    def profile(self, node, name):
        return next((p for p in self.admin(node, "GET", "/admin/profiles")["profiles"]
                     if p["name"] == name), None)

    def get(self, node, key, tag=None):
        c = node.client()
        if tag:
            c.meta.events.register("before-sign.s3.GetObject",
                                   lambda request, **kw: request.headers.add_header(
                                       "x-larder-job", tag))
        r = c.get_object(Bucket="shared", Key=key)
        r["Body"].read()
        return r["ResponseMetadata"]["HTTPHeaders"]

    def relay_started(self, listener, name):
        """Until node 1 has applied node 0's start of profile name (heard by listener): its
        relay records from then on. The start reaches it through Redis, a while after node 0
        answered; a read through node 1 before that is in no profile."""
        listener.wait_applied("node-0", "!profile",
                              lambda k: k.startswith("start\nnode-0\n%s\n" % name), by="node-1")

    def test_profile_records_every_nodes_reads(self):
        keys = ["cprof/%02d" % i for i in range(16)]
        for i, k in enumerate(keys):
            self.direct.put_object(Bucket="shared", Key=k, Body=blob(300 + i, 100 * KiB))
        listener = Listener(self.redis.port)
        self.addCleanup(listener.close)
        self.admin(self.nodes[0], "POST", "/admin/profiles", {"name": "cl", "tag": "job-c"})
        self.relay_started(listener, "cl")
        order = list(keys)
        random.Random(3).shuffle(order)
        for i, k in enumerate(order):
            self.get(self.nodes[i % 2], k, "job-c")
        self.get(self.nodes[1], order[0], "job-c")    # read again: no new entry

        deadline = time.monotonic() + 5
        while self.profile(self.nodes[0], "cl")["reads"] < 16 and time.monotonic() < deadline:
            time.sleep(0.1)
        self.admin(self.nodes[0], "POST", "/admin/profiles/cl/stop")
        self.assertEqual(self.profile(self.nodes[0], "cl"),
                         {"name": "cl", "recording": False, "tag": "job-c", "reads": 16,
                          "dropped": 0})
        self.assertIsNone(self.profile(self.nodes[1], "cl"))

        for n in self.nodes:
            self.admin(n, "POST", "/admin/purge", {"bucket": "shared", "prefix": "cprof/"})
        mark = self.upstream.mark()
        r = self.admin(self.nodes[0], "POST", "/admin/prefetch", {"profile": "cl", "concurrency": 1})
        deadline = time.monotonic() + 60
        while self.admin(self.nodes[0], "GET", "/admin/jobs/" + r["job"])["state"] != "done":
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        fetched = []
        for q in self.upstream.from_larder(mark):
            k = q["target"].split("?")[0][len("/shared/"):]
            if q["method"] == "GET" and k in keys and k not in fetched:
                fetched.append(k)
        self.assertEqual(fetched, order, "the replay did not follow the cluster-wide read order")

        mark = self.upstream.mark()
        for k in order:  # chunks node 0 owns come from it: a "miss" on node 1, but no GET
            self.get(self.nodes[1], k)
        self.assertEqual([q for q in self.upstream.from_larder(mark) if q["method"] == "GET"], [])

    def relayed_reads(self, action, settled):
        """The profile messages of reads published on Redis from before action runs until
        settled(listener) returns."""
        listener = Listener(self.redis.port)  # subscribed once this returns
        try:
            action()
            settled(listener)
        finally:
            listener.close()
        return [p for p in (m.split("\n", 4) for m in listener.messages)
                if len(p) == 5 and p[3] == "!profile" and p[4].startswith("read\n")]

    def node1_sent_all(self, listener):
        """Until whatever node 1 published so far has come: a purge through node 1 (of a
        prefix nothing is under) is published after it, and a node publishes in order (one
        queue, one connection to Redis), so once the purge has come the rest has too. A read
        is noted, and a relay's message queued, before its answer goes out (request.c)."""
        self.admin(self.nodes[1], "POST", "/admin/purge", {"bucket": "shared",
                                                           "prefix": "crelay-mark/"})
        listener.wait(lambda p: p[2] == "node-1" and p[3] == "!purge"
                      and p[4] == "pshared/crelay-mark/", "node 1's purge")

    def test_a_restarted_origin_ends_the_other_nodes_relays(self):
        # Node 0 stops (restart, crash) while recording: the stop never reaches node 1,
        # whose relay would go on recording (up to a million reads in its memory) and
        # sending every first read of the tag on Redis for a profile nobody records.
        keys = ["crelay/%02d" % i for i in range(3)]
        for i, k in enumerate(keys):
            self.direct.put_object(Bucket="shared", Key=k, Body=blob(500 + i, KiB))
        listener = Listener(self.redis.port)
        self.addCleanup(listener.close)
        self.admin(self.nodes[0], "POST", "/admin/profiles", {"name": "rs", "tag": "job-rs"})
        self.relay_started(listener, "rs")
        node = self.nodes[0]
        self.assertEqual(node.stop(), 0)
        node.start()
        self.wait_members(2)
        self.assertIsNone(self.profile(node, "rs"))
        # Node 1's relay sends its first read; node 0, which records no "rs" since its restart,
        # tells the relays to stop, and node 1 applies that.
        first = self.relayed_reads(
            lambda: self.get(self.nodes[1], keys[0], "job-rs"),
            lambda l: l.wait_applied("node-0", "!profile", lambda k: k == "stop\nnode-0\nrs",
                                     by="node-1"))
        self.assertEqual(len(first), 1, first)  # the relay's last: node 0 ends it
        later = self.relayed_reads(lambda: [self.get(self.nodes[1], k, "job-rs")
                                            for k in keys[1:]], self.node1_sent_all)
        self.assertEqual(later, [])
