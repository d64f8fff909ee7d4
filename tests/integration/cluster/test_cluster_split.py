"""A cold range deep in a chunk, read through a node of a cluster.

On a node alone, a reader whose first byte is deep in a chunk nobody holds has the chunk fetched
as two ranges at once, from its byte and up to it (docs/cache.md, "Chunks and metadata";
tests/integration/cache/test_split_fill.py), so a 4 KiB read near a chunk's end does not wait
for S3 to stream the bytes before it. In a cluster the chunk came whole from its owner node: the
owner fetched it from its start, and so did a node that is not the owner, which asked the owner
for the whole chunk. Now the node that does not own it asks the owner for the two ranges, the
deep one first, and the owner, asked for bytes deep in a chunk it does not hold, fetches it as
two ranges from S3 as a node alone does. What S3 and the owner see is counted here, not timed:
loadtest/cold_ranges.py (mode cluster) measures the time.

Two nodes, 1 MiB chunks (split from 256 KiB in).
"""
import time

from test_cluster import ClusterBase, OnePreviousNode, blob

MiB = 1024 * 1024
FROM = 700000  # a first byte deep in its chunk


def rng(a, b):
    return "bytes=%d-%d" % (a, b)


class ClusterSplitFill(ClusterBase):
    NODES = 2

    def s3_ranges(self, mark, key):
        """The Range of each S3 GET of key since mark, sorted."""
        return sorted(dict(g["headers"]).get("range", "") for g in self.gets(mark, key))

    @staticmethod
    def peer_reads(owner, asker, key):
        """(status, bytes sent) of each request asker sent owner for key, in the order they
        ended."""
        return [(int(r["status"]), int(r["bytes_out"])) for r in owner.access_records()
                if r.get("key_id") == "peer:" + asker and r.get("key") == key]

    def settled_peer_reads(self, owner, asker, key, before):
        """peer_reads past the first `before`, once no more come for half a second."""
        got, still = None, time.monotonic()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            now = self.peer_reads(owner, asker, key)[before:]
            if now != got:
                got, still = now, time.monotonic()
            elif time.monotonic() - still > 0.5:
                break
            time.sleep(0.05)
        return got

    def deep_reads(self, reader, key, seed):
        """A 4 KiB read FROM into each chunk but the first of a cold 8-chunk object through
        reader, each chunk then read whole: its bytes checked, [(S3's ranges, what the other
        node answered reader for it)] by chunk."""
        other = [n for n in self.nodes if n is not reader][0]
        asker = reader.env["LARDER_NODE_ID"]
        data = blob(seed, 8 * MiB + 5)
        self.direct.put_object(Bucket="shared", Key=key, Body=data)
        for n in self.nodes:  # both nodes know the object (chunk 0 is cached)
            r = n.client().get_object(Bucket="shared", Key=key, Range=rng(0, 9))
            self.assertEqual(r["Body"].read(), data[:10])
        out = []
        for k in range(1, 8):
            a, end = k * MiB + FROM, (k + 1) * MiB - 1
            m = self.upstream.mark()
            asked = len(self.peer_reads(other, asker, key))
            r = reader.client().get_object(Bucket="shared", Key=key, Range=rng(a, a + 4095))
            self.assertEqual(r["Body"].read(), data[a:a + 4096], k)
            # The chunk whole, once both parts are in: every byte right, and every S3 GET
            # for it under way.
            r = reader.client().get_object(Bucket="shared", Key=key, Range=rng(k * MiB, end))
            self.assertEqual(r["Body"].read(), data[k * MiB:end + 1], k)
            out.append((self.s3_ranges(m, key),
                        sorted(self.settled_peer_reads(other, asker, key, asked))))
        return out

    @staticmethod
    def split(k):
        a, end = k * MiB + FROM, (k + 1) * MiB - 1
        return sorted([rng(k * MiB, a - 1), rng(a, end)]), [(206, end + 1 - a), (206, FROM)]

    def test_deep_range_on_either_node_fetches_its_chunk_as_two_ranges(self):
        seen = set()
        for k, (s3, peer) in enumerate(self.deep_reads(self.nodes[0], "split/deep.bin", 81), 1):
            two, asked_two = self.split(k)
            # S3 was asked for the chunk as two ranges, by whichever node owns it; through
            # the node that does not own it, the owner was asked for the same two ranges.
            self.assertEqual(s3, two, "chunk %d" % k)
            self.assertIn(peer, ([], asked_two), "chunk %d" % k)
            seen.add("asked the owner" if peer else "owns it")
        # Both cases were read (which node owns which chunk is fixed by the data's ETag).
        self.assertEqual(seen, {"asked the owner", "owns it"})


class ClusterSplitFillPrevious(OnePreviousNode, ClusterSplitFill):
    """node-1 runs LARDER_PREVIOUS_BIN (the larder of scripts/previous-release, of the same
    cluster protocol, which scripts/test.sh builds), as in a rolling upgrade; skipped when it is
    not set. Neither side misreads the other, and each chunk still comes from S3 once: whole
    or as the two ranges, whichever version owns it (a larder from before split fills in a
    cluster, e433e07, fetches whole what it owns and asks for whole chunks; one since asks an
    owner for the two ranges, which an older owner serves from one fetch of the whole chunk)."""

    # What this version does alone (the class above) is not asked of the older side.
    test_deep_range_on_either_node_fetches_its_chunk_as_two_ranges = None

    def test_deep_range_on_either_node_fetches_its_chunk_once(self):
        for reader, key, seed in ((self.nodes[0], "split/new.bin", 82),
                                  (self.nodes[1], "split/old.bin", 83)):
            seen = set()
            for k, (s3, peer) in enumerate(self.deep_reads(reader, key, seed), 1):
                two, asked_two = self.split(k)
                whole, asked_whole = [rng(k * MiB, (k + 1) * MiB - 1)], [(206, MiB)]
                self.assertIn((s3, peer), ((two, []), (whole, []), (two, asked_two),
                                           (whole, asked_two), (whole, asked_whole)),
                              "%s chunk %d" % (key, k))
                seen.add("asked the owner" if peer else "owns it")
            self.assertEqual(seen, {"asked the owner", "owns it"}, key)
