"""What the cluster does when Redis itself misbehaves: restarts, lockouts, errors.

Redis holds membership, the placement directory and the invalidation channel.
Losing any of it must cost only hints: every node keeps serving the bytes of
the version S3 has once it hears (or revalidates) a write through another node.
"""
import itertools
import os
import shutil
import struct
import subprocess
import tempfile
import time

from test_admin import admin_request, metric, parse_metrics
from test_clock import build_timeshift
from test_cluster import TOKEN, ClusterBase


class ClusterResyncOwnerLate(ClusterBase):
    """After a Redis outage the nodes subscribe again one by one (each backs off on its own). A
    node that subscribes again revalidates everything it caches; if it asks the object's owner,
    and the owner has not subscribed again yet, the owner still trusts the version a write
    through a third node replaced while neither listened, answers 304, and the reader keeps that
    old version for ever (LARDER_METADATA_TTL=immutable), even after the owner revalidates its
    own. Nodes 1 (reader) and 2 (owner) talk to Redis as their own users, so the test can keep
    their subscribers out and let them back in one at a time."""

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        if i in (1, 2):
            user = "node-%d" % i
            cls.redis_cli("ACL", "SETUSER", user, "on", ">pw-" + user, "~*", "&*", "+@all")
            n.env["LARDER_REDIS_URL"] = "redis://%s:pw-%s@127.0.0.1:%d" % (
                user, user, cls.redis.port)
        return n

    def lock_out(self, node, user):
        self.redis_cli("ACL", "SETUSER", user, "-subscribe")
        self.redis_cli("CLIENT", "KILL", "USER", user, "TYPE", "pubsub")
        self.wait_view(node, lambda v: not v["subscribed"], user + " still subscribed")

    def let_in(self, node, user):
        before = self.view(node)["resyncs"]
        self.redis_cli("ACL", "SETUSER", user, "+subscribe")
        self.wait_view(node, lambda v: v["subscribed"] and v["resyncs"] > before,
                       user + " did not subscribe again")

    def missed_then_read(self, prefix, warm):
        """Objects cached by the nodes in warm; node 0 replaces those node 2 owns while neither
        node 1 nor node 2 listens; node 1 listens again and reads them, then node 2 listens
        again and node 1 reads them once more. Every read must give the new version."""
        writer, reader, owner = self.nodes
        keys = [prefix + "%d" % i for i in range(12)]
        for k in keys:
            self.direct.put_object(Bucket="shared", Key=k, Body=b"old " + k.encode())
            for n in warm:
                self.assertEqual(self.read(n, k), b"old " + k.encode())
        # The keys node 2 owns: another node asked it for them.
        owned = sorted({r.get("key") for r in owner.access_records()
                        if r.get("key_id", "").startswith("peer:") and r.get("key") in keys})
        self.assertTrue(owned, "node 2 owns none of the keys")
        try:
            self.lock_out(reader, "node-1")
            self.lock_out(owner, "node-2")
            self.wait_members(3, subscribed=False)
            sent = self.view(writer)["invalidations_sent"]
            for k in owned:
                writer.client().put_object(Bucket="shared", Key=k, Body=b"new " + k.encode())
            self.wait_view(writer, lambda v: v["invalidations_sent"] >= sent + len(owned),
                           "node-0 did not publish")
            # The reader listens again first; the owner has not yet.
            self.let_in(reader, "node-1")
            self.wait_members(3, subscribed=False)
            for k in owned:
                self.assertEqual(self.read(reader, k), b"new " + k.encode(), k)
            self.let_in(owner, "node-2")
            for k in owned:
                self.assertEqual(self.read(reader, k), b"new " + k.encode(), k)
                self.assertEqual(self.read(owner, k), b"new " + k.encode(), k)
        finally:
            for user in ("node-1", "node-2"):
                self.redis_cli("ACL", "SETUSER", user, "+subscribe")

    def test_reader_that_resubscribes_first_does_not_learn_the_old_version(self):
        self.missed_then_read("late/", self.nodes)

    def test_reader_that_never_had_the_object_does_not_learn_the_old_version(self):
        """The same, for a node that had not read the objects: it has nothing to revalidate, and
        learns them from their owner, which must not answer from what it trusted before it
        stopped listening."""
        self.missed_then_read("cold/", (self.nodes[2], self.nodes[0]))


class ClusterLookupsAfterRefusal(ClusterBase):
    """A directory lookup connection that Redis refused (a wrong password: Redis restarted
    without the password it was given by CONFIG SET, until an operator sets it again) must not
    stay refused once Redis takes the password again: the lookups would fail for as long as the
    connection lives, and every chunk a holder has would be fetched from S3 again. Redis never
    closes such a connection itself. The lookups' connections are dropped here while the
    heartbeat's stay, as when Redis restarts and a lookup reconnects before the next heartbeat
    sees the loss."""
    NODES = 2
    REDIS_PASSWORD = "pw-first-0123456789abcdef"
    OTHER = "pw-other-0123456789abcdef"

    def cli(self, password, *args):
        out = subprocess.run(["redis-cli", "--no-auth-warning", "-a", password,
                              "-p", str(self.redis.port)] + list(args),
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 0, out)
        return out.stdout.strip()

    def cold_reads(self, prefix, n):
        for i in range(n):
            k = "%s/%d" % (prefix, i)
            self.direct.put_object(Bucket="shared", Key=k, Body=b"x" * 10)
            for node in self.nodes:
                self.assertEqual(self.read(node, k), b"x" * 10)

    def lookups(self):
        return [self.view(n)["directory"]["lookups"] for n in self.nodes]

    def cold_reads_until(self, prefix, done, timeout=30):
        """Rounds of cold_reads (prefix/ROUND/...) until done() holds. A lookup connection
        lost is opened again by the first lookup a second after (RECONNECT_S, placement.c);
        until then lookups are skipped, so it is a lookup that shows whether it came back
        and how it was answered, not the time passed."""
        deadline = time.monotonic() + timeout
        for i in itertools.count():
            self.cold_reads("%s/%d" % (prefix, i), 6)
            if done():
                return
            self.assertLess(time.monotonic(), deadline, "%s: %r" % (prefix, self.lookups()))

    def test_lookups_work_again_once_redis_takes_the_password(self):
        self.cold_reads("before", 6)
        self.assertTrue(all(c["none"] > 0 and c["failed"] == 0 for c in self.lookups()),
                        self.lookups())
        self.cli(self.REDIS_PASSWORD, "CONFIG", "SET", "requirepass", self.OTHER)
        try:
            killed = 0
            for line in self.cli(self.OTHER, "CLIENT", "LIST").splitlines():
                f = dict(p.split("=", 1) for p in line.split() if "=" in p)
                if f.get("cmd") in ("smembers", "auth", "select") and f.get("sub") == "0":
                    self.cli(self.OTHER, "CLIENT", "KILL", "ID", f["id"])
                    killed += 1
            self.assertGreater(killed, 0)
            # Lookups reconnect, and are refused.
            self.cold_reads_until("refused", lambda: any(c["failed"] > 0
                                                         for c in self.lookups()))
            self.assertTrue(any(c["failed"] > 0 for c in self.lookups()), self.lookups())
        finally:
            self.cli(self.OTHER, "CONFIG", "SET", "requirepass", self.REDIS_PASSWORD)
        self.wait_members(2)
        # The connections the refusals dropped reconnect (a second after), and are answered;
        # not one lookup fails meanwhile.
        before = self.lookups()
        self.cold_reads_until("after", lambda: sum(a["none"] - b["none"] for b, a in
                                                   zip(before, self.lookups())) > 0)
        after = self.lookups()
        for b, a in zip(before, after):
            self.assertEqual(a["failed"], b["failed"], (before, after))
        self.assertGreater(sum(a["none"] - b["none"] for b, a in zip(before, after)), 0,
                           (before, after))


class ClusterClockOffset(ClusterBase):
    """A node whose wall clock is off Redis's says so: members' entries,
    invalidations and peer requests are dated by one node's clock and judged by
    another's, and the others drop what a node 30 s off sends without a word on
    its side. node-1's clock runs 5 s ahead here (doubles/timeshift.c)."""
    NODES = 2
    AHEAD_S = 5

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="larder-clock-cluster-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)  # after tearDownClass, or a failure
        cls.shift_file = os.path.join(cls.tmp, "offset")
        with open(cls.shift_file, "wb") as f:
            f.write(struct.pack("<q", int(cls.AHEAD_S * 1e9)) + b"\0" * 4088)
        cls.lib = build_timeshift(cls.tmp)
        super().setUpClass()

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        if i == 1:
            n.env.update({"LD_PRELOAD": cls.lib, "TIMESHIFT_FILE": cls.shift_file})
            # An ASan build wants its runtime first among the libraries.
            n.env["ASAN_OPTIONS"] = n.env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
        return n

    def test_offset_reported_and_logged(self):
        right, ahead = self.nodes
        self.assertLess(abs(self.view(right)["clock_offset_ms"]), 1000)
        self.assertAlmostEqual(self.view(ahead)["clock_offset_ms"], self.AHEAD_S * 1000,
                               delta=1000)
        self.assertIn("clock is 5.0 s ahead of Redis's", ahead.log())
        self.assertNotIn("clock is", right.log())
        status, _, text = admin_request(ahead.admin_port, "GET", "/metrics", TOKEN)
        self.assertEqual(status, 200)
        m = parse_metrics(text.decode())
        self.assertIn(("larder_cluster_clock_offset_seconds", frozenset()), m)
        self.assertAlmostEqual(metric(m, "larder_cluster_clock_offset_seconds"), self.AHEAD_S,
                               delta=1)
        with open(self.shift_file, "r+b") as f:
            f.write(struct.pack("<q", 0))
        self.wait_view(ahead, lambda v: abs(v["clock_offset_ms"]) < 1000, "offset back to 0")
        deadline = time.monotonic() + 5
        while "agrees with Redis's again" not in ahead.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertIn("agrees with Redis's again", ahead.log())
