"""A read-order lookahead in a cluster: posted to one node, it warms the
objects on their chunk owners, so a reader on any node gets them without an
upstream GET; it moves only with the reads the node it was posted to serves
(docs/operations.md)."""
import json
import time
import urllib.request

import harness
from test_cluster import TOKEN, ClusterBase


class LookaheadCluster(ClusterBase):
    NODES = 2

    def admin(self, node, method, path, body=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (node.admin_port, path),
                                     data=json.dumps(body).encode() if body else None,
                                     method=method,
                                     headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())

    def info(self, node, la):
        return [l for l in self.admin(node, "GET", "/admin/lookahead")[1]["lookaheads"]
                if l["id"] == la][0]

    def test_posted_to_one_node_warms_the_owners(self):
        keys = ["la/%02d.bin" % i for i in range(20)]
        for i, k in enumerate(keys):
            self.direct.put_object(Bucket="shared", Key=k, Body=b"%d" % i * 3000)
        mark = self.upstream.mark()
        a, b = self.nodes
        st, r = self.admin(a, "POST", "/admin/lookahead",
                           {"bucket": "shared", "keys": keys, "window": 20})
        self.assertEqual(st, 201, r)
        deadline = time.monotonic() + 30
        while self.info(a, r["id"])["objects"] < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.info(a, r["id"])["objects"], 20)
        warm_gets = [x for x in self.upstream.from_larder(mark)
                     if x["method"] == "GET" and x["target"].startswith("/shared/la/")]
        self.assertEqual(len(warm_gets), 20, "one upstream GET per object, cluster-wide")
        # The other node reads them all: its own from its cache, the rest
        # from their owner; nothing from S3.
        mark = self.upstream.mark()
        hits = 0
        for i, k in enumerate(keys):
            resp = harness.signed_request(b.url, "GET", harness.key_path("shared", k))
            self.assertEqual((resp.status, resp.body), (200, b"%d" % i * 3000), k)
            hits += resp.cache == "hit"
        self.assertEqual([x for x in self.upstream.from_larder(mark) if x["method"] == "GET"],
                         [])
        self.assertGreater(hits, 0, "no object was warmed on the other node, its owner")
        # Reads served by the other node do not move the lookahead.
        self.assertEqual(self.info(a, r["id"])["position"], 0)
        self.assertEqual(self.admin(b, "GET", "/admin/lookahead")[1]["lookaheads"], [])
