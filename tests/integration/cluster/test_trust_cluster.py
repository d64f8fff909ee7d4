"""What an attacker on the network, in Redis or on the host cannot do to the cluster and the ports.

- The admin port refuses a request by its headers (token, route, declared body size) before it
  reads a byte of the body, so unauthenticated connections cannot make it buffer megabytes.
- A member entry in Redis that is not signed with the cluster secret is ignored: no node counts
  it, sends it requests or takes bytes from it.
- A peer request is bound to the node it was sent to and to the headers that shape the answer.
- A member with the secret that answers chunk requests for another version (ETag or size) gets
  none of those bytes served or cached: the node reads S3 instead.
- The client port cannot be shared with another process, and the open-file limit is raised so
  LARDER_MAX_CONNECTIONS can be reached (503 SlowDown beyond it, not failed accepts).
"""
import hashlib
import hmac
import http.server
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import harness
from test_cluster import SECRET, TOKEN, ClusterBase, blob, peer_headers

MiB = 1024 * 1024


def admin_larder(binary=None):
    env = {"LARDER_ADMIN_TOKEN": TOKEN}
    n = harness.Larder(None, env=env, binary=binary)
    n.admin_port = harness.free_port()
    n.env["LARDER_ADMIN_LISTEN"] = "127.0.0.1:%d" % n.admin_port
    n.env["AWS_ACCESS_KEY_ID"] = "AKIDEXAMPLE"
    n.env["AWS_SECRET_ACCESS_KEY"] = "secret-for-tests"
    n.env["LARDER_UPSTREAM_URL"] = "http://127.0.0.1:9"
    return n


def read_response(sock, timeout):
    """The status line and headers of the first response on sock, or None."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            got = sock.recv(65536)
            if not got:
                break
            data += got
    except (socket.timeout, ConnectionResetError):
        pass
    return data if b"\r\n\r\n" in data else None


def vm_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class AdminBodies(unittest.TestCase):
    """Item 3: the admin port decides on the headers, and bounds bodies per route."""

    @classmethod
    def setUpClass(cls):
        binary = harness.plain_larder_binary()
        if not os.access(binary, os.X_OK):
            raise unittest.SkipTest("plain larder binary not built")
        cls.larder = admin_larder(binary).start()
        if not harness.wait_port(cls.larder.admin_port, 10, cls.larder.proc):
            raise RuntimeError("admin port not listening: " + cls.larder.log())

    @classmethod
    def tearDownClass(cls):
        code = cls.larder.stop()
        log = cls.larder.log()
        cls.larder.cleanup()
        if code != 0:
            raise AssertionError("larder exited %r: %s" % (code, log[-2000:]))

    def open_post(self, path, length, token=None):
        s = socket.create_connection(("127.0.0.1", self.larder.admin_port), timeout=10)
        head = "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
               "Content-Length: %d\r\n" % (path, length)
        if token:
            head += "Authorization: Bearer %s\r\n" % token
        s.sendall((head + "\r\n").encode())
        return s

    def test_unauthenticated_body_refused_before_it_is_read(self):
        for token in (None, "wrong-token-0000000000"):
            s = self.open_post("/admin/prefetch", 8 * MiB - 1, token)
            try:
                s.sendall(b"{" * 65536)  # a start of the body, no more
                head = read_response(s, 3)
            finally:
                s.close()
            self.assertIsNotNone(head, "no answer until the whole body was sent (token %r)"
                                 % token)
            self.assertTrue(head.startswith(b"HTTP/1.1 401"), head)

    def test_many_unauthenticated_bodies_keep_memory_flat(self):
        pid = self.larder.pid
        before = vm_rss(pid)
        body = b" " * (8 * MiB - 1)
        answers = []

        def one():
            s = self.open_post("/admin/prefetch", len(body))
            try:
                s.sendall(body)
            except OSError:
                pass  # refused: the server closed without reading the body
            answers.append(read_response(s, 10))
            s.close()

        threads = [threading.Thread(target=one) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        grown = vm_rss(pid) - before
        self.assertLess(grown, 32 * MiB, "RSS grew by %d MiB for 24 unauthenticated bodies"
                        % (grown // MiB))
        self.assertTrue(all(a is None or a.startswith(b"HTTP/1.1 401") for a in answers),
                        answers)

    def test_too_large_authenticated_body_is_413_unread(self):
        s = self.open_post("/admin/purge", 4 * MiB, TOKEN)
        try:
            head = read_response(s, 3)
        finally:
            s.close()
        self.assertIsNotNone(head, "a 4 MiB purge body was waited for")
        self.assertTrue(head.startswith(b"HTTP/1.1 413"), head)
        # A small purge is still fine; a GET route takes no body.
        req = urllib.request.Request(
            "http://127.0.0.1:%d/admin/purge" % self.larder.admin_port, method="POST",
            data=json.dumps({"bucket": "shared", "prefix": "x/"}).encode(),
            headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            self.assertEqual(r.status, 200)
        s = socket.create_connection(("127.0.0.1", self.larder.admin_port), timeout=10)
        s.sendall(("GET /admin/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: 100000\r\n\r\n" % TOKEN).encode())
        head = read_response(s, 3)
        s.close()
        self.assertIsNotNone(head)
        self.assertTrue(head.startswith(b"HTTP/1.1 413"), head)


def hmac_hex(secret, msg):
    return hmac.new(secret.encode(), msg.encode(), hashlib.sha256).hexdigest()


CLUSTER_PROTOCOL = 2  # cluster/cluster.h


def member_value(addr, cap, entries, expiry_ms, secret, node_id, protocol=CLUSTER_PROTOCOL):
    """A membership entry as a node with secret writes it (docs/cluster.md); protocol None: as
    a larder from before the protocol field wrote it."""
    body = "%s\t%s\t%d\t%d" % (addr, cap, entries, expiry_ms)
    if protocol is not None:
        body += "\t%d" % protocol
    return "%s\t%s" % (body, hmac_hex(secret, "larder-member-v1\n%s\n%s" % (node_id, body)))


class Rogue:
    """A listener that counts the connections made to it and never answers (or, with close,
    closes them at once: a request sent there fails at once)."""

    def __init__(self, close=False):
        self.close_at_once = close
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self.conns = []
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            if self.close_at_once:
                c.close()
            else:
                self.conns.append(c)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


class RedisTrust(ClusterBase):
    """Item 5: membership entries must be signed with the cluster secret."""
    NODES = 2

    def redis_cmd(self, *args):
        out = subprocess.run(["redis-cli", "-p", str(self.redis.port)] + list(args),
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip()

    def test_forged_member_is_ignored(self):
        rogue = Rogue()
        self.addCleanup(rogue.close)
        addr = "127.0.0.1:%d" % rogue.port
        # Unsigned (the old format), signed with the wrong secret, and a
        # replay of a valid-looking entry under another id.
        far = int(time.time() * 1000) + 3600 * 1000
        forged = {
            "evil-plain": "%s\t1e18\t0" % addr,
            "evil-wrongkey": member_value(addr, "1e18", 0, far, "not-the-cluster-secret-00",
                                          "evil-wrongkey"),
            "evil-renamed": member_value(addr, "1e18", 0, far, SECRET, "someone-else"),
        }
        for node_id, val in forged.items():
            self.redis_cmd("SET", "larder:node:" + node_id, val, "PX", "600000")
            self.redis_cmd("SADD", "larder:nodes", node_id)
        self.addCleanup(lambda: [self.redis_cmd("DEL", "larder:node:" + k) for k in forged])
        self.wait_heartbeats(2)  # the second began after the entries were written
        for n in self.nodes:
            v = self.view(n)
            ids = sorted(m["id"] for m in v["members"])
            self.assertEqual(ids, ["node-0", "node-1"], v)
            self.assertGreaterEqual(v.get("members_rejected", 0), 3, v)
        data = blob(51, 3 * MiB + 17)
        self.direct.put_object(Bucket="shared", Key="trust/a.bin", Body=data)
        for n in self.nodes:
            self.assertEqual(self.read(n, "trust/a.bin"), data)
        self.assertEqual(rogue.hits, 0, "a node sent a request to a forged member")
        self.assertIn("membership entr", self.nodes[0].log())
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % self.nodes[0].admin_port,
                                     headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            metrics = r.read().decode()
        rejected = [line for line in metrics.splitlines()
                    if line.startswith("larder_cluster_members_rejected_total ")]
        self.assertEqual(len(rejected), 1, metrics)
        self.assertGreaterEqual(float(rejected[0].split()[1]), 3)
        # A member that really has the secret still joins (the test computes
        # the MAC as a node does): the format is what docs/cluster.md says.
        good = member_value("127.0.0.1:1", "1", 0, int(time.time() * 1000) + 3000, SECRET,
                            "signed-node")
        self.redis_cmd("SET", "larder:node:signed-node", good, "PX", "3000")
        self.redis_cmd("SADD", "larder:nodes", "signed-node")
        deadline = time.monotonic() + 3
        seen = False
        while time.monotonic() < deadline and not seen:
            seen = "signed-node" in [m["id"] for m in self.view(self.nodes[0])["members"]]
            time.sleep(0.2)
        self.redis_cmd("DEL", "larder:node:signed-node")
        self.assertTrue(seen, "a correctly signed entry was not accepted")


    def test_forged_channel_messages_are_ignored(self):
        # larder:invalidate carries invalidations, pin ends and access
        # profiles; whoever can PUBLISH there without the secret is heard
        # by nobody.
        data = blob(52, MiB + 5)
        self.direct.put_object(Bucket="shared", Key="trust/inval.bin", Body=data)
        a = self.nodes[0]
        self.assertEqual(self.read(a, "trust/inval.bin"), data)
        before = self.view(a).get("invalidations_rejected", 0)
        far = int(time.time() * 1000) + 60000
        # Sent as from no member: a node skips its own, and the object's owner must hear it
        # too, or it would answer the others' learning with the old version.
        body = "%d\nnode-9\nshared\ntrust/inval.bin" % far
        forged = ["node-1\nshared\ntrust/inval.bin",  # the unsigned format of before
                  hmac_hex("not-the-cluster-secret-00", "larder-inval-v1\n" + body) + "\n" + body,
                  "node-1\n!profile\nstart\nnode-1\nspy\nkey\n" + harness.CLIENT_KEY]
        for msg in forged:
            self.redis_cmd("PUBLISH", "larder:invalidate", msg)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and \
                self.view(a).get("invalidations_rejected", 0) < before + len(forged):
            time.sleep(0.1)
        self.assertEqual(self.view(a).get("invalidations_rejected", 0), before + len(forged))
        m = self.upstream.mark()
        self.assertEqual(self.read(a, "trust/inval.bin"), data)
        self.assertEqual(self.gets(m, "trust/inval.bin"), [],
                         "a forged invalidation made the node learn the object again")
        # Signed with the secret, the same invalidation is heard.
        self.redis_cmd("PUBLISH", "larder:invalidate",
                       hmac_hex(SECRET, "larder-inval-v1\n" + body) + "\n" + body)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not self.gets(m, "trust/inval.bin"):
            self.read(a, "trust/inval.bin")
            time.sleep(0.1)
        self.assertNotEqual(self.gets(m, "trust/inval.bin"), [],
                            "a signed invalidation was not heard")


class RedisPassword(ClusterBase):
    """Item 5: a Redis with a password (as docker/ sets it up) and nodes that send it."""
    NODES = 2
    REDIS_PASSWORD = "0123456789abcdef0123456789abcdef"

    def test_nodes_with_the_password_form_the_cluster(self):
        data = blob(53, 2 * MiB + 1)
        self.direct.put_object(Bucket="shared", Key="pw/a.bin", Body=data)
        self.assertEqual(self.read(self.nodes[0], "pw/a.bin"), data)
        mark = self.upstream.mark()
        self.assertEqual(self.read(self.nodes[1], "pw/a.bin"), data)
        self.assertEqual(self.gets(mark, "pw/a.bin"), [])
        for n in self.nodes:  # directory lookups (their own connections) authenticate too
            self.assertEqual(self.view(n)["directory"]["lookups"]["failed"], 0)

    def test_node_without_the_password_works_alone(self):
        n = self.make_node(9)
        n.env["LARDER_REDIS_URL"] = "redis://127.0.0.1:%d" % self.redis.port
        n.start()
        self.addCleanup(n.cleanup)
        deadline = time.monotonic() + 10  # its first heartbeat, refused
        while "NOAUTH" not in n.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        v = self.view(n)
        self.assertFalse(v["redis_up"], v)
        self.assertEqual(len(self.view(self.nodes[0])["members"]), 2)
        self.assertIn("NOAUTH", n.log())
        self.assertNotIn(self.REDIS_PASSWORD, n.log() + self.nodes[0].log())
        self.assertEqual(n.stop(), 0)


class PeerBinding(ClusterBase):
    """Item 9: a peer request is valid only at its target, with its own Range."""
    NODES = 2

    def test_replay_to_another_node_or_range_refused(self):
        a, b = self.nodes
        self.direct.put_object(Bucket="shared", Key="bind/x.txt", Body=b"0123456789")
        path = "/shared/bind/x.txt"
        target_a = "127.0.0.1:%d" % a.port
        h = peer_headers(path, "replayer", target_a, "1" * 32, rng="bytes=0-3")
        # Replayed to B (with B's Host, or A's): refused.
        st, body = self.raw_get(b, path, dict(h, Host="127.0.0.1:%d" % b.port))
        self.assertEqual(st, 403, body)
        st, body = self.raw_get(b, path, h)
        self.assertEqual(st, 403, body)
        # The same signature with another Range, at A: refused.
        st, body = self.raw_get(a, path, dict(h, Range="bytes=4-9"))
        self.assertEqual(st, 403, body)
        self.assertEqual(harness.s3_error(body)[0], "AccessDenied")
        # The request as signed, at A: served.
        st, body = self.raw_get(a, path, h)
        self.assertEqual((st, body), (206, b"0123"))
        # And real peer traffic still works: a cold object read through B.
        data = blob(52, 2 * MiB + 5)
        self.direct.put_object(Bucket="shared", Key="bind/y.bin", Body=data)
        self.assertEqual(self.read(b, "bind/y.bin"), data)
        self.assertEqual(self.read(a, "bind/y.bin"), data)
        self.assertNotIn("refused a peer request from node-", a.log() + b.log())

    def test_date_at_the_ends_of_the_range_refused(self):
        """Anyone may send the peer headers: a date no clock can be near is
        refused like any other, before the signature is even looked at."""
        a = self.nodes[0]
        self.direct.put_object(Bucket="shared", Key="bind/date.txt", Body=b"dated")
        path = "/shared/bind/date.txt"
        target = "127.0.0.1:%d" % a.port
        for i, date in enumerate(("-9223372036854775808", "-9223372036854775000",
                                  "9223372036854775807", "-99999999999999999999")):
            h = peer_headers(path, "dater", target, "%x" % (i + 4) * 32, date=date)
            st, body = self.raw_get(a, path, h)
            self.assertEqual(st, 403, "date %s: %r" % (date, body))
            self.assertEqual(harness.s3_error(body)[0], "AccessDenied")
        self.assertTrue(a.alive(), a.log()[-2000:])
        st, body = self.raw_get(a, path, peer_headers(path, "dater", target, "9" * 32))
        self.assertEqual((st, body), (200, b"dated"))

    def test_replayed_after_a_restart_refused(self):
        """A restarted node has forgotten the nonces its process before took:
        it refuses every peer request dated before it started."""
        a, b = self.nodes
        self.direct.put_object(Bucket="shared", Key="bind/restart.txt", Body=b"restart")
        path = "/shared/bind/restart.txt"
        h = peer_headers(path, "replayer", "127.0.0.1:%d" % a.port, "5" * 32)
        st, body = self.raw_get(a, path, h)
        self.assertEqual((st, body), (200, b"restart"))
        self.assertEqual(a.stop(), 0)
        a.start()
        self.wait_members(2)
        st, body = self.raw_get(a, path, h)
        self.assertEqual(st, 403, "a request taken before the restart was taken again")
        self.assertEqual(harness.s3_error(body)[0], "AccessDenied")
        # Requests signed since are taken, and the nodes read through each other.
        st, body = self.raw_get(a, path, peer_headers(path, "replayer", "127.0.0.1:%d" % a.port,
                                                      "6" * 32))
        self.assertEqual((st, body), (200, b"restart"))
        data = blob(54, 2 * MiB + 7)
        self.direct.put_object(Bucket="shared", Key="bind/after.bin", Body=data)
        self.assertEqual(self.read(b, "bind/after.bin"), data)
        self.assertEqual(self.read(a, "bind/after.bin"), data)

    def test_tampered_pin_refused(self):
        """X-Larder-Pin makes the owner hold chunks: it is signed with the request."""
        a = self.nodes[0]
        self.direct.put_object(Bucket="shared", Key="bind/pin.bin", Body=b"p" * 1000)
        path = "/shared/bind/pin.bin"
        target = "127.0.0.1:%d" % a.port
        pin = "node-1/pf-signed %d" % (int(time.time()) + 3)
        h = peer_headers(path, "node-1", target, "2" * 32, hop="2", pin=pin)
        for tampered in ("node-1/pf-other %d" % (int(time.time()) + 3),
                         "node-1/pf-signed %d" % (int(time.time()) + 86400)):
            st, body = self.raw_get(a, path, dict(h, **{"X-Larder-Pin": tampered}))
            self.assertEqual(st, 403, body)
            self.assertEqual(harness.s3_error(body)[0], "AccessDenied")
        # Added to a request signed without one: refused too.
        h2 = peer_headers(path, "node-1", target, "3" * 32, hop="2")
        st, body = self.raw_get(a, path, dict(h2, **{"X-Larder-Pin": pin}))
        self.assertEqual(st, 403, body)
        self.assertEqual(self.admin(a, "GET", "/admin/stats")["pins"], [])
        # As signed: served, and pinned under that name.
        st, body = self.raw_get(a, path, h)
        self.assertEqual((st, body), (200, b"p" * 1000))
        self.assertEqual([p["id"] for p in self.admin(a, "GET", "/admin/stats")["pins"]],
                         ["node-1/pf-signed"])


class RoguePeer:
    """A member that has the cluster secret and answers peer chunk requests (a
    Range with If-Match, gateway/fetch.c) with the bytes of another version. A
    request without If-Match (learning an object: chunk 0 and its metadata) it
    refuses with 503, so the node learns the object from S3 itself."""

    def __init__(self):
        self.objects = {}  # path -> (bytes it serves, ETag it names, total size it names)
        self.lies = {}     # path -> chunk answers of another version sent
        self.short = set() # paths whose chunk answers stop halfway
        rogue = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle(self):
                try:
                    super().handle()
                except OSError:
                    pass  # the node broke off the transfer: as it should

            def do_GET(self):
                rogue.answer(self)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, h):
        obj = self.objects.get(h.path)
        rng = re.fullmatch(r"bytes=(\d+)-(\d+)", h.headers.get("Range", ""))
        if not obj or not rng or not h.headers.get("If-Match"):
            body = b"<Error><Code>SlowDown</Code></Error>"
            h.send_response(503)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        data, etag, total = obj
        a, b = int(rng.group(1)), int(rng.group(2))
        self.lies[h.path] = self.lies.get(h.path, 0) + 1
        # short: the range's headers, but a body (and Content-Length) of
        # half of it, ended cleanly
        n = (b + 1 - a) // 2 if h.path in self.short else b + 1 - a
        h.send_response(206)
        h.send_header("ETag", etag)
        h.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, total))
        h.send_header("Content-Length", str(n))
        h.end_headers()
        h.wfile.write(data[a:a + n])

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class PeerAnswerChecks(ClusterBase):
    """Items 4 and 5: a member with the secret (so a signed membership entry)
    whose chunk answers name another ETag or another total size than the
    object's metadata, learnt from S3. The node must serve S3's bytes and cache
    none of the rogue's. (An answer naming the right ETag and size is trusted
    by design: peers have the secret, and the node cannot tell such bytes from
    S3's without fetching them from S3, which the cluster exists to avoid.)"""
    NODES = 1
    redis_cmd = RedisTrust.redis_cmd

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.rogue = RoguePeer()

    @classmethod
    def tearDownClass(cls):
        cls.rogue.close()
        super().tearDownClass()

    def rogue_joins(self):
        # A capacity of 1e18 (an EB): the rogue owns every chunk (all but surely).
        val = member_value("127.0.0.1:%d" % self.rogue.port, "1e18", 0,
                           int(time.time() * 1000) + 600000, SECRET, "rogue")
        self.redis_cmd("SET", "larder:node:rogue", val, "PX", "600000")
        self.redis_cmd("SADD", "larder:nodes", "rogue")
        self.addCleanup(self.rogue_leaves)
        self.wait_members(2)

    def rogue_leaves(self):
        self.redis_cmd("DEL", "larder:node:rogue")
        self.redis_cmd("SREM", "larder:nodes", "rogue")
        self.wait_members(1)

    def get(self, path, rng=None):
        return harness.signed_request(self.nodes[0].url, "GET", path,
                                      {"Range": rng} if rng else None)

    def assert_s3_bytes(self, key, seed, etag_of, total_of):
        """etag_of(etag, its bytes) and total_of(size): what the rogue names."""
        data = blob(seed, 3 * MiB + 17)  # 4 chunks
        etag = self.direct.put_object(Bucket="shared", Key=key, Body=data)["ETag"]
        path = "/shared/" + key
        other = blob(seed + 1, 4 * MiB + 17)  # another version's bytes
        self.rogue.objects[path] = (other, etag_of(etag, other[:len(data)]),
                                    total_of(len(data)))
        self.rogue_joins()
        # A range across chunks 1 and 2 (the node decides on the first chunk
        # before the headers), then the whole object (chunks met mid-body).
        lo, hi = MiB + 5, 2 * MiB + 10
        r = self.get(path, "bytes=%d-%d" % (lo, hi))
        self.assertEqual((r.status, r.headers.get("etag")), (206, etag), r)
        self.assertTrue(r.complete and r.body == data[lo:hi + 1],
                        "a range read served other bytes than S3's: %r" % r)
        self.assertGreater(self.rogue.lies.get(path, 0), 0,
                           "the rogue was never asked for a chunk: this test shows nothing")
        for what in ("first", "again"):
            r = self.get(path)
            self.assertEqual((r.status, r.headers.get("etag")), (200, etag), "%s: %r" % (what, r))
            self.assertTrue(r.complete and r.body == data,
                            "%s read: not S3's bytes: %r" % (what, r))
        # The rogue gone, whatever the node kept must be S3's bytes.
        self.rogue_leaves()
        for rng, want in ((None, data), ("bytes=%d-%d" % (lo, hi), data[lo:hi + 1]),
                          ("bytes=-100", data[-100:])):
            r = self.get(path, rng)
            self.assertTrue(r.complete and r.body == want and r.headers.get("etag") == etag,
                            "after the rogue left (Range %s): %r" % (rng, r))

    def test_peer_answer_with_other_etag_is_not_served(self):
        self.assert_s3_bytes("rogue/etag.bin", 54, lambda etag, other: '"%s"' % hashlib.md5(
            other).hexdigest(), lambda size: size)

    def test_peer_answer_with_other_size_is_not_served(self):
        self.assert_s3_bytes("rogue/size.bin", 56, lambda etag, other: etag,
                             lambda size: size + MiB)

    def test_peer_answer_cut_short_is_fetched_from_s3(self):
        """The right ETag and size, but the body ends cleanly (its
        Content-Length honest) halfway through the range: the rest of the
        chunk comes from S3, and the client gets every byte."""
        key = "rogue/short.bin"
        path = "/shared/" + key
        data = blob(58, 3 * MiB + 17)  # 4 chunks
        etag = self.direct.put_object(Bucket="shared", Key=key, Body=data)["ETag"]
        self.rogue.objects[path] = (data, etag, len(data))  # S3's bytes, but short
        self.rogue.short.add(path)
        self.addCleanup(self.rogue.short.discard, path)
        self.rogue_joins()
        lo, hi = MiB + 5, 2 * MiB + 10
        r = self.get(path, "bytes=%d-%d" % (lo, hi))
        self.assertEqual((r.status, r.headers.get("etag")), (206, etag), r)
        self.assertTrue(r.complete and r.body == data[lo:hi + 1], "range read: %r" % r)
        self.assertGreater(self.rogue.lies.get(path, 0), 0,
                           "the rogue was never asked for a chunk: this test shows nothing")
        r = self.get(path)
        self.assertEqual((r.status, r.headers.get("etag")), (200, etag), r)
        self.assertTrue(r.complete and r.body == data, "whole read: %r" % r)


class ClientPort(unittest.TestCase):
    """Item 14: nobody else may share the client port."""

    def run_larder(self, port):
        n = harness.Larder(None, env={"LARDER_LISTEN": "127.0.0.1:%d" % port,
                                      "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
                                      "AWS_SECRET_ACCESS_KEY": "secret-for-tests",
                                      "LARDER_UPSTREAM_URL": "http://127.0.0.1:9"})
        n.port = port
        self.addCleanup(n.cleanup)
        err = open(n.stderr_path, "wb")
        n.proc = subprocess.Popen([harness.larder_binary(), "serve"], env=n.env, stdout=err,
                                  stderr=err, stdin=subprocess.DEVNULL)
        err.close()
        return n

    def assert_refused(self, n):
        try:
            code = n.proc.wait(15)
        except subprocess.TimeoutExpired:
            code = None
        self.assertIsNotNone(code, "larder started on a port another process holds")
        self.assertNotEqual(code, 0)
        self.assertIn("already in use", n.log())

    def test_port_held_with_reuseport_refused(self):
        if not os.access(harness.larder_binary(), os.X_OK):
            self.skipTest("larder binary not built")
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        self.addCleanup(s.close)
        self.assert_refused(self.run_larder(s.getsockname()[1]))

    def test_second_larder_refused(self):
        if not os.access(harness.larder_binary(), os.X_OK):
            self.skipTest("larder binary not built")
        first = self.run_larder(harness.free_port())
        self.assertTrue(harness.wait_port(first.port, 30, first.proc), first.log())
        self.assert_refused(self.run_larder(first.port))
        self.assertTrue(first.alive())
        self.assertEqual(first.stop(), 0, first.log())


    def test_admin_port_held_refused_before_the_cache_is_opened(self):
        """An admin port another process holds stops the start before the NVMe tier is
        opened (recovered, possibly for minutes) or a cluster joined, with one error that
        names the setting and nothing from libmicrohttpd."""
        if not os.access(harness.larder_binary(), os.X_OK):
            self.skipTest("larder binary not built")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        self.addCleanup(s.close)
        cache = tempfile.mkdtemp(prefix="larder-adminport-")
        self.addCleanup(shutil.rmtree, cache, True)
        n = harness.Larder(None, env={"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
                                      "AWS_SECRET_ACCESS_KEY": "secret-for-tests",
                                      "LARDER_UPSTREAM_URL": "http://127.0.0.1:9",
                                      "LARDER_CACHE_DIR": cache,
                                      "LARDER_ADMIN_LISTEN": "127.0.0.1:%d"
                                      % s.getsockname()[1]})
        self.addCleanup(n.cleanup)
        err = open(n.stderr_path, "wb")
        n.proc = subprocess.Popen([harness.larder_binary(), "serve"], env=n.env, stdout=err,
                                  stderr=err, stdin=subprocess.DEVNULL)
        err.close()
        self.assertEqual(n.proc.wait(15), 1, n.log())
        self.assertIn("LARDER_ADMIN_LISTEN: cannot listen on 127.0.0.1:%d (Address already in "
                      "use)" % s.getsockname()[1], n.log())
        self.assertNotIn("Failed to bind", n.log())
        self.assertEqual(os.listdir(cache), [], "the cache was opened: " + n.log())


class OpenFileLimit(harness.LarderCase):
    """Item 17: a low soft RLIMIT_NOFILE is raised so max_connections is reached. The admin
    API tells how many connections larder counts (wait_connections)."""
    LARDER_ENV = dict({"LARDER_MAX_CONNECTIONS": "100"}, **harness.Larder.admin_env())
    NOFILE = 64     # soft limit larder starts with
    HARD = None     # hard limit (None: as is)
    IDLE = 110      # connections held open before the request that must get 503

    @classmethod
    def setUpClass(cls):
        real = subprocess.Popen

        def low_nofile():
            hard = cls.HARD or resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(cls.NOFILE, hard), hard))

        def popen(*a, **kw):
            kw.setdefault("preexec_fn", low_nofile)
            return real(*a, **kw)

        subprocess.Popen = popen
        try:
            super().setUpClass()
        finally:
            subprocess.Popen = real

    def wait_connections(self, pred, what, timeout=15):
        """larder_client_connections, what larder counts against LARDER_MAX_CONNECTIONS, once
        pred holds it: a connection counts once a worker accepted it, and stops counting once
        a worker saw it close, each a moment after the test's side of it."""
        deadline = time.monotonic() + timeout
        while True:
            n = self.larder.client_connections()
            if pred(n):
                return n
            self.assertLess(time.monotonic(), deadline, "%s: %d connections" % (what, n))
            time.sleep(0.05)

    def test_past_max_connections_slowdown_not_failed_accept(self):
        self.direct.create_bucket(Bucket="fds")
        self.direct.put_object(Bucket="fds", Key="k", Body=b"hello")
        idle = []
        self.addCleanup(lambda: [s.close() for s in idle])
        for _ in range(self.IDLE):
            idle.append(socket.create_connection(("127.0.0.1", self.larder.port), timeout=10))
        self.wait_connections(lambda n: n >= self.IDLE, "the idle connections taken in")
        r = harness.signed_request(self.larder.url, "GET", "/fds/k", timeout=10)
        self.assertEqual(r.status, 503, r)
        self.assertEqual(harness.s3_error(r.body)[0], "SlowDown")
        for s in idle[:60]:
            s.close()
        idle[:60] = []
        self.wait_connections(lambda n: n <= self.IDLE - 60, "the closed connections let go")
        r = harness.signed_request(self.larder.url, "GET", "/fds/k", timeout=10)
        self.assertEqual((r.status, r.body), (200, b"hello"))
        self.assertIn("open-file limit", self.larder.log())


class OpenFileHardLimit(OpenFileLimit):
    """Item 17: past the hard limit, max_connections is lowered to what fits, and said."""
    LARDER_ENV = dict({"LARDER_MAX_CONNECTIONS": "4096"}, **harness.Larder.admin_env())
    NOFILE = 64
    HARD = 1224     # 1,024 reserved, room for 100 connections
    IDLE = 110

    def test_lowered_and_said(self):
        self.assertIn("LARDER_MAX_CONNECTIONS lowered from 4096", self.larder.log())


class OpenFileLimitManyWorkers(OpenFileLimit):
    """Each worker's libmicrohttpd took max + 256 connections, so 8 workers
    took 8 x 356 while the open-file limit was sized for 2 x 100 + 1,024:
    1,400 idle connections used every descriptor, new clients hung in the
    backlog and /healthz timed out. Past max + 256 over all workers a
    connection is now closed as it is accepted."""
    LARDER_ENV = dict({"LARDER_MAX_CONNECTIONS": "100", "LARDER_WORKERS": "8"},
                      **harness.Larder.admin_env())
    NOFILE = 64
    IDLE = 110

    def test_idle_connections_leave_descriptors(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < 3000:
            self.skipTest("this test process needs 3,000 descriptors")
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 3000), hard))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        idle = []
        self.addCleanup(lambda: [s.close() for s in idle])
        for _ in range(1400):
            try:
                idle.append(socket.create_connection(("127.0.0.1", self.larder.port), timeout=2))
            except OSError:
                pass
        for s in idle:
            s.setblocking(False)

        def closed_by_larder():
            n = 0
            for s in idle:
                try:
                    n += s.recv(1, socket.MSG_PEEK) == b""
                except BlockingIOError:
                    pass  # open, nothing to read
                except OSError:
                    n += 1  # reset
            return n
        # Until larder has taken in every one: counted (up to max + 256 over the workers) or
        # closed as it was accepted. Those still in the accept queues hold no descriptor of
        # larder's yet.
        self.wait_connections(lambda n: n + closed_by_larder() >= len(idle),
                              "every connection counted or closed", timeout=60)
        with open("/proc/%d/limits" % self.larder.proc.pid) as f:
            limit = int([l for l in f if l.startswith("Max open files")][0].split()[3])
        used = len(os.listdir("/proc/%d/fd" % self.larder.proc.pid))
        self.assertLess(used, limit - 500, "descriptors used by idle clients")
        admin = self.LARDER_ENV["LARDER_ADMIN_LISTEN"]
        with urllib.request.urlopen("http://%s/healthz" % admin, timeout=5) as r:
            self.assertEqual(r.status, 200)
        for s in idle:
            s.close()
        idle.clear()
        self.wait_connections(lambda n: n == 0, "the closed connections let go")
        self.direct.create_bucket(Bucket="fds8")
        self.direct.put_object(Bucket="fds8", Key="k", Body=b"hello")
        r = harness.signed_request(self.larder.url, "GET", "/fds8/k", timeout=10)
        self.assertEqual((r.status, r.body), (200, b"hello"))


if __name__ == "__main__":
    unittest.main()
