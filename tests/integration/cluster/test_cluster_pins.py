"""A pin posted to one node of a cluster holds the chunks on their owners too.

Two nodes; a pinned warm job on node 0 fetches the chunks node 1 owns through
node 1, which pins them under a pin named node-0/JOB until the same time: both
nodes' stats show their share, node 1's pinned chunks stay through streaming,
and its pin ends at that time.

A pin ends by the wall clock: a test that must see a pin before it ends tries
a short one first and a longer one when the machine was too slow for it
(until_in_time), rather than failing or waiting out a long one every run.
"""
import time

from test_cluster import ClusterBase, blob, peer_headers

MiB = 1024 * 1024


class ClusterPins(ClusterBase):
    NODES = 2

    @classmethod
    def extra_env(cls):
        return {"LARDER_RAM_CACHE_SIZE": "64MiB", "LARDER_READAHEAD": "2"}

    def pins(self, node):
        st = self.admin(node, "GET", "/admin/stats")
        return st["pins"], st["cache"]["pinned_bytes"]

    def wait_job(self, node, job):
        deadline = time.monotonic() + 120
        while self.admin(node, "GET", "/admin/jobs/" + job)["state"] != "done":
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)

    def wait_no_pins(self, timeout=30):
        """Until neither node holds a pin; the time.time() when that was seen."""
        deadline = time.monotonic() + timeout
        while (self.pins(self.nodes[0])[0] or self.pins(self.nodes[1])[0]) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        gone = time.time()
        self.assertEqual((self.pins(self.nodes[0]), self.pins(self.nodes[1])), (([], 0), ([], 0)))
        return gone

    def until_in_time(self, attempt, what):
        """attempt(seconds) starts a pin of that many seconds, checks what it must while
        the pin lasts, and returns (until, the time.time() when its checks ended): tried
        with 5 s, then longer ones while the checks ended too near the pin's end to be
        sure it had not ended under them (a loaded machine). Returns that until."""
        for seconds in (5, 20, 80):
            until, checked = attempt(seconds)
            if checked < until - 1:
                return until
            self.wait_no_pins(seconds + 30)  # that pin's end, before the next one
        self.fail("%s: a pin of 80 s ran out before the test could look at it" % what)

    def test_pin_holds_chunks_on_their_owners(self):
        for i in range(20):
            self.direct.put_object(Bucket="shared", Key="pinset/%02d" % i, Body=blob(i, MiB))
        # Long enough for any machine: it is ended below, its end by its time is
        # test_an_owners_pin_ends_at_its_time's.
        r = self.admin(self.nodes[0], "POST", "/admin/prefetch",
                       {"bucket": "shared", "prefix": "pinset/", "pin_seconds": 3600})
        self.addCleanup(self.wait_no_pins)
        self.addCleanup(self.admin, self.nodes[0], "POST", "/admin/unpin", {"job": r["job"]})
        self.wait_job(self.nodes[0], r["job"])
        pins0, bytes0 = self.pins(self.nodes[0])
        self.assertEqual([(p["id"], p["bytes"]) for p in pins0], [(r["job"], 20 * MiB)])
        pins1, bytes1 = self.pins(self.nodes[1])
        # Node 1 owns about half of the 20 chunks (rendezvous hashing).
        self.assertEqual([p["id"] for p in pins1], ["node-0/" + r["job"]], pins1)
        self.assertTrue(2 * MiB <= bytes1 <= 18 * MiB, bytes1)
        self.assertEqual(bytes1, pins1[0]["bytes"])
        self.assertEqual(pins1[0]["until"], pins0[0]["until"])

        # Stream 160 MiB of other objects through node 1: its share stays.
        for i in range(20):
            self.direct.put_object(Bucket="shared", Key="other/%02d" % i, Body=blob(100 + i, 8 * MiB))
        for i in range(20):
            self.read(self.nodes[1], "other/%02d" % i)
        self.assertEqual(self.pins(self.nodes[1]), (pins1, bytes1))

    def test_an_owners_pin_ends_at_its_time(self):
        # The owner's pin ends at the pin's time, as the origin's does: not before.
        def attempt(seconds):
            prefix = "pinend%d/" % seconds  # cold: node 0 asks node 1 for its chunks
            for i in range(8):
                self.direct.put_object(Bucket="shared", Key="%s%02d" % (prefix, i),
                                       Body=blob(400 + i, MiB))
            r = self.admin(self.nodes[0], "POST", "/admin/prefetch",
                           {"bucket": "shared", "prefix": prefix, "pin_seconds": seconds})
            self.wait_job(self.nodes[0], r["job"])
            pins0, pins1 = self.pins(self.nodes[0])[0], self.pins(self.nodes[1])[0]
            checked = time.time()
            until = max([p["until"] for p in pins0 + pins1] or [0])
            if checked < until - 1:  # both were read while the pin lasted
                self.assertEqual([(p["id"], p["bytes"]) for p in pins0],
                                 [(r["job"], 8 * MiB)])
                self.assertEqual([(p["id"], p["until"]) for p in pins1],
                                 [("node-0/" + r["job"], pins0[0]["until"])])
                self.assertGreater(pins1[0]["bytes"], 0)
            return until, checked
        until = self.until_in_time(attempt, "test_an_owners_pin_ends_at_its_time")
        gone = self.wait_no_pins(until - time.time() + 30)
        self.assertGreaterEqual(gone, until - 1, "the pins ended before their time")

    def warm_pinned(self, node, prefix, n):
        for i in range(n):
            self.direct.put_object(Bucket="shared", Key="%s%02d" % (prefix, i), Body=blob(200 + i, MiB))
        r = self.admin(node, "POST", "/admin/prefetch",
                       {"bucket": "shared", "prefix": prefix, "pin_seconds": 600})
        self.wait_job(node, r["job"])
        return r["job"]

    def wait_pins(self, node, ids):
        deadline = time.monotonic() + 30
        while sorted(p["id"] for p in self.pins(node)[0]) != ids and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.pins(node)

    def test_unpin_ends_the_owners_holds(self):
        a = self.warm_pinned(self.nodes[0], "unpin-a/", 10)
        b = self.warm_pinned(self.nodes[0], "unpin-b/", 10)
        pins1, bytes1 = self.pins(self.nodes[1])
        self.assertEqual(sorted(p["id"] for p in pins1), sorted(["node-0/" + a, "node-0/" + b]))
        held_b = [p["bytes"] for p in pins1 if p["id"] == "node-0/" + b][0]
        self.assertGreater(held_b, 0)
        self.assertGreater(bytes1, 0)

        # By job id: node 1 lets go of that pin's chunks within seconds.
        self.assertEqual(self.admin(self.nodes[0], "POST", "/admin/unpin", {"job": a}),
                         {"unpinned": 1})
        pins1, ram1 = self.wait_pins(self.nodes[1], ["node-0/" + b])
        self.assertEqual([(p["id"], p["bytes"]) for p in pins1], [("node-0/" + b, held_b)])
        self.assertLess(ram1, bytes1)

        # By prefix: the same.
        self.assertEqual(self.admin(self.nodes[0], "POST", "/admin/unpin",
                                    {"bucket": "shared", "prefix": "unpin-"}), {"unpinned": 1})
        self.assertEqual(self.wait_pins(self.nodes[1], []), ([], 0))
        self.assertEqual(self.pins(self.nodes[0]), ([], 0))

    def test_unpin_while_its_job_runs_leaves_no_hold_on_the_owner(self):
        # The job went on fetching with its pin header after the unpin, so each owner
        # pinned again what it fetched later, until the pin's time (up to 30 days of its
        # pin room), and no unpin on the posting node could end that any more.
        for i in range(12):
            self.direct.put_object(Bucket="shared", Key="midjob/%02d" % i, Body=blob(300 + i, MiB))
        r = self.admin(self.nodes[0], "POST", "/admin/prefetch",
                       {"bucket": "shared", "prefix": "midjob/", "pin_seconds": 600,
                        "concurrency": 1, "bandwidth_bytes_per_second": 4 * MiB})
        deadline = time.monotonic() + 30
        while self.admin(self.nodes[0], "GET", "/admin/jobs/" + r["job"])["bytes_done"] < 3 * MiB:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(self.admin(self.nodes[0], "POST", "/admin/unpin", {"job": r["job"]}),
                         {"unpinned": 1})
        deadline = time.monotonic() + 60
        while True:
            info = self.admin(self.nodes[0], "GET", "/admin/jobs/" + r["job"])
            if info["state"] != "warming":
                break
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        self.assertEqual((info["state"], info["objects_done"]), ("done", 12), info)
        self.assertLess(info["elapsed_seconds"], 600)
        # The announcement's way through Redis: a hold left behind lasts 600 s.
        self.wait_no_pins()

    def test_a_chunk_asked_twice_by_a_peer_counts_once(self):
        """A pinned job's peer may ask the owner for one chunk more than once
        (a retry, two readers): the owner's pin holds it once, bytes and all."""
        node = self.nodes[1]
        self.direct.put_object(Bucket="shared", Key="twice/x.bin", Body=blob(300, 3 * MiB))
        target = "127.0.0.1:%d" % node.port
        nonces = iter("%032x" % i for i in range(1, 100))

        def attempt(seconds):
            until = int(time.time()) + seconds
            job = "pf-twice%d" % seconds
            for _ in range(3):
                h = peer_headers("/shared/twice/x.bin", "node-0", target, next(nonces), hop="2",
                                 rng="bytes=0-%d" % (3 * MiB - 1),
                                 pin="node-0/%s %d" % (job, until))
                st, body = self.raw_get(node, "/shared/twice/x.bin", h)
                self.assertEqual((st, len(body)), (206, 3 * MiB))
            pins, pinned = self.pins(node)
            checked = time.time()
            if checked < until - 1:  # all three asked, and looked at, while it lasted
                self.assertEqual([(p["id"], p["bytes"]) for p in pins],
                                 [("node-0/" + job, 3 * MiB)])
                self.assertEqual(pinned, 3 * MiB)
            return until, checked
        until = self.until_in_time(attempt, "test_a_chunk_asked_twice_by_a_peer_counts_once")
        self.wait_no_pins(until - time.time() + 30)
