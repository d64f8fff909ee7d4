"""The figures larder reports agree with what happened, where a cluster or a
log that gathers several nodes could make them disagree.

- Request ids: the id of the access log and of x-larder-request-id tells one
  request from every other, also across the nodes of a cluster whose logs an
  operator reads together (two nodes serving their first request in the same
  second once gave both the same id).
- Cluster totals: summed over the nodes (as the Grafana dashboard sums them),
  larder_upstream_requests_total and larder_upstream_response_bytes_total are
  what S3 (moto) saw, and larder_requests_total and
  larder_cache_requests_total count the clients' requests once: a chunk one
  node fetches from another is counted as peer traffic
  (larder_peer_requests_total on the asking node, larder_peer_served_total on
  the answering one), not as a second upstream request and a second client
  request.
- The access log's key_id is the key id a request names, also one that names
  no key (InvalidAccessKeyId: the line said "-", so the client could not be
  told), while /admin/stats counts it as (unauthenticated), not as a key row.
- Requests larder stops itself: a pass-through GET whose client left mid-body
  reached S3 (which bills it) and is counted in larder_upstream_requests_total
  with the bytes that came (it used to be left out, as if never sent); so are
  the requests a warm job sends before it starts (the bucket check, the
  manifest), which were sent outside the counted engine.
"""
import http.client
import json
import os
import socket
import time
import unittest

import harness
import test_cluster
from test_admin import admin_request, metric, parse_metrics

MiB = 1024 * 1024


def one_id(node):
    """The request id of one unsigned request (refused before anything upstream)."""
    status, hdrs, _ = harness.http_request(node.url, "GET", "/")
    return hdrs.get("x-larder-request-id")


class RequestIdsAcrossProcesses(unittest.TestCase):

    def test_two_nodes_never_hand_out_the_same_id(self):
        env = {"LARDER_WORKERS": "1", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
               "LARDER_UPSTREAM_URL": "http://127.0.0.1:9"}
        nodes = [harness.Larder(env=env) for _ in range(2)]
        try:
            for n in nodes:
                n.start()
            # Both nodes' n-th request within one second: the case that collided.
            while time.time() % 1 > 0.5:
                time.sleep(0.05)
            pairs = [(one_id(nodes[0]), one_id(nodes[1])) for _ in range(3)]
            for a, b in pairs:
                self.assertTrue(a and b, pairs)
                self.assertNotEqual(a, b, "two nodes gave the same request id: %r" % pairs)
        finally:
            for n in nodes:
                n.stop()
                n.cleanup()


class SingleNode(harness.LarderCase):
    ADMIN_PORT = None

    @classmethod
    def setUpClass(cls):
        cls.ADMIN_PORT = harness.free_port()
        cls.LARDER_ENV = {"LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % cls.ADMIN_PORT,
                          "LARDER_ADMIN_TOKEN": test_cluster.TOKEN}
        super().setUpClass()
        cls.direct.create_bucket(Bucket="figures")

    def metrics(self):
        status, _, body = admin_request(self.ADMIN_PORT, "GET", "/metrics", test_cluster.TOKEN)
        self.assertEqual(status, 200)
        return parse_metrics(body.decode())

    def test_a_pass_through_read_the_client_left_is_counted(self):
        self.direct.put_object(Bucket="figures", Key="big", Body=os.urandom(16 * MiB))
        before, mark = self.metrics(), self.upstream.mark()
        # x-amz-expected-bucket-owner: never from the cache, S3 checks it.
        path = "/figures/big"
        h = harness.sign_headers("GET", self.larder.url + path, harness.CLIENT_KEY,
                                 harness.CLIENT_SECRET,
                                 {"x-amz-expected-bucket-owner": "123456789012"})
        c = http.client.HTTPConnection("127.0.0.1", self.larder.port, timeout=10)
        try:
            c.request("GET", path, headers=h)
            r = c.getresponse()
            self.assertEqual((r.status, r.getheader("x-larder-cache")), (200, "bypass"))
            self.assertEqual(len(r.read(100000)), 100000)
            c.sock.shutdown(socket.SHUT_RDWR)
        finally:
            c.close()
        deadline = time.monotonic() + 10
        while not [x for x in self.larder.access_records() if x.get("key") == "big"]:
            self.assertLess(time.monotonic(), deadline, "no access-log line")
            time.sleep(0.05)
        sent = self.upstream.from_larder(mark)
        self.assertEqual(len(sent), 1, sent)
        after = self.metrics()

        def delta(name, **labels):
            return metric(after, name, **labels) - metric(before, name, **labels)
        self.assertEqual(delta("larder_upstream_requests_total", status="200"), 1)
        self.assertGreaterEqual(delta("larder_upstream_response_bytes_total"), 100000)
        self.assertEqual(delta("larder_upstream_errors_total"), 0)  # larder stopped it

    def test_every_request_a_warm_job_sends_is_counted(self):
        self.direct.put_object(Bucket="figures", Key="warm/a", Body=b"a" * 5000)
        self.direct.put_object(Bucket="figures", Key="warm/manifest", Body=b"warm/a\n")
        for body in ({"bucket": "figures", "prefix": "warm/a"},
                     {"bucket": "figures", "manifest": "warm/manifest"}):
            before, mark = self.metrics(), self.upstream.mark()
            status, _, doc = admin_request(self.ADMIN_PORT, "POST", "/admin/prefetch",
                                           test_cluster.TOKEN, json.dumps(body).encode())
            self.assertEqual(status, 202, doc)
            job = json.loads(doc)["job"]
            deadline = time.monotonic() + 20
            while True:
                status, _, doc = admin_request(self.ADMIN_PORT, "GET", "/admin/jobs/" + job,
                                               test_cluster.TOKEN)
                if json.loads(doc)["state"] not in ("listing", "warming"):  # prefetch.c's states
                    break
                self.assertLess(time.monotonic(), deadline, doc)
                time.sleep(0.05)
            self.assertEqual(json.loads(doc)["state"], "done", doc)
            sent = self.upstream.from_larder(mark)
            after = self.metrics()
            self.assertEqual(sum(v for (n, _), v in after.items()
                                 if n == "larder_upstream_requests_total")
                             - sum(v for (n, _), v in before.items()
                                   if n == "larder_upstream_requests_total"),
                             len(sent), [(r["method"], r["target"]) for r in sent])

    def test_an_unknown_key_id_is_in_the_access_log(self):
        for sigv2 in (False, True):
            key = "NOSUCHKEY%s00000000" % ("V2" if sigv2 else "V4")
            s3 = self.larder.client(key=key, secret="x" * 40,
                                    **({"signature_version": "s3"} if sigv2 else {}))
            with self.assertRaises(Exception) as cm:
                s3.head_bucket(Bucket="figures")
            rid = cm.exception.response["ResponseMetadata"]["HTTPHeaders"].get(
                "x-larder-request-id")
            deadline = time.monotonic() + 10
            while True:
                lines = [x for x in self.larder.access_records() if x.get("id") == rid]
                if lines or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(len(lines), 1, rid)
            self.assertEqual((lines[0]["key_id"], lines[0]["error"]),
                             (key, "InvalidAccessKeyId"))
        status, _, body = admin_request(self.ADMIN_PORT, "GET", "/admin/stats",
                                        test_cluster.TOKEN)
        clients = json.loads(body)["clients"]
        self.assertFalse([k for k in clients if k.startswith("NOSUCHKEY")], clients)
        self.assertGreaterEqual(clients["(unauthenticated)"]["requests"], 2)


class ClusterTotals(test_cluster.ClusterBase):
    NODES = 2

    def metrics(self, node):
        status, _, body = admin_request(node.admin_port, "GET", "/metrics", test_cluster.TOKEN)
        self.assertEqual(status, 200)
        return parse_metrics(body.decode())

    def stats(self, node):
        status, _, body = admin_request(node.admin_port, "GET", "/admin/stats",
                                        test_cluster.TOKEN)
        self.assertEqual(status, 200)
        return json.loads(body)

    @staticmethod
    def total(m, name, **labels):
        """The sum of a family's samples whose labels include labels."""
        want = set(labels.items())
        return sum(v for (n, ls), v in m.items() if n == name and want <= ls)

    def test_summed_over_nodes_each_request_counts_once(self):
        data = test_cluster.blob(7, 4 * MiB + 7)  # 5 chunks, spread over both nodes
        self.direct.put_object(Bucket="shared", Key="totals/a", Body=data)
        mark = self.upstream.mark()
        before = [self.metrics(n) for n in self.nodes]
        for n in self.nodes:  # a cold read on node 0, then node 1 reads what node 0 fetched
            r = harness.signed_request(n.url, "GET", "/shared/totals/a")
            self.assertEqual((r.status, r.body == data), (200, True))
        time.sleep(0.3)
        s3 = self.upstream.from_larder(mark)
        self.assertGreaterEqual(len(s3), 5)

        def delta(name, **labels):
            return sum(self.total(self.metrics(n), name, **labels) - self.total(b, name, **labels)
                       for n, b in zip(self.nodes, before))
        deadline = time.monotonic() + 10  # a request counts once libmicrohttpd reports it done
        while delta("larder_requests_total", op="GetObject") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(delta("larder_requests_total", op="GetObject"), 2)
        self.assertEqual(delta("larder_cache_requests_total"), 2)
        self.assertEqual(delta("larder_response_body_bytes_total", op="GetObject"),
                         2 * len(data))
        self.assertEqual(delta("larder_upstream_requests_total"), len(s3))
        self.assertEqual(delta("larder_upstream_response_bytes_total"),
                         sum(r["bytes_out"] for r in s3))
        # What went between the nodes is there, apart.
        peer = delta("larder_peer_requests_total")
        self.assertGreater(peer, 0)
        self.assertEqual(delta("larder_peer_served_total"), peer)
        # /admin/stats says the same: totals of clients' requests, peers in their own rows.
        docs = [self.stats(n) for n in self.nodes]
        self.assertEqual(sum(d["upstream"]["requests"] for d in docs),
                         sum(self.total(self.metrics(n), "larder_upstream_requests_total")
                             for n in self.nodes))
        for d in docs:
            self.assertFalse([k for k in d["clients"] if k.startswith("peer:")], d["clients"])
            self.assertEqual(sum(r["requests"] for r in d["clients"].values()),
                             d["total"]["requests"])
        self.assertEqual(sum(r["requests"] for d in docs for r in d["peers"].values()), peer)


if __name__ == "__main__":
    unittest.main()
