"""Read-after-write across the cluster's first read of an object (fetch.c, learnt_past_chunk0).

An object's first read through a node asks the object's owner node for the reader's chunk; that
node learns the object from S3's answer for it, lists itself at once as the chunk's holder and
fetches chunk 0 in the background once the chunk is in (warm_first). A write through larder
right after must win everywhere: no node may answer the replaced version's bytes, whether it
learnt the object from the chunk, holds it, or is the chunk's owner asking the directory.
"""
import hashlib
import re
import threading
import time

from test_cluster import ClusterBase, blob
import test_cluster_firstread as firstread
from test_cluster_firstread import FROM, K, MiB, rng


class ClusterFirstReadWrite(ClusterBase):
    NODES = 3

    def wait_old_chunk0(self, mark, key, old, what, timeout=60):
        """Until S3 has answered the owner's background GET of chunk 0 of the old version
        (If-Match its ETag: 206, or 412 once the write is in) and no node produces a chunk:
        whatever that answer leaves behind is in place. A guessed pause may end before it
        on a busy machine, and the check after it then proves nothing."""
        etag = '"%s"' % hashlib.md5(old).hexdigest()
        deadline = time.monotonic() + timeout
        while True:
            gets = [g for g in self.gets(mark, key)
                    if dict(g["headers"]).get("range") == rng(0, MiB - 1)
                    and dict(g["headers"]).get("if-match") == etag]
            answered = bool(gets) and all(g.get("status") for g in gets)
            busy = [n.env["LARDER_NODE_ID"] for n in self.nodes
                    if re.search(r"^larder_inflight_fetches (?!0\b)", self.metrics_text(n),
                                 re.M)]
            if answered and not busy:
                return
            self.assertLess(time.monotonic(), deadline,
                            "%s: the old chunk 0 asked of S3: %r; nodes still fetching: %r" %
                            (what, gets, busy))
            time.sleep(0.05)

    def test_a_write_right_after_a_first_read_wins_everywhere(self):
        a = K * MiB + FROM
        for i in range(9):
            reader, writer = self.nodes[i % 3], self.nodes[(i + 1) % 3]
            key = "firstraw/o%d.bin" % i
            old, new = blob(200 + i, 8 * MiB + 5), blob(300 + i, 8 * MiB + 5)
            self.direct.put_object(Bucket="shared", Key=key, Body=old)
            mark = self.upstream.mark()
            r = reader.client().get_object(Bucket="shared", Key=key, Range=rng(a, a + 4095))
            self.assertEqual(r["Body"].read(), old[a:a + 4096], "object %d" % i)
            writer.client().put_object(Bucket="shared", Key=key, Body=new)
            got = {}

            def read(n):
                c = n.client()
                got[n.env["LARDER_NODE_ID"]] = [
                    c.get_object(Bucket="shared", Key=key, Range=rng(a, a + 4095))["Body"].read(),
                    c.get_object(Bucket="shared", Key=key, Range=rng(0, 99))["Body"].read(),
                    c.get_object(Bucket="shared", Key=key,
                                 Range=rng(K * MiB, K * MiB + 99))["Body"].read()]
            threads = [threading.Thread(target=read, args=(n,)) for n in self.nodes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            want = [new[a:a + 4096], new[:100], new[K * MiB:K * MiB + 100]]
            for name, bodies in sorted(got.items()):
                self.assertEqual([b == w for b, w in zip(bodies, want)], [True] * 3,
                                 "object %d through %s (reader %s, writer %s)" %
                                 (i, name, reader.env["LARDER_NODE_ID"],
                                  writer.env["LARDER_NODE_ID"]))
            # Once more when the background chunk 0 of the old version is over.
            self.wait_old_chunk0(mark, key, old, "object %d" % i)
            for n in self.nodes:
                b = n.client().get_object(Bucket="shared", Key=key, Range=rng(0, 99))["Body"].read()
                self.assertEqual(b, new[:100], "object %d, chunk 0 through %s later" %
                                 (i, n.env["LARDER_NODE_ID"]))


class ClusterFirstReadsTogether(ClusterBase):
    NODES = 3

    def test_first_reads_of_several_chunks_at_once(self):
        # Every node reads a different deep chunk of the same cold object at once, twice over
        # (six readers): each chunk S3 is asked for once in all (the reader's chunks as two
        # ranges each), whichever node learns the object and whichever owns each chunk.
        for i in range(6):
            key = "together/o%d.bin" % i
            data = blob(400 + i, 8 * MiB + 5)
            self.direct.put_object(Bucket="shared", Key=key, Body=data)
            mark = self.upstream.mark()
            chunks = [(i + j) % 7 + 1 for j in range(3)]
            out = []

            def read(n, k):
                a = k * MiB + FROM
                r = n.client().get_object(Bucket="shared", Key=key, Range=rng(a, a + 4095))
                out.append(r["Body"].read() == data[a:a + 4096])
            threads = [threading.Thread(target=read, args=(self.nodes[j % 3], chunks[j % 3]))
                       for j in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(out, [True] * 6, "object %d" % i)
            got = firstread.ClusterFirstRead.s3_ranges(self, mark, key, 4)
            # No range asked twice, nor two overlapping (ClusterBase.learning_refetches).
            twice = 0
            spans = []
            for g in got:
                if g.startswith("bytes=") and "-" in g[6:] and not g[6:].startswith("-"):
                    a, b = g[6:].split("-")
                    spans.append((int(a), int(b) if b else None))
            for x in range(len(spans)):
                for y in range(x + 1, len(spans)):
                    (a1, b1), (a2, b2) = spans[x], spans[y]
                    if b1 is not None and b2 is not None and a1 <= b2 and a2 <= b1:
                        twice += 1
            self.assertLessEqual(twice, self.learning_refetches(key),
                                 "object %d: overlapping %r" % (i, got))
