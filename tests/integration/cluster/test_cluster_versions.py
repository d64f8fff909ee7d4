"""Nodes of two larder versions side by side, as a rolling upgrade runs them.

A Kubernetes DaemonSet or StatefulSet upgrades one pod at a time, so for minutes the cluster holds
nodes of the old version and of the new. Each node writes the cluster protocol it speaks in its
membership entry (docs/cluster.md, "Rolling upgrades"); a node of another protocol, or of none (a
larder from before the field), is no member: no read is routed to it and no write waits for its
acknowledgement. The old node is simulated at the protocol level (its membership entry written by
the test, its subscriber a redis-cli that never acknowledges), since the suite cannot build an
older larder.
"""
import time

from test_cluster import ClusterBase, blob
from test_cluster_partition import Heartbeat
from test_trust_cluster import Rogue

MiB = 1024 * 1024


class ClusterRollingUpgrade(ClusterBase):
    """Two nodes of this version and an older node (simulated) in one Redis."""
    NODES = 2

    def setUp(self):
        # An older node's entry (no protocol field), at an address that closes every
        # connection; capacity 1e30: were it a member, it would own every chunk.
        self.closer = Rogue(close=True)
        self.addCleanup(self.closer.close)
        self.old = Heartbeat(self.redis_cli, "old-0", "127.0.0.1:%d" % self.closer.port, "1e30",
                             protocol=None)
        self.old.start()
        self.addCleanup(self.old.stop)

    def wait_listed(self):
        for n in self.nodes:
            self.wait_view(n, lambda v: [(o["id"], o["address"])
                                         for o in v.get("other_protocol", [])]
                           == [("old-0", self.old.addr)], "old-0 listed apart")

    def seen(self):
        """Until every node has read old-0's entry (as a member or not): two heartbeats."""
        time.sleep(2.2)

    def test_an_older_node_is_asked_nothing(self):
        # Were it a member it would own every chunk: before, each node sent it each first
        # read, which failed, and read S3 then. Listed apart, in the view and the log.
        self.seen()
        data = blob(71, 3 * MiB + 9)
        self.direct.put_object(Bucket="shared", Key="roll/r.bin", Body=data)
        for n in self.nodes:
            self.assertEqual(self.read(n, "roll/r.bin"), data)
        self.assertEqual(self.closer.hits, 0, "a request went to the node of another protocol")
        self.wait_listed()
        for n in self.nodes:
            v = self.view(n)
            self.assertEqual(sorted(m["id"] for m in v["members"]), ["node-0", "node-1"], v)
            self.assertEqual(v["other_protocol"], [{"id": "old-0", "protocol": 1,
                                                    "address": self.old.addr}], v)
            self.assertEqual(v["protocol"], 2, v)
            self.assertRegex(n.log(), r"node old-0 \(127\.0\.0\.1:\d+\) speaks cluster "
                             r"protocol 1, this node 2")
