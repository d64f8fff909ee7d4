"""A node asked for one of its chunks while it is still learning the chunk's object.

Node L learns an object it does not know from the object's owner node O (docs/cluster.md, "An
object's first read"). Meanwhile O's own reader wants a chunk L owns, and O asks L for it. L may
not wait for its own learning there (it asks O: the two could wait for each other), so it refuses
at once with 503. O then read the chunk from S3 itself, and L read it again for its own readers:
the same chunk fetched from S3 twice (seen in test_cluster.py and test_cluster_firstread.py on a
busy machine). Now L's refusal says it is learning the object, and O asks L again a moment later,
by when L knows the object and fetches its chunk from S3 once for both.

Two nodes on a scripted origin (doubles/fault_origin.py), which holds S3's answer that L's
learning waits for until the test has seen L refuse O. No read-ahead: each read asks for
exactly the chunks it names.
"""
import threading
import time

from fault_origin import FaultOrigin
from test_cluster import ClusterBase, blob
from test_cluster_firstread import rng

MiB = 1024 * 1024
CHUNKS = 9  # 1 MiB chunks; the last holds 5 bytes
SIZE = (CHUNKS - 1) * MiB + 5


def chunk_range(i):
    return rng(i * MiB, min((i + 1) * MiB, SIZE) - 1)


class ClusterLearningNode(ClusterBase):
    NODES = 2

    @classmethod
    def make_upstream(cls):
        return FaultOrigin().start()

    @classmethod
    def extra_env(cls):
        return {"LARDER_READAHEAD": "0"}

    def peer_records(self, node, asker):
        return [r for r in node.access_records()
                if r.get("key_id") == "peer:" + asker.env["LARDER_NODE_ID"]]

    def read_range(self, node, key, a, b):
        r = node.client().get_object(Bucket="shared", Key=key, Range=rng(a, b))
        return r["Body"].read()

    def client_records(self, node, key):
        return [r for r in node.access_records() if r.get("key") == key
                and not str(r.get("key_id", "")).startswith("peer:")]

    def owners(self, key, data):
        """Which node owns chunk 0 (the object's owner) and which node owns each chunk: each
        chunk is read through node-0, then through node-1, which has it already (a hit) only
        when it owns it and fetched it for node-0. Then the object is purged everywhere,
        cold again."""
        a, b = self.nodes
        owner = {}
        for i in range(CHUNKS):
            end = min((i + 1) * MiB, SIZE)
            self.assertEqual(self.read_range(a, key, i * MiB, end - 1), data[i * MiB:end])
            before = len(self.client_records(b, key))
            self.assertEqual(self.read_range(b, key, i * MiB, i * MiB + 9),
                             data[i * MiB:i * MiB + 10])
            deadline = time.monotonic() + 10
            while len(self.client_records(b, key)) == before and time.monotonic() < deadline:
                time.sleep(0.01)
            owner[i] = b if self.client_records(b, key)[-1]["cache"] == "hit" else a
        self.admin(a, "POST", "/admin/purge", {"bucket": "shared", "key": key})
        return owner

    def roles(self):
        """A key, its bytes, and nodes O (the object's owner) and L (the other), with a chunk
        j > 0 L owns and a chunk m > 0 O owns."""
        for seed in range(40):
            key = "learning/o%d.bin" % seed
            data = blob(300 + seed, SIZE)
            self.upstream.put("shared", key, data)
            owner = self.owners(key, data)
            o = owner[0]
            l_node = self.nodes[1] if o is self.nodes[0] else self.nodes[0]
            js = [i for i in range(1, CHUNKS) if owner[i] is l_node]
            ms = [i for i in range(1, CHUNKS) if owner[i] is o]
            if js and ms:
                return key, data, o, l_node, js[0], ms[0]
        self.fail("no object with the chunk owners this test needs")

    def test_owner_asks_the_learning_node_again(self):
        key, data, o, l_node, j, m = self.roles()
        origin = self.upstream
        # O knows the object: its reader read the object's first bytes (chunk 0, O's).
        self.assertEqual(self.read_range(o, key, 0, 99), data[:100])
        mark = origin.mark()
        # L's reader reads chunk m: L asks O, which asks S3 for it; S3's answer is held, so
        # L is learning the object until the test lets it go.
        gate = threading.Event()
        self.addCleanup(gate.set)
        origin.hold_next(gate, bucket="shared", key=key, rng=chunk_range(m))
        got = {}
        t_l = threading.Thread(target=lambda: got.update(
            l=self.read_range(l_node, key, m * MiB, m * MiB + 4095)))
        t_l.start()
        deadline = time.monotonic() + 10
        while not origin.gets("shared", key, since=mark) and time.monotonic() < deadline:
            time.sleep(0.01)
        # O's reader reads chunk j, which L owns: O asks L, which refuses while it learns.
        since = len(self.peer_records(l_node, o))
        t_o = threading.Thread(target=lambda: got.update(
            o=self.read_range(o, key, j * MiB, j * MiB + 4095)))
        t_o.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and t_o.is_alive() and \
                len(self.peer_records(l_node, o)) == since:
            time.sleep(0.01)
        gate.set()
        t_l.join(30)
        t_o.join(30)
        self.assertEqual(got, {"l": data[m * MiB:m * MiB + 4096],
                               "o": data[j * MiB:j * MiB + 4096]})
        # L refused O while it learnt the object, and O asked it again rather than S3 (it
        # read chunk j from S3 itself before, and L later read it again for its own).
        # (L's line for its answer is written once the whole chunk is sent.)
        deadline = time.monotonic() + 5
        while True:
            statuses = [str(r["status"]) for r in self.peer_records(l_node, o)[since:]]
            if statuses[-1:] != ["503"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual((statuses[:1], statuses[-1:]), (["503"], ["206"]), statuses)
        # The whole object through both nodes: S3 was asked for each chunk but chunk 0 once
        # since mark (chunk m by O for L; chunk j by L, its owner, for O), never twice.
        for n in self.nodes:
            self.assertEqual(self.read(n, key), data)
        ranges = sorted(g["range"] or "" for g in origin.gets("shared", key, since=mark))
        self.assertEqual(ranges, sorted(chunk_range(i) for i in range(1, CHUNKS)),
                         "chunk j=%d, m=%d" % (j, m))
