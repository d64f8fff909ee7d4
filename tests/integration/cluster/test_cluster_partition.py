"""A member that the network has cut off, as loopback can show it.

A host cut off from the other nodes (a partition, a cable, a host powered off while its entry
lives on for its 5 s) takes no connection: its SYNs vanish. The other nodes must not wait
LARDER_UPSTREAM_TIMEOUT (30 s) for a connection to it. Loopback has no packet filter for a test
that is not root, but a listener whose accept queue is full drops SYNs the same way (Linux, with
tcp_abort_on_overflow off, the default): that is the member's address here, and its membership
entry, signed with the cluster secret, is kept alive by the test.
"""
import os
import socket
import subprocess
import threading
import time

import harness
from test_cluster import SECRET, TOKEN, ClusterBase, blob
from test_trust_cluster import CLUSTER_PROTOCOL, member_value


class SynDrop:
    """A listening socket whose accept queue is full: further SYNs are dropped."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fillers = []
        for _ in range(2):  # listen(0) queues one; the next connect must hang
            c = socket.socket()
            c.settimeout(0.5)
            try:
                c.connect(("127.0.0.1", self.port))
            except OSError:
                pass
            self.fillers.append(c)

    def drops_syns(self):
        c = socket.socket()
        c.settimeout(1.0)
        try:
            c.connect(("127.0.0.1", self.port))
            return False
        except socket.timeout:
            return True
        except OSError:
            return False
        finally:
            c.close()

    def close(self):
        for c in self.fillers:
            c.close()
        self.sock.close()


class Heartbeat:
    """Keeps a signed membership entry for node_id at addr alive, as a node of protocol does
    (None: a larder from before the protocol field)."""

    def __init__(self, redis_cmd, node_id, addr, cap, protocol=CLUSTER_PROTOCOL):
        self.redis_cmd, self.id, self.addr, self.cap = redis_cmd, node_id, addr, cap
        self.protocol = protocol
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def beat(self):
        val = member_value(self.addr, self.cap, 0, int(time.time() * 1000) + 5000, SECRET,
                           self.id, self.protocol)
        self.redis_cmd("SET", "larder:node:" + self.id, val, "PX", "5000")
        self.redis_cmd("SADD", "larder:nodes", self.id)

    def run(self):
        while not self.stop_ev.wait(1.0):
            self.beat()

    def start(self):
        self.beat()
        self.thread.start()

    def stop(self):
        self.stop_ev.set()
        self.thread.join(5)
        self.redis_cmd("DEL", "larder:node:" + self.id)


class ClusterUnreachableMember(ClusterBase):
    """A member that takes no connection (its address drops SYNs) but stays in the membership:
    the chunks it owns come from S3 after a short connect timeout, not after 30 s."""
    NODES = 2

    def redis_cmd(self, *args):
        return self.redis_cli(*args)

    def test_reads_do_not_wait_out_the_upstream_timeout_to_connect(self):
        hole = SynDrop()
        self.addCleanup(hole.close)
        if not hole.drops_syns():
            self.skipTest("a full accept queue does not drop SYNs on this kernel")
        # Its capacity makes it the owner of nearly every key.
        ghost = Heartbeat(self.redis_cmd, "ghost", "127.0.0.1:%d" % hole.port, "1e15")
        ghost.start()
        self.addCleanup(ghost.stop)
        self.wait_view(self.nodes[0], lambda v: "ghost" in [m["id"] for m in v["members"]],
                       "the ghost did not join")
        keys = ["unreachable/%d" % i for i in range(4)]
        bodies = {k: blob(900 + i, 300 * 1024 + i) for i, k in enumerate(keys)}
        for k, b in bodies.items():
            self.direct.put_object(Bucket="shared", Key=k, Body=b)
        out = {}

        def read(k):
            t0 = time.monotonic()
            r = harness.signed_request(self.nodes[0].url, "GET", "/shared/" + k, timeout=60)
            out[k] = (time.monotonic() - t0, r.status, r.body == bodies[k])

        threads = [threading.Thread(target=read, args=(k,)) for k in keys]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        self.assertIn("owner node failed", self.nodes[0].log(), "no key owned by the ghost")
        for k in keys:
            took, status, right = out[k]
            self.assertEqual((status, right), (200, True), k)
            # Before: 30 s (the upstream timeout) each, the connect never ended sooner.
            self.assertLess(took, 12, "%s waited %.1f s to connect to the ghost" % (k, took))


class Silent:
    """A listener that takes every connection and never answers a byte."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        self.stop_ev = threading.Event()
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_ev.is_set():
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                pass

    def close(self):
        self.stop_ev.set()
        self.thread.join(5)
        for c in self.held:
            c.close()
        self.sock.close()


class ClusterSilentMember(ClusterBase):
    """A member that stays listed and takes connections but answers nothing (its heartbeat
    alive beside wedged workers, a one-way partition): a fetch from it gives up after the
    peer stall timeout, and the next ones go past it for a while instead of each waiting
    LARDER_UPSTREAM_TIMEOUT (30 s) again."""
    NODES = 2

    @classmethod
    def extra_env(cls):
        # The peer stall bound is the upstream slot wait + 10 s: 11 s here (15 by default).
        return {"LARDER_UPSTREAM_SLOT_WAIT_MS": "1000"}

    def redis_cmd(self, *args):
        return self.redis_cli(*args)

    def test_one_wait_then_reads_go_past_it(self):
        hole = Silent()
        self.addCleanup(hole.close)
        addr = "127.0.0.1:%d" % hole.port
        ghost = Heartbeat(self.redis_cmd, "silent", addr, "1e15")  # owns nearly every key
        ghost.start()
        self.addCleanup(ghost.stop)
        self.wait_view(self.nodes[0], lambda v: "silent" in [m["id"] for m in v["members"]],
                       "the silent member did not join")
        keys = ["silent/%d" % i for i in range(4)]
        bodies = {k: blob(950 + i, 200 * 1024 + i) for i, k in enumerate(keys)}
        for k, b in bodies.items():
            self.direct.put_object(Bucket="shared", Key=k, Body=b)
        took, got = {}, {}

        def read(k):
            t0 = time.monotonic()
            r = harness.signed_request(self.nodes[0].url, "GET", "/shared/" + k, timeout=45)
            took[k] = time.monotonic() - t0
            got[k] = (r.status, r.body == bodies[k])

        read(keys[0])  # waits for the silent node: 30 s before (the upstream stall timeout)
        self.assertLess(took[keys[0]], 20, "waited %.1f s for the silent node" % took[keys[0]])
        self.assertIn("answered nothing", self.nodes[0].log())
        # The others at once, within the 10 s the node is gone past: none waits for it.
        threads = [threading.Thread(target=read, args=(k,)) for k in keys[1:]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(got, {k: (200, True) for k in keys})
        self.assertLess(max(took[k] for k in keys[1:]), 5, "after one wait, reads still "
                        "waited: %r" % took)
        v = self.view(self.nodes[0])
        silent = [m for m in v["members"] if m["id"] == "silent"][0]
        self.assertGreater(silent["avoided_seconds"], 0, silent)
        out = subprocess.run([harness.larder_binary(), "cluster", "--admin",
                              "http://127.0.0.1:%d" % self.nodes[0].admin_port],
                             env=dict(os.environ, LARDER_ADMIN_TOKEN=TOKEN),
                             capture_output=True, timeout=30)
        rows = {r.split("\t")[0]: r.split("\t") for r in out.stdout.decode().splitlines()}
        self.assertGreater(float(rows["silent"][5]), 0, rows)


if __name__ == "__main__":
    import unittest
    unittest.main()
