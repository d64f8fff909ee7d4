"""A cluster under churn, for a bounded time (LARDER_CHURN_S seconds, 40 by default).

Three nodes with NVMe tiers and 64 KiB chunks (so that objects span many chunks and nodes); six
readers of whole objects and random ranges through every node; a writer replacing the objects
through the nodes and straight in S3; and every 6 s one of two nodes stopped or killed and started
again, with its NVMe tier. Membership, ownership, the placement directory and every node's
metadata keep changing under the reads. Whatever happens:
- an answer's bytes are those of the version its ETag names (a cut answer, a prefix of them),
  and its ETag names a version that was written;
- no read waits out a peer timeout (the peer-fetch cycle of 43859d9 made them take 30 s);
- once the writes stop and the metadata TTL (2 s) has passed, every node serves what S3 has.
Each of the first two found a bug in its time (as a scratch script); the schedule is seeded, the
timing is not.
"""
import hashlib
import os
import random
import signal
import threading
import time

import harness
from test_cluster import ClusterBase

CHURN_S = float(os.environ.get("LARDER_CHURN_S", "40"))
SLOW_S = 20  # well under the peer timeout (30 s), well over a slow CI machine's worst read


def body_for(key, version):
    seed = hashlib.sha256(("%s-%d" % (key, version)).encode()).digest()
    n = 50000 + int.from_bytes(seed[:4], "big") % 450000
    return (seed * (n // 32 + 1))[:n]


def etag_of(body):
    return '"%s"' % hashlib.md5(body).hexdigest()


class ClusterChurn(ClusterBase):
    NODES = 3
    NVME = True

    @classmethod
    def extra_env(cls):
        return {"LARDER_CHUNK_SIZE": "64KiB", "LARDER_METADATA_TTL": "2",
                "LARDER_RAM_CACHE_SIZE": "4MiB"}

    def test_answers_stay_true_while_nodes_come_and_go(self):
        keys = ["churn/%d" % i for i in range(10)]
        known, lock = {}, threading.Lock()  # ETag -> bytes of every version written
        for k in keys:
            b = body_for(k, 0)
            known[etag_of(b)] = b
            self.direct.put_object(Bucket="shared", Key=k, Body=b)
        bad, counts = [], {"answers": 0, "cut": 0, "refused": 0, "other": 0, "writes": 0,
                           "restarts": 0}
        restarting = set()
        stop = time.monotonic() + CHURN_S

        def note(what, n=1):
            with lock:
                counts[what] += n

        def reader(i):
            rnd = random.Random(i)
            while time.monotonic() < stop:
                k, ni = rnd.choice(keys), rnd.randrange(len(self.nodes))
                if ni in restarting:
                    time.sleep(0.05)
                    continue
                h = {}
                if rnd.random() < 0.5:
                    a = rnd.randrange(0, 500000)
                    h["Range"] = "bytes=%d-%d" % (a, a + rnd.randrange(0, 300000))
                t0 = time.monotonic()
                r = harness.signed_request(self.nodes[ni].url, "GET", "/shared/" + k, h)
                took = time.monotonic() - t0
                if took > SLOW_S:
                    bad.append(("slow", k, ni, round(took, 1), r.status,
                                r.headers.get("x-larder-request-id")))
                if r.status is None:
                    note("refused")  # the node went down under it
                    continue
                if r.status not in (200, 206):
                    note("other")  # 416 past the end, 503 while a peer is away
                    continue
                with lock:
                    full = known.get(r.headers.get("etag"))
                if full is None:
                    bad.append(("unknown etag", k, ni, r.headers.get("etag"), h))
                    continue
                want = full
                if r.status == 206:
                    span = r.headers["content-range"].split(" ")[1].split("/")[0]
                    first, last = map(int, span.split("-"))
                    want = full[first:last + 1]
                if not r.complete:
                    note("cut")
                    if not want.startswith(r.body):
                        bad.append(("cut answer's bytes", k, ni, h, r.status))
                elif r.body != want:
                    bad.append(("bytes", k, ni, h, r.status, len(r.body), len(want), r.cache))
                else:
                    note("answers")

        def writer():
            rnd = random.Random(99)
            version = 1
            while time.monotonic() < stop:
                k = rnd.choice(keys)
                b = body_for(k, version)
                version += 1
                with lock:
                    known[etag_of(b)] = b  # before a reader can see it
                ni = rnd.randrange(len(self.nodes) + 1)
                via = self.direct if ni == len(self.nodes) or ni in restarting \
                    else self.nodes[ni].client()
                try:
                    e = via.put_object(Bucket="shared", Key=k, Body=b)["ETag"]
                except Exception:  # the node went down under it: S3 may or may not have it
                    continue
                note("writes")
                if e != etag_of(b):
                    bad.append(("put answered another etag", k, ni, e, etag_of(b)))
                time.sleep(rnd.random() * 0.5)  # the schedule's pace, not a wait for anything

        def churn():
            rnd = random.Random(5)
            # Its fixed times are the schedule, on purpose, and no check depends on them: a
            # request in flight when its node goes down is answered in part, or not at all, and
            # the readers check exactly that; a node read right after its start is joining,
            # which the cluster must handle.
            while time.monotonic() < stop - 8:
                time.sleep(6)
                ni = rnd.randrange(1, len(self.nodes))
                n = self.nodes[ni]
                restarting.add(ni)
                time.sleep(0.3)  # most requests already sent to it end; the rest are cut
                if rnd.random() < 0.5:
                    code = n.stop()
                    if code != 0:
                        bad.append(("stop", ni, code, n.log()[-2000:]))
                else:
                    n.signal(signal.SIGKILL)
                    n.proc.wait()
                n.start()
                note("restarts")
                time.sleep(0.5)  # then it is read and written through again, joined or not
                restarting.discard(ni)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(6)] + \
            [threading.Thread(target=writer), threading.Thread(target=churn)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(bad[:10], [], counts)
        self.assertGreater(counts["answers"], 1000, counts)
        self.assertGreater(counts["restarts"], 0, counts)
        self.wait_members(len(self.nodes))

        # A fixed wait on purpose: past the metadata TTL (2 s) since the last read or write
        # (the threads are joined), so every node must revalidate what it holds. What it
        # follows is waited for: every node back and subscribed (wait_members).
        time.sleep(3)
        for k in keys:
            want = self.direct.get_object(Bucket="shared", Key=k)["Body"].read()
            for ni, n in enumerate(self.nodes):
                r = harness.signed_request(n.url, "GET", "/shared/" + k)
                self.assertEqual((r.status, r.body == want), (200, True),
                                 "%s through node-%d: %r" % (k, ni, r))
