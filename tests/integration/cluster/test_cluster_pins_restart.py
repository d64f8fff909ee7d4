"""An owner's pins for another node's job survive the owner's restart.

Two nodes, each with its own LARDER_CACHE_DIR; a pinned warm job on node 0
makes node 1 pin its share under node-0/JOB. Node 1 restarted shows that pin
again, with its bytes and time; an unpin on node 0 ends it there, and a
second restart does not bring it back.
"""
import test_cluster_pins
from test_cluster import ClusterBase

MiB = 1024 * 1024


class ClusterPinsRestart(ClusterBase):
    NODES = 2
    pins = test_cluster_pins.ClusterPins.pins
    wait_pins = test_cluster_pins.ClusterPins.wait_pins
    warm_pinned = test_cluster_pins.ClusterPins.warm_pinned

    NVME = True

    @classmethod
    def extra_env(cls):
        return {"LARDER_RAM_CACHE_SIZE": "64MiB", "LARDER_READAHEAD": "2"}

    def restart_owner(self):
        node = self.nodes[1]
        self.assertEqual(node.stop(), 0)
        node.start()
        self.wait_members(2)

    def test_an_owners_pin_survives_its_restart(self):
        job = self.warm_pinned(self.nodes[0], "held/", 20)
        pins1, _ = self.pins(self.nodes[1])
        self.assertEqual([p["id"] for p in pins1], ["node-0/" + job], pins1)
        held = (pins1[0]["bytes"], pins1[0]["until"])
        self.assertGreater(held[0], 0)

        self.restart_owner()
        pins1, _ = self.pins(self.nodes[1])
        self.assertEqual([(p["id"], p["bytes"], p["until"]) for p in pins1],
                         [("node-0/" + job,) + held])
        self.assertIn("pin node-0/%s restored" % job, self.nodes[1].log())

        # Ended on the posting node, it ends on the owner, for good.
        self.assertEqual(self.admin(self.nodes[0], "POST", "/admin/unpin", {"job": job}),
                         {"unpinned": 1})
        self.assertEqual(self.wait_pins(self.nodes[1], []), ([], 0))
        self.restart_owner()
        self.assertEqual(self.pins(self.nodes[1]), ([], 0))
