"""An owner's pins for another node's job survive the owner's restart.

Two nodes, each with its own LARDER_CACHE_DIR; a pinned warm job on node 0
makes node 1 pin its share under node-0/JOB. Node 1 restarted shows that pin
again, with its bytes and time; an unpin on node 0 ends it there, and a
second restart does not bring it back.
"""
import glob
import os

import test_cluster_pins
from test_cluster import ClusterBase

MiB = 1024 * 1024


class ClusterPinsRestart(ClusterBase):
    NODES = 2
    pins = test_cluster_pins.ClusterPins.pins
    wait_pins = test_cluster_pins.ClusterPins.wait_pins
    warm_pinned = test_cluster_pins.ClusterPins.warm_pinned
    wait_job = test_cluster_pins.ClusterPins.wait_job

    NVME = True

    @classmethod
    def extra_env(cls):
        return {"LARDER_RAM_CACHE_SIZE": "64MiB", "LARDER_READAHEAD": "2"}

    def restart_owner(self):
        self.restart(1)

    def restart(self, i):
        node = self.nodes[i]
        self.assertEqual(node.stop(), 0)
        node.start()
        self.wait_members(2)

    def test_a_job_id_names_one_job_across_restarts(self):
        # Job ids began at pf-1 on every start. A node that lost its pins (its pin files
        # gone: a new disk, or no cache folder) named its next pinned job as an old one
        # whose pin its peer still held: the peer added the new job's chunks to the old
        # pin, to end at the old pin's time, and an unpin of either ended both (audit
        # round 8).
        self.restart(0)
        old = self.warm_pinned(self.nodes[0], "reused-a/", 6)
        self.assertEqual(self.admin(self.nodes[0], "GET", "/admin/jobs/" + old)["bucket"],
                         "shared")
        held = {p["id"]: p["until"] for p in self.pins(self.nodes[1])[0]}
        self.assertIn("node-0/" + old, held)
        self.assertEqual(self.nodes[0].stop(), 0)
        for f in glob.glob(os.path.join(self.cache_dirs[0], "pins", "*.json")):
            os.unlink(f)
        self.nodes[0].start()
        self.wait_members(2)
        new = None
        try:
            new = self.warm_pinned(self.nodes[0], "reused-b/", 6)
            self.assertNotEqual(new, old, "a job id was given again after a restart")
            # The peer holds the new pin apart from the old, until the new pin's time.
            until = self.pins(self.nodes[0])[0][0]["until"]
            pins1 = {p["id"]: p["until"] for p in self.pins(self.nodes[1])[0]}
            self.assertEqual(pins1, {"node-0/" + old: held["node-0/" + old],
                                     "node-0/" + new: until})
            # Ending the new pin leaves the old one.
            self.admin(self.nodes[0], "POST", "/admin/unpin", {"job": new})
            self.assertEqual([p["id"] for p in self.wait_pins(self.nodes[1],
                                                              ["node-0/" + old])[0]],
                             ["node-0/" + old])
        finally:
            for node, job in ((0, new), (1, "node-0/" + old)):
                try:
                    if job:
                        self.admin(self.nodes[node], "POST", "/admin/unpin", {"job": job})
                except OSError:
                    pass  # ended already
        self.assertEqual(self.wait_pins(self.nodes[1], []), ([], 0))

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
