"""An object's first read through a node of a cluster.

On a node alone, a reader's range of an unknown object learns it from S3's answer for the chunk
the range starts in (docs/cache.md, "Chunks and metadata"). In a cluster the first read went to
the object's owner node (chunk 0's) for chunk 0, which that node fetched from S3 from its start,
and the reader's chunk was asked for only once that answer had come: two S3 first bytes one after
the other (about 48 ms where one costs 21, loadtest/cold_ranges.py in mode cluster). Now the
owner is asked for the reader's chunk and learns the object from S3's answer for it; chunk 0 comes
after, fetched by the owner once the reader's chunk is in. What S3 sees is counted here, in the
order it is asked, not timed: cold_ranges.py measures the time.

Three nodes, 1 MiB chunks (split from 256 KiB in), each node the reader of three objects.
"""
import threading
import time

from test_cluster import ClusterBase, OnePreviousNode, blob

MiB = 1024 * 1024
FROM = 700000  # a first byte deep in its chunk
K = 5  # the reader's chunk


def rng(a, b):
    return "bytes=%d-%d" % (a, b)


class ClusterFirstRead(ClusterBase):
    NODES = 3
    ALL_NEW = True  # every node runs this version

    def s3_ranges(self, mark, key, n):
        """The Range of each S3 GET of key since mark, in the order S3 was asked, once there
        are n of them and no more come for half a second (5 s at most)."""
        got, still = None, time.monotonic()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            now = [dict(g["headers"]).get("range", "") for g in self.gets(mark, key)]
            if now != got:
                got, still = now, time.monotonic()
            elif len(got) >= n and time.monotonic() - still > 0.5:
                break
            time.sleep(0.05)
        return got

    def first_read(self, reader, key, seed):
        """A 4 KiB read FROM into chunk K of a cold 8-chunk object through reader, then at once
        the whole object through every node. Returns the S3 ranges of all that, in order."""
        data = blob(seed, 8 * MiB + 5)
        self.direct.put_object(Bucket="shared", Key=key, Body=data)
        a = K * MiB + FROM
        mark = self.upstream.mark()
        r = reader.client().get_object(Bucket="shared", Key=key, Range=rng(a, a + 4095))
        self.assertEqual(r["Body"].read(), data[a:a + 4096])
        bodies = []
        threads = [threading.Thread(target=lambda n=n: bodies.append(self.read(n, key)))
                   for n in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(bodies, [data] * len(self.nodes))
        return self.s3_ranges(mark, key, 10)

    def assert_each_once(self, got, want, key, what):
        """S3 was asked for each range of want, and for no other range but the refetches (of
        a whole chunk or of want's ranges) learning_refetches allows."""
        extra = list(got)
        for w in want:
            self.assertIn(w, extra, "%s: %r" % (what, got))
            extra.remove(w)
        whole = [rng(k * MiB, min((k + 1) * MiB, 8 * MiB + 5) - 1) for k in range(9)]
        for e in extra:
            self.assertIn(e, whole + want, "%s: %r" % (what, got))
        self.assertLessEqual(len(extra), self.learning_refetches(key), "%s: %r" % (what, got))

    def found(self):
        """Directory lookups that named a holder, on all nodes."""
        return sum(self.view(n)["directory"]["lookups"]["found"] for n in self.nodes)

    def test_first_read_asks_for_the_readers_chunk_first(self):
        a, end = K * MiB + FROM, (K + 1) * MiB - 1
        found = self.found()
        for i in range(9):
            reader = self.nodes[i % len(self.nodes)]
            got = self.first_read(reader, "firstread/o%d.bin" % i, 90 + i)
            # S3 is asked for the reader's chunk from its byte before anything else (it was
            # asked for chunk 0 first, and for the reader's chunk only once that answered).
            if self.ALL_NEW:
                self.assertEqual(got[0], rng(a, end), "object %d: %r" % (i, got))
            # Then, the whole object read through every node at once: each chunk once in
            # all, chunk K as two ranges (the bytes before the reader's too), chunk 0 once
            # (from its owner, which learnt the object from chunk K). Chunk K is held by the
            # node that learnt the object; when another node owns it, that node finds it in
            # the directory rather than asking S3 again.
            want = [rng(k * MiB, min((k + 1) * MiB, 8 * MiB + 5) - 1)
                    for k in range(9) if k != K] + [rng(K * MiB, a - 1), rng(a, end)]
            self.assert_each_once(got, want, "firstread/o%d.bin" % i, "object %d" % i)
        # Some of the chunks K were owned by a third node, which read them from the node that
        # learnt the object (it listed itself as their holder at once), not from S3.
        if self.ALL_NEW:
            self.assertGreater(self.found(), found)

    def test_first_read_where_the_owner_knows_the_object(self):
        # The object's owner knows it already (the other nodes read its first bytes) but
        # neither owns nor holds the reader's chunk: it answers the reader's node 503 at
        # once (fetching it there would ask the chunk's owner at the last hop, which skips
        # the directory), and that node learns the object from chunk 0 there and asks the
        # chunk's owner. Every byte right; S3 asked for the reader's chunk once, as two
        # ranges, and for nothing else.
        a, end = K * MiB + FROM, (K + 1) * MiB - 1
        refused = 0
        for i in range(9):
            reader = self.nodes[i % len(self.nodes)]
            key = "knownowner/o%d.bin" % i
            data = blob(120 + i, 8 * MiB + 5)
            self.direct.put_object(Bucket="shared", Key=key, Body=data)
            for n in self.nodes:
                if n is not reader:
                    r = n.client().get_object(Bucket="shared", Key=key, Range=rng(0, 9))
                    self.assertEqual(r["Body"].read(), data[:10])
            before = self.peer_503s(key, reader)
            mark = self.upstream.mark()
            r = reader.client().get_object(Bucket="shared", Key=key, Range=rng(a, a + 4095))
            self.assertEqual(r["Body"].read(), data[a:a + 4096], "object %d" % i)
            r = reader.client().get_object(Bucket="shared", Key=key, Range=rng(K * MiB, end))
            self.assertEqual(r["Body"].read(), data[K * MiB:end + 1], "object %d" % i)
            self.assertEqual(sorted(self.s3_ranges(mark, key, 2)),
                             sorted([rng(K * MiB, a - 1), rng(a, end)]), "object %d" % i)
            refused += self.peer_503s(key, reader) - before
        # The chunk was another node's for about two objects in three: those were refused.
        if self.ALL_NEW:
            self.assertGreater(refused, 0)


class ClusterFirstReadPrevious(OnePreviousNode, ClusterFirstRead):
    """node-1 runs LARDER_PREVIOUS_BIN (a larder of the same cluster protocol from before this
    change), as in a rolling upgrade; skipped when it is not set. Every byte is right and S3 is
    asked for the same ranges once each, whichever node is the reader, the object's owner or
    the chunk's: an older owner asked for the reader's range learns the object from chunk 0 and
    serves the range from the chunk's owner; an older reader's node asks for chunk 0."""
    ALL_NEW = False
