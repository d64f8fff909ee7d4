"""Three larder nodes, one Redis, one upstream: a single shared warm tier.

What a user of the cluster sees: any node serves any client, a chunk is
fetched from S3 once for the whole cluster, failures are a slower path and
never an error, and a write through one node is seen by the others.
"""
import hashlib
import hmac
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import botocore.exceptions

import harness

MiB = 1024 * 1024
SECRET = "cluster-secret-for-tests-0123456789"
TOKEN = "cluster-admin-token-0123456789"


def blob(seed, n):
    import random
    return random.Random(seed).randbytes(n)


def peer_headers(path, node, target, nonce, rng="", if_match="", if_none_match="",
                 secret=SECRET, date=None, hop="1", pin=""):
    """The headers of a GET from node to the node at target, as cluster/peer.h defines them."""
    date = str(int(time.time())) if date is None else date
    msg = "\n".join(["larder-peer-v3", "GET", path, date, node, target, nonce, hop, rng,
                     if_match, if_none_match, "", "", pin])
    sig = hmac.new(secret.encode(), msg.encode(), hashlib.sha256).hexdigest()
    h = {"X-Larder-Peer": node, "X-Larder-Peer-Date": date, "X-Larder-Peer-Nonce": nonce,
         "X-Larder-Peer-Hop": hop, "X-Larder-Peer-Auth": sig, "Host": target}
    if rng:
        h["Range"] = rng
    if pin:
        h["X-Larder-Pin"] = pin
    return h


class Redis:
    def __init__(self, password=None):
        self.port = harness.free_port()
        self.password = password
        self.url = "redis://%s127.0.0.1:%d" % (":%s@" % password if password else "", self.port)
        self.dir = tempfile.mkdtemp(prefix="larder-redis-")
        self.proc = None

    def start(self):
        exe = shutil.which("redis-server")
        if not exe:
            raise unittest.SkipTest("redis-server is not installed (scripts/deps.sh installs it)")
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", self.dir]
                                     + (["--requirepass", self.password] if self.password else []),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not harness.wait_port(self.port, 10, self.proc):
            raise RuntimeError("redis-server did not start")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class ClusterBase(harness.S3Asserts, unittest.TestCase):
    """N nodes on loopback, one redis-server, the moto upstream; no tests."""
    NODES = 3
    REDIS_PASSWORD = None
    NVME = False  # True: node i has an NVMe tier of 64 MiB in its own folder, kept across restarts
    PREVIOUS_NODE = False  # node-1 runs the previous release (OnePreviousNode)

    @classmethod
    def extra_env(cls):
        return {}

    @classmethod
    def setUpClass(cls):
        if not os.access(harness.larder_binary(), os.X_OK):
            raise unittest.SkipTest("larder binary not built")
        cls.redis = Redis(cls.REDIS_PASSWORD).start()
        cls.upstream = cls.make_upstream()
        try:
            cls.direct = cls.upstream.client()
            cls.direct.create_bucket(Bucket="shared")
            cls.nodes = [cls.make_node(i) for i in range(cls.NODES)]
            for n in cls.nodes:
                n.start()
            cls.wait_members(cls.NODES)
        except BaseException as e:
            # unittest skips tearDownClass after a failed setUpClass: stop
            # what started here, or the nodes, moto and Redis outlive the run.
            try:
                cls.tearDownClass()
            except AssertionError as problems:
                raise AssertionError("%s\nand stopping the nodes: %s" % (e, problems)) from e
            raise

    @classmethod
    def make_upstream(cls):
        """The S3 the nodes read, started: moto (harness.Upstream) unless a class says."""
        return harness.Upstream().start()

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        env = {
            "LARDER_REDIS_URL": cls.redis.url,
            "LARDER_NODE_ID": "node-%d" % i,
            "LARDER_CLUSTER_SECRET": SECRET,
            "LARDER_CHUNK_SIZE": "1MiB",
            "LARDER_METADATA_TTL": "immutable",
            "LARDER_ADMIN_TOKEN": TOKEN,
        }
        if cls.NVME:
            if "cache_dirs" not in cls.__dict__:
                cls.cache_dirs = {}
            if i not in cls.cache_dirs:
                cls.cache_dirs[i] = tempfile.mkdtemp(prefix="larder-cache-node-%d-" % i)
            env.update({"LARDER_CACHE_DIR": cls.cache_dirs[i], "LARDER_DISK_CACHE_SIZE": "64MiB"})
        env.update(cls.extra_env())
        n = harness.Larder(cls.upstream, env=env)
        if port:
            n.port, n.url = port, "http://127.0.0.1:%d" % port
            n.env["LARDER_LISTEN"] = "127.0.0.1:%d" % port
        n.admin_port = admin or harness.free_port()
        n.env["LARDER_ADVERTISE"] = "127.0.0.1:%d" % n.port
        n.env["LARDER_ADMIN_LISTEN"] = "127.0.0.1:%d" % n.admin_port
        return n

    @classmethod
    def view(cls, node):
        req = urllib.request.Request("http://127.0.0.1:%d/admin/cluster" % node.admin_port,
                                     headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    @classmethod
    def metrics_text(cls, node):
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % node.admin_port,
                                     headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read().decode()

    @classmethod
    def redis_cli(cls, *args):
        out = subprocess.run(["redis-cli", "-p", str(cls.redis.port)] + list(args),
                             capture_output=True, text=True, timeout=10)
        assert out.returncode == 0 and not out.stdout.startswith("ERR"), out
        return out.stdout.strip()

    def wait_view(self, node, pred, what, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = self.view(node)
            if pred(v):
                return v
            time.sleep(0.1)
        self.fail("%s: %r" % (what, v))

    def wait_heartbeats(self, n=3, nodes=None, timeout=30):
        """Until each live node (or each of nodes) has done n more heartbeats, each
        with its placement entries flushed after it: what a node saw before is then
        listed in the directory, and its count reported to the others. A fixed sleep
        for "one more heartbeat" came short on a loaded machine."""
        nodes = [x for x in (nodes or self.nodes) if x.alive()]
        want = {id(x): self.view(x)["heartbeats"] + n for x in nodes}
        for x in nodes:
            self.wait_view(x, lambda v, x=x: v["heartbeats"] >= want[id(x)],
                           "%d heartbeats" % n, timeout)

    @classmethod
    def wait_members(cls, n, timeout=20, subscribed=True):
        """Until every live node lists n members and (unless subscribed is False, for a test
        that keeps a subscriber out) hears the invalidation channel: a node's subscriber
        may join seconds after its heartbeat, and a write through another node meanwhile
        is never heard by it (on a busy machine, a test that read right after would see
        the old version)."""
        deadline = time.monotonic() + timeout
        views = None
        while time.monotonic() < deadline:
            try:
                views = [cls.view(x) for x in cls.nodes if x.alive()]
            except OSError as e:  # a node just started: its admin port may not listen yet
                views = e
            else:
                if all(v["redis_up"] and len(v["members"]) == n and
                       (v["subscribed"] or not subscribed) for v in views):
                    return views
            time.sleep(0.2)
        raise AssertionError("the cluster did not form with %d members: %r" % (n, views))

    @classmethod
    def tearDownClass(cls):
        problems = []
        for n in getattr(cls, "nodes", []):
            if n.alive():
                code = n.stop()
                if code != 0:
                    problems.append("node exited %r: %s" % (code, n.log()[-2000:]))
            elif n.proc is not None and n.proc.returncode not in (0, -signal.SIGKILL):
                problems.append("node died (%r) during the tests: %s"
                                % (n.proc.returncode, n.log()[-2000:]))
            san = n.sanitizer_text()
            if san:
                problems.append(san)
            n.cleanup()
        cls.upstream.cleanup()
        cls.redis.cleanup()
        for d in cls.__dict__.get("cache_dirs", {}).values():
            shutil.rmtree(d, ignore_errors=True)
        if problems:
            raise AssertionError("\n".join(problems))

    def gets(self, mark, key):
        return [r for r in self.upstream.from_larder(mark)
                if r["method"] == "GET" and r["target"].split("?")[0] == "/shared/" + key]

    def read(self, node, key):
        return node.client().get_object(Bucket="shared", Key=key)["Body"].read()

    def admin(self, node, method, path, body=None):
        """The JSON answer of an admin request to node."""
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (node.admin_port, path),
                                     data=json.dumps(body).encode() if body else None,
                                     method=method, headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def join_listed(self, listed_before):
        """A fourth node joined, once the old owners listed the chunks whose ownership moved to
        it (the directory has more than listed_before entries); it is in self.nodes."""
        joiner = self.make_node(3)
        joiner.start()
        self.nodes.append(joiner)
        self.wait_members(4)
        # The old owners list what moved at their next heartbeat.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.view(joiner)["directory"]["entries"] > listed_before:
                break
            time.sleep(0.2)
        self.wait_heartbeats()  # every old owner has listed its part, the joiner heard
        d = self.view(joiner)["directory"]
        self.assertGreater(d["entries"], listed_before, d)
        return joiner

    def cached_alone_then_moved(self, prefix, seed, settle=None):
        """node-1 stops; node-0, alone, owns six objects of 4 chunks each and reads them from S3
        (then settle(keys), if given); node-1 comes back, owns about half of the chunks now, and
        node-0 lists those in the directory. Returns the bodies by key and node-0's entries."""
        first, second = self.nodes[:2]
        self.assertEqual(second.stop(), 0)
        self.wait_members(len(self.nodes) - 1)
        keys = [prefix + "%d.bin" % i for i in range(6)]
        bodies = {k: blob(seed + i, 3 * MiB + 7) for i, k in enumerate(keys)}
        for k in keys:
            self.direct.put_object(Bucket="shared", Key=k, Body=bodies[k])
            self.assertEqual(self.read(first, k), bodies[k])
        if settle:
            settle(keys)
        second.start()
        self.wait_members(len(self.nodes))
        # node-0 lists what moved at its next heartbeat
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.view(first)["directory"]["self_entries"]:
            time.sleep(0.2)
        self.wait_heartbeats()  # all of it
        listed = self.view(first)["directory"]["self_entries"]
        self.assertGreater(listed, 0)
        return bodies, listed

    @staticmethod
    def raw_get(node, path, headers):
        """(status, body) of a GET with exactly these headers."""
        c = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10)
        try:
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def peer_503s(self, key, asker=None):
        """503s the nodes answered other nodes' requests for key (asker's only, if given)."""
        who = "peer:" + asker.env["LARDER_NODE_ID"] if asker else None
        return sum(1 for n in self.nodes for r in n.access_records()
                   if r.get("key") == key and str(r.get("status")) == "503"
                   and (r.get("key_id") == who if who else
                        str(r.get("key_id", "")).startswith("peer:")))

    def learning_refetches(self, key):
        """How many chunks of key S3 may have been asked for twice. A node still learning an
        object refuses at once another node's request for one of its chunks (OBJ_META_CYCLE);
        the asker asks it again a moment later (test_cluster_learning.py): none. A node of
        the previous release (OnePreviousNode) neither asks again nor says why it refuses,
        and the asker reads the chunk from S3: up to one per 503 a node answered another."""
        return self.peer_503s(key) if self.PREVIOUS_NODE else 0


class ClusterSetUp(unittest.TestCase):
    def test_a_cluster_that_does_not_form_leaves_nothing_running(self):
        class NeverForms(ClusterBase):
            NODES = 2

            @classmethod
            def wait_members(cls, n, timeout=20):
                raise AssertionError("the cluster did not form (made to fail here)")

        with self.assertRaisesRegex(AssertionError, "made to fail here"):
            NeverForms.setUpClass()
        self.assertEqual(len(NeverForms.nodes), 2)
        self.assertEqual([n.port for n in NeverForms.nodes if n.alive()], [])
        self.assertIsNotNone(NeverForms.redis.proc.poll(), "redis-server still runs")
        self.assertIsNotNone(NeverForms.upstream.proc.poll(), "the upstream still runs")


class Cluster(ClusterBase):

    def test_cold_object_from_all_nodes_one_get_per_chunk(self):
        data = blob(1, 5 * MiB + 123)  # 6 chunks
        self.direct.put_object(Bucket="shared", Key="cold/a.bin", Body=data)
        mark = self.upstream.mark()
        results = []

        def reader(node):
            results.append(self.read(node, "cold/a.bin") == data)

        threads = [threading.Thread(target=reader, args=(n,)) for n in self.nodes for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, [True] * 9)
        # One S3 GET per chunk for the whole cluster. CI saw 7 once, before a node refused
        # by one still learning the object asked it again rather than S3
        # (test_cluster_learning.py).
        gets = len(self.gets(mark, "cold/a.bin"))
        self.assertGreaterEqual(gets, 6)
        self.assertLessEqual(gets, 6 + self.learning_refetches("cold/a.bin"),
                             "one S3 GET per chunk for the whole cluster")

    def test_first_read_with_checksum_mode_on_any_node(self):
        # A cold object read with x-amz-checksum-mode on a node that does not
        # own it: the owner learns it with one whole GET and hands the
        # checksums over with chunk 0 (test_checksums has the single node).
        mode = {"x-amz-checksum-mode": "ENABLED"}
        for i in range(6):  # some of them owned by another node (all but surely)
            key = "sums/%d.bin" % i
            data = blob(20 + i, 300000)
            self.direct.put_object(Bucket="shared", Key=key, Body=data,
                                   ChecksumAlgorithm="CRC32")
            crc = self.direct.head_object(Bucket="shared", Key=key,
                                          ChecksumMode="ENABLED")["ChecksumCRC32"]
            m = self.upstream.mark()
            st, body, hdrs = self.raw_get_headers(self.nodes[0], "/shared/" + key, mode)
            self.assertEqual((st, body == data), (200, True), key)
            self.assertEqual(hdrs.get("x-amz-checksum-crc32"), crc, key)
            self.assertEqual([(g["method"], dict(g["headers"]).get("range"))
                              for g in self.upstream.from_larder(m)], [("GET", None)], key)

    def raw_get_headers(self, node, path, headers):
        r = harness.signed_request(node.url, "GET", path, headers)
        return r.status, r.body, {k.lower(): v for k, v in r.headers.items()}

    def test_chunks_cached_elsewhere_need_no_upstream(self):
        data = blob(2, 3 * MiB)
        self.direct.put_object(Bucket="shared", Key="warm/b.bin", Body=data)
        self.assertEqual(self.read(self.nodes[0], "warm/b.bin"), data)
        mark = self.upstream.mark()
        for n in self.nodes[1:]:
            self.assertEqual(self.read(n, "warm/b.bin"), data)
        self.assertEqual(self.gets(mark, "warm/b.bin"), [],
                         "another node's chunks were fetched from S3 again")

    def test_write_through_one_node_is_seen_by_the_others(self):
        self.direct.put_object(Bucket="shared", Key="w/c.txt", Body=b"old version")
        for n in self.nodes:
            self.assertEqual(self.read(n, "w/c.txt"), b"old version")
        self.nodes[2].client().put_object(Bucket="shared", Key="w/c.txt", Body=b"new version!")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            got = [self.read(n, "w/c.txt") for n in self.nodes]
            if got == [b"new version!"] * 3:
                break
            time.sleep(0.1)
        self.assertEqual(got, [b"new version!"] * 3)

    def test_peer_requests_need_the_secret(self):
        node = self.nodes[0]
        self.direct.put_object(Bucket="shared", Key="p/d.txt", Body=b"secret stuff")
        path = "/shared/p/d.txt"
        target = "127.0.0.1:%d" % node.port

        def get(headers):
            return self.raw_get(node, path, headers)

        st, body = get(peer_headers(path, "intruder", target, "a" * 32,
                                    secret="not-the-secret-at-all-000"))
        self.assertEqual(st, 403, body)
        self.assertEqual(harness.s3_error(body)[0], "AccessDenied")
        good = peer_headers(path, "intruder", target, "b" * 32)
        st, body = get(good)
        self.assertEqual((st, body), (200, b"secret stuff"), "a correct peer request is served")
        st, body = get(good)
        self.assertEqual(st, 403, "a replayed peer request was served")
        st, body = get(peer_headers(path, "intruder", target, "c" * 32,
                                    date=str(int(time.time()) - 3600)))
        self.assertEqual(st, 403, "an old peer request was served")

    def test_new_member_fetches_from_holders_not_s3(self):
        # Chunks cached before a node joins: the joiner now owns about a
        # quarter of them and holds none. Their old owners list them in the
        # placement directory once ownership moved, and the joiner, about to
        # fetch one of its chunks from S3, finds them there instead.
        data = blob(7, 40 * MiB + 5)  # 41 chunks: the joiner owns some (all but surely)
        key = "join/f.bin"
        self.direct.put_object(Bucket="shared", Key=key, Body=data)
        self.assertEqual(self.read(self.nodes[0], key), data)
        self.wait_heartbeats()  # what the read listed is listed and reported
        listed_before = self.view(self.nodes[1])["directory"]["entries"]
        joiner = self.join_listed(listed_before)
        try:
            m = self.upstream.mark()
            self.assertEqual(self.read(joiner, key), data)
            self.assertEqual([g["headers"] for g in self.gets(m, key)], [],
                             "the joiner went to S3 for cached chunks: %r" % (
                                 [self.view(n)["directory"] for n in self.nodes]))
            v = self.view(joiner)
            self.assertGreater(v["directory"]["lookups"]["found"], 0, v)
            self.assertEqual(len(v["members"]), 4)
            self.assertTrue(all("directory_entries" in x for x in v["members"]), v)
        finally:
            self.nodes.remove(joiner)
            joiner.stop()
            joiner.cleanup()
            self.wait_members(3)
        # Ownership is back where it was: nothing needs listing any more.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.view(self.nodes[1])["directory"]["entries"] <= listed_before:
                break
            time.sleep(0.2)
        self.assertLessEqual(self.view(self.nodes[1])["directory"]["entries"], listed_before,
                             [(self.view(n)["members"], self.view(n)["directory"])
                              for n in self.nodes])

    def test_metrics_and_view_show_the_cluster(self):
        node = self.nodes[1]
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % node.admin_port,
                                     headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        lines = text.splitlines()
        self.assertIn("larder_cluster_redis_up 1", lines)
        self.assertIn("larder_cluster_members 3", lines)
        self.assertTrue(any(l.startswith("larder_cluster_invalidations_total{") for l in lines))
        self.assertTrue(any(l.startswith('larder_directory_entries{scope="cluster"}')
                            for l in lines), text)
        self.assertTrue(any(l.startswith('larder_directory_lookups_total{result="found"}')
                            for l in lines), text)
        promtool = shutil.which("promtool")
        if promtool:
            out = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                                 capture_output=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        # The CLI shows the same view.
        env = dict(os.environ, LARDER_ADMIN_TOKEN=TOKEN)
        admin = "http://127.0.0.1:%d" % node.admin_port
        out = subprocess.run([harness.larder_binary(), "cluster", "--admin", admin], env=env,
                             capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [l.split("\t") for l in out.stdout.decode().splitlines()]
        self.assertEqual(rows[0], ["id", "address", "capacity", "ownership_share",
                                   "directory_entries", "avoided_seconds"])
        self.assertEqual([r[5] for r in rows[1:]], ["0.0"] * 3)
        self.assertEqual([r[0] for r in rows[1:]], ["node-0", "node-1", "node-2"])
        self.assertEqual([r[1] for r in rows[1:]], ["127.0.0.1:%d" % n.port for n in self.nodes])
        out = subprocess.run([harness.larder_binary(), "cluster", "--json", "--admin", admin],
                             env=env, capture_output=True, timeout=30)
        self.assertEqual(json.loads(out.stdout)["self"], "node-1")
        out = subprocess.run([harness.larder_binary(), "cluster", "--admin", admin],
                             env=dict(env, LARDER_ADMIN_TOKEN="wrong-token-0123456789"),
                             capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 1, out)
        v = self.view(node)
        self.assertEqual(v["self"], "node-1")
        self.assertEqual(sorted(m["id"] for m in v["members"]), ["node-0", "node-1", "node-2"])
        # JSON carries 6 significant digits.
        shares = [m["ownership_share"] for m in v["members"]]
        self.assertAlmostEqual(sum(shares), 1.0, places=4)
        self.assertTrue(all(abs(x - 1 / 3) < 1e-4 for x in shares), shares)
        # A capacity is bytes, whole: it came as 1.07374e9 (6 significant digits), and the
        # CLI's "raw numbers" printed 1073740000.
        caps = [m["capacity"] for m in v["members"]]
        self.assertTrue(all(isinstance(c, int) and c % 1024 == 0 for c in caps), caps)
        self.assertEqual({int(r[2]) for r in rows[1:]}, set(caps))

    def test_zz_failures_are_a_slower_path(self):
        # A peer killed while another node streams from it: the client still
        # gets every byte (from S3 instead).
        data = blob(3, 24 * MiB)
        self.direct.put_object(Bucket="shared", Key="kill/e.bin", Body=data)
        got = {}
        reader = threading.Thread(target=lambda: got.setdefault(
            "b", self.read(self.nodes[1], "kill/e.bin")))
        reader.start()
        time.sleep(0.15)
        victim = self.nodes[0]
        victim.proc.kill()
        victim.proc.wait()
        reader.join(60)
        self.assertEqual(got.get("b"), data, "wrong or missing bytes after a peer died")

        # Redis down: every read still succeeds, while the nodes notice and
        # after: they serve alone and say so.
        self.redis.stop()
        for i, n in enumerate(self.nodes[1:]):
            key = "alone/%d" % i
            self.direct.put_object(Bucket="shared", Key=key, Body=blob(10 + i, 2 * MiB))
            self.assertEqual(self.read(n, key), blob(10 + i, 2 * MiB))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            views = [self.view(n) for n in self.nodes[1:]]
            if all(not v["redis_up"] and len(v["members"]) == 1 for v in views):
                break
            time.sleep(0.2)
        self.assertTrue(all(not v["redis_up"] and len(v["members"]) == 1 for v in views), views)
        for i, n in enumerate(self.nodes[1:]):
            key = "alone/later/%d" % i
            self.direct.put_object(Bucket="shared", Key=key, Body=blob(20 + i, 3 * MiB))
            self.assertEqual(self.read(n, key), blob(20 + i, 3 * MiB))

        # Redis back and the dead node restarted: the cluster forms again.
        exe = shutil.which("redis-server")  # the same port as before
        self.redis.proc = subprocess.Popen([exe, "--port", str(self.redis.port), "--bind",
                                            "127.0.0.1", "--save", "", "--appendonly", "no",
                                            "--dir", self.redis.dir],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.assertTrue(harness.wait_port(self.redis.port, 10, self.redis.proc))
        victim.cleanup()
        fresh = self.make_node(0)
        fresh.start()
        self.nodes[0] = fresh
        self.wait_members(3, timeout=30)
        self.assertEqual(self.read(fresh, "kill/e.bin"), data)


class ClusterLoss(ClusterBase):
    """A node dies: the chunks it owned are still cached as readers' copies
    on the others, and the directory sends their new owners there."""

    def test_dead_owners_chunks_come_from_readers_copies(self):
        data = blob(40, 30 * MiB + 9)  # 31 chunks: node-0 owns about a third
        key = "loss/g.bin"
        self.direct.put_object(Bucket="shared", Key=key, Body=data)
        # Read through node-1 only: it holds every chunk, the others only
        # their own.
        victim, reader, other = self.nodes
        self.assertEqual(self.read(reader, key), data)
        victim.proc.kill()
        victim.proc.wait()
        self.nodes.remove(victim)
        victim.cleanup()
        self.wait_members(2, timeout=30)
        # node-1 lists its copies of the dead node's chunks at its next heartbeat.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.view(reader)["directory"]["self_entries"] > 0:
                break
            time.sleep(0.2)
        time.sleep(1.2)
        self.assertGreater(self.view(reader)["directory"]["self_entries"], 0)
        # node-2 now owns some of node-0's chunks and never held them.
        m = self.upstream.mark()
        self.assertEqual(self.read(other, key), data)
        self.assertEqual(self.gets(m, key), [], "node-2 went to S3 for chunks node-1 holds")


class ClusterWriteRightAfterStart(ClusterBase):
    """A write through a node that has just started, read back at once through another. Found
    by tests/soak/soak.py: before its first heartbeat (up to a second after it starts) a node has
    no connection to Redis to publish on, and its writes were answered at once, the invalidation
    still queued; the other nodes served the replaced bytes until that heartbeat (about 0.2 s
    here, 8 of 8 tries)."""
    NODES = 2

    def test_write_through_a_node_just_started_is_read_through_the_others(self):
        reader, writer = self.nodes
        path = "/shared/fresh/k"
        stale = []
        for i in range(3):
            old, new = b"old-%d" % i, b"new-%d" % i
            reader.client().put_object(Bucket="shared", Key="fresh/k", Body=old)
            for n in self.nodes:  # learnt by both (immutable metadata): only a write tells them
                self.assertEqual(harness.signed_request(n.url, "GET", path).body, old)
            self.assertEqual(writer.stop(), 0)
            writer.start()
            h = harness.sign_headers("PUT", writer.url + path, harness.CLIENT_KEY,
                                     harness.CLIENT_SECRET, body=new)
            t = time.monotonic()
            st, _, _ = harness.http_request(writer.url, "PUT", path, h, body=new)
            took = time.monotonic() - t
            self.assertEqual(st, 200)
            got = harness.signed_request(reader.url, "GET", path).body
            if got != new:
                stale.append((i, got, round(took, 3)))
            self.assertLess(took, 5, "the write waited too long for the cluster")
            self.wait_members(2)
        self.assertEqual(stale, [], "another node served what a write had replaced")


class ClusterReadAfterWrite(ClusterBase):
    """A client that writes through a node and reads back through it gets
    what it wrote, even before the other nodes have heard the invalidation
    (Redis slow to deliver it: paused here for less than the nodes' 500 ms
    command timeout, so nobody takes Redis for down). The object's owner may
    still hold the old version then; the writer must not learn it from there."""
    NODES = 2
    KEYS = 8  # the owner is the other node for about half of them

    def pause_redis_writes(self, ms):
        # PUBLISH waits out the pause like any write.
        out = subprocess.run(["redis-cli", "-p", str(self.redis.port), "CLIENT", "PAUSE",
                              str(ms), "WRITE"], capture_output=True, text=True, timeout=10)
        self.assertEqual(out.stdout.strip(), "OK", out)

    def warm(self, keys):
        for k in keys:
            self.direct.put_object(Bucket="shared", Key=k, Body=b"old " + k.encode())
            for n in self.nodes:
                self.assertEqual(self.read(n, k), b"old " + k.encode())

    def test_read_right_after_a_write_through_another_node(self):
        # S3 gives a read that follows a write's answer the new version, and
        # a client may send that read to any node. The writer's answer ends
        # only once Redis took the invalidation for the others (before, the
        # other node served the replaced bytes in 63 of 200 tries), also
        # when Redis is slow to take it.
        writer, reader = self.nodes[0].client(), self.nodes[1].client()
        key = "raw/k.txt"
        writer.put_object(Bucket="shared", Key=key, Body=b"v-start")
        self.assertEqual(reader.get_object(Bucket="shared", Key=key)["Body"].read(), b"v-start")
        stale = []
        for i in range(40):
            body = b"v-%d" % i
            if i % 10 == 9:
                self.pause_redis_writes(300)
            writer.put_object(Bucket="shared", Key=key, Body=body)
            got = reader.get_object(Bucket="shared", Key=key)["Body"].read()
            if got != body:
                stale.append((i, got))
        writer.delete_object(Bucket="shared", Key=key)
        with self.assertRaises(botocore.exceptions.ClientError) as e:
            reader.get_object(Bucket="shared", Key=key)
        self.assertEqual(e.exception.response["Error"]["Code"], "NoSuchKey")
        self.assertEqual(stale, [])

    def test_read_own_write_through_the_same_node(self):
        writer, other = self.nodes
        keys = ["raw/put-%d" % i for i in range(self.KEYS)]
        self.warm(keys)
        c = writer.client()
        stale = []
        for k in keys:
            self.pause_redis_writes(300)
            c.put_object(Bucket="shared", Key=k, Body=b"new " + k.encode())
            got = c.get_object(Bucket="shared", Key=k)["Body"].read()
            if got != b"new " + k.encode():
                stale.append((k, got))
        self.assertEqual(stale, [], "the writer served what it had overwritten")
        # And the other node hears of it (the nodes keep metadata for ever).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = [self.read(other, k) for k in keys]
            if got == [b"new " + k.encode() for k in keys]:
                break
            time.sleep(0.2)
        self.assertEqual(got, [b"new " + k.encode() for k in keys])

    def test_read_after_delete_objects_through_the_same_node(self):
        writer = self.nodes[0]
        keys = ["raw/del-%d" % i for i in range(self.KEYS)]
        self.warm(keys)
        c = writer.client()
        self.pause_redis_writes(300)
        c.delete_objects(Bucket="shared", Delete={"Objects": [{"Key": k} for k in keys]})
        served = []
        for k in keys:
            try:
                served.append((k, c.get_object(Bucket="shared", Key=k)["Body"].read()))
            except c.exceptions.NoSuchKey:
                pass
        self.assertEqual(served, [], "the node that deleted them served them")

    def test_version_change_seen_by_a_reader(self):
        """An object replaced in S3 behind the cluster's back: a reader's If-Match fetch of an
        uncached chunk gets a 412, and the read learns the object again, while the other node has
        not heard of it yet (Redis delays the invalidation). Every read gets the new bytes. The
        nodes learn again from each other with chunk 0 of the old version still cached: a node
        once took that answer for a peer failure, retried it at S3 with no chunk, and crashed."""
        reader = self.nodes[1]
        failed = []
        mark = self.upstream.mark()
        for i in range(self.KEYS):
            k = "raw/changed-%d" % i
            self.direct.put_object(Bucket="shared", Key=k, Body=blob(i, 4 * MiB))
            got = reader.client().get_object(Bucket="shared", Key=k, Range="bytes=0-9")
            self.assertEqual(got["Body"].read(), blob(i, 4 * MiB)[:10])
            new = blob(100 + i, 4 * MiB)
            self.direct.put_object(Bucket="shared", Key=k, Body=new)
            self.pause_redis_writes(300)
            for c in (1, 2, 3):  # uncached chunks: fetched with If-Match of the old ETag
                rng = "bytes=%d-%d" % (c * MiB, c * MiB + 9)
                try:
                    got = reader.client().get_object(Bucket="shared", Key=k, Range=rng)
                    body = got["Body"].read()
                except Exception as e:  # noqa: BLE001 - what the client saw
                    body = repr(e)
                if body != new[c * MiB:c * MiB + 10]:
                    failed.append((k, c, body))
            time.sleep(0.3)
        self.assertEqual(failed, [])
        # The reader published the invalidation itself, so it never hears it: what it learnt
        # after the 412 is what it keeps (for ever here, LARDER_METADATA_TTL=immutable).
        stale = [i for i in range(self.KEYS)
                 if self.read(reader, "raw/changed-%d" % i) != blob(100 + i, 4 * MiB)]
        self.assertEqual(stale, [])
        # Learning the old version again from the other node only to be told 412 again by S3:
        # a node that saw a 412 learns the object from S3. At most one 412 for each node that
        # fetched a chunk of the old version.
        refused = [r for r in self.upstream.from_larder(mark) if r["status"] == 412]
        self.assertLessEqual(len(refused), 2 * self.KEYS, [r["target"] for r in refused])


class ClusterPurge(ClusterBase):
    """A purge posted to one node purges every node. It purged only the one it was posted to,
    whose next reads then asked the objects' owners, which still served the old versions
    (objects replaced behind the cluster, what a purge is for)."""
    NODES = 2

    def test_a_purge_reaches_every_node(self):
        keys = ["purged/%d" % i for i in range(8)]  # about half owned by each node
        for k in keys:
            self.direct.put_object(Bucket="shared", Key=k, Body=b"old " + k.encode())
            for n in self.nodes:
                self.assertEqual(self.read(n, k), b"old " + k.encode())
        for k in keys:  # replaced straight in S3: with an immutable TTL nobody revalidates
            self.direct.put_object(Bucket="shared", Key=k, Body=b"new " + k.encode())
        a, b = self.nodes
        r = self.admin(a, "POST", "/admin/purge", {"bucket": "shared", "prefix": "purged/"})
        self.assertEqual(r["purged_objects"], len(keys))
        deadline = time.monotonic() + 10  # b hears of it on the channel, within moments
        while "from another node" not in b.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("from another node", b.log())
        for n, name in ((a, "the purged node"), (b, "the other node")):
            self.assertEqual({k: self.read(n, k) for k in keys},
                             {k: b"new " + k.encode() for k in keys}, name)

    def test_a_purge_of_a_long_bucket_name_reaches_every_node(self):
        # S3 kept bucket names of up to 255 bytes made before 2018, and the purge route takes
        # them; the other nodes read the name into 64 bytes and ignored the purge. (moto makes
        # no such bucket: the other node's log tells.)
        a, b = self.nodes
        bucket = "legacy-bucket-" + "x" * 60  # 74 bytes
        r = self.admin(a, "POST", "/admin/purge", {"bucket": bucket, "prefix": "p/"})
        self.assertEqual(r["bucket"], bucket)
        heard = 'in bucket %s, from another node' % bucket
        deadline = time.monotonic() + 10
        while heard not in b.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn(heard, b.log())


class ClusterMissedInvalidations(ClusterBase):
    """Redis keeps no history: what is published while a node is not subscribed never reaches it.
    So a node that listens again, or starts with what its disk kept, revalidates everything it
    caches (metadata here is kept for ever, LARDER_METADATA_TTL=immutable). Node 1 talks to Redis
    as its own user, so the test can lock it out alone."""
    NODES = 2
    NVME = True

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        n.write_config("[bucket shared]\nlist_cache_ttl = 600\n")
        n.env["LARDER_CONFIG"] = n.config_path
        if i == 1:
            cls.redis_cli("ACL", "SETUSER", "node-1", "on", ">pw-node-1", "~*", "&*", "+@all")
            n.env["LARDER_REDIS_URL"] = "redis://node-1:pw-node-1@127.0.0.1:%d" % cls.redis.port
        return n

    def cached_everywhere(self, key, body):
        self.direct.put_object(Bucket="shared", Key=key, Body=body)
        for n in self.nodes:
            self.assertEqual(self.read(n, key), body)

    def listed(self, node):
        got = node.client().list_objects_v2(Bucket="shared", Prefix="missed/")
        return [o["Key"] for o in got.get("Contents", [])]

    def test_node_that_was_not_listening_revalidates(self):
        writer, late = self.nodes
        self.cached_everywhere("missed/a", b"old a")
        self.assertNotIn("missed/new", self.listed(late))  # cached for 600 s
        before = self.view(late)["resyncs"]
        self.redis_cli("ACL", "SETUSER", "node-1", "off")
        self.redis_cli("CLIENT", "KILL", "USER", "node-1")
        self.wait_view(late, lambda v: not v["subscribed"], "node-1 still subscribed")
        sent = self.view(writer)["invalidations_sent"]
        writer.client().put_object(Bucket="shared", Key="missed/a", Body=b"new a")
        writer.client().put_object(Bucket="shared", Key="missed/new", Body=b"")
        self.wait_view(writer, lambda v: v["invalidations_sent"] >= sent + 2, "not published")
        self.redis_cli("ACL", "SETUSER", "node-1", "on")
        v = self.wait_view(late, lambda v: v["subscribed"] and len(v["members"]) == 2,
                           "node-1 did not come back")
        self.assertEqual(v["resyncs"], before + 1)
        m = self.upstream.mark()
        self.assertEqual(self.read(late, "missed/a"), b"new a")
        self.assertEqual(self.read(late, "missed/a"), b"new a")
        self.assertIn("missed/new", self.listed(late))
        # What did not change costs a conditional request (to S3 or the node that owns it),
        # not its bytes again. Only a request that reaches S3 is seen here: node-1 owns this key
        # (S3 sees its one 304); were node-0 the owner, it would answer node-1 itself.
        self.cached_everywhere("missed/b", b"same b")
        self.redis_cli("CLIENT", "KILL", "USER", "node-1")
        self.wait_view(late, lambda v: v["resyncs"] == before + 2 and v["subscribed"],
                       "node-1 did not subscribe again")
        m = self.upstream.mark()
        self.assertEqual(self.read(late, "missed/b"), b"same b")
        statuses = [r["status"] for r in self.upstream.from_larder(m)]
        self.assertEqual([s for s in statuses if s != 304], [], self.upstream.from_larder(m))

    def test_restarted_node_revalidates_what_its_disk_kept(self):
        writer, restarted = self.nodes
        self.cached_everywhere("missed/c", b"old c")
        self.assertEqual(restarted.stop(), 0)
        writer.client().put_object(Bucket="shared", Key="missed/c", Body=b"new c")
        restarted.start()
        self.assertEqual(self.read(restarted, "missed/c"), b"new c")
        self.wait_members(2)
        self.assertEqual(self.read(restarted, "missed/c"), b"new c")


class ClusterInvalidationOwnerMissed(ClusterBase):
    """Node 1 hears that node 0 overwrote an object whose owner, node 2, did not hear it yet (its
    subscriber is kept out of Redis, as for a while after a Redis restart; its heartbeat is not,
    so it stays a member). Node 1 must learn the object again from S3, not from the owner's stale
    metadata, which it would keep for ever (LARDER_METADATA_TTL=immutable). Node 2 talks to
    Redis as its own user, so the test can take the subscribe permission from it alone."""

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        if i == 2:
            cls.redis_cli("ACL", "SETUSER", "node-2", "on", ">pw-node-2", "~*", "&*", "+@all")
            n.env["LARDER_REDIS_URL"] = "redis://node-2:pw-node-2@127.0.0.1:%d" % cls.redis.port
        return n

    def test_node_that_heard_an_invalidation_does_not_learn_it_back(self):
        writer, reader, owner = self.nodes
        keys = ["heard/%d" % i for i in range(12)]
        for k in keys:
            self.direct.put_object(Bucket="shared", Key=k, Body=b"old " + k.encode())
            for n in (reader, owner, writer):
                self.assertEqual(self.read(n, k), b"old " + k.encode())
        # The keys node 2 owns: node 1 asked it for them.
        owned = sorted({r.get("key") for r in owner.access_records()
                        if r.get("key_id", "").startswith("peer:") and r.get("key") in keys})
        self.assertTrue(owned, "node 2 owns none of the keys")
        self.redis_cli("ACL", "SETUSER", "node-2", "-subscribe")
        try:
            self.redis_cli("CLIENT", "KILL", "USER", "node-2")
            self.wait_view(owner, lambda v: not v["subscribed"], "node-2 still subscribed")
            self.wait_members(3, subscribed=False)
            heard = self.view(reader)["invalidations_received"]
            for k in owned:
                writer.client().put_object(Bucket="shared", Key=k, Body=b"new " + k.encode())
            self.wait_view(reader, lambda v: v["invalidations_received"] >= heard + len(owned),
                           "node-1 did not hear the writes")
            for k in owned:
                self.assertEqual(self.read(reader, k), b"new " + k.encode(), k)
        finally:
            self.redis_cli("ACL", "SETUSER", "node-2", "+subscribe")


class ClusterStoppedOwner(ClusterBase):
    """A node stopped with SIGSTOP (a hung or partitioned host: its socket accepts, nothing
    answers) leaves the membership when its heartbeats stop. Reads of what it owns must then go
    to S3 at once, not wait LARDER_UPSTREAM_TIMEOUT (30 s) on it: failure is a slower path."""
    NODES = 2

    def test_reads_do_not_wait_on_a_stopped_owner(self):
        reader, stopped = self.nodes
        keys = ["stopped/%d" % i for i in range(8)]  # some owned by each node
        bodies = {k: blob(700 + i, MiB + 5) for i, k in enumerate(keys)}
        for k, b in bodies.items():
            self.direct.put_object(Bucket="shared", Key=k, Body=b)
        out = {}

        def read(k):
            t0 = time.monotonic()
            try:
                r = harness.signed_request(reader.url, "GET", "/shared/" + k, timeout=60)
                out[k] = (time.monotonic() - t0, r.status, r.body == bodies[k])
            except OSError as e:
                out[k] = (time.monotonic() - t0, repr(e), False)

        stopped.signal(signal.SIGSTOP)
        try:
            threads = [threading.Thread(target=read, args=(k,)) for k in keys]
            for t in threads:
                t.start()
            for t in threads:
                t.join(90)
        finally:
            stopped.signal(signal.SIGCONT)
        self.assertIn("owner node failed", reader.log(), "no key owned by the stopped node")
        for k in keys:
            took, status, right = out[k]
            self.assertEqual((status, right), (200, True), k)
            # Its heartbeats stop at once; a member is dropped after 5 s without one.
            self.assertLess(took, 12, "%s waited %.1f s on the stopped node" % (k, took))
        self.wait_members(2)


class ClusterStaleDirectory(ClusterBase):
    """The directory names a holder that lost its copy: node-0 restarted (a RAM tier only) after
    it listed chunks node-1 now owns. node-0's read asks the owner, node-1; node-1 asks the holder
    the directory names, node-0, at the last hop; and node-0 must not wait for its own fetch, which
    waits for node-1. The read is answered without waiting out a peer timeout."""
    NODES = 2

    def test_holder_that_lost_its_copy_is_not_waited_for(self):
        first, second = self.nodes
        bodies, _ = self.cached_alone_then_moved("stale/", 60)
        keys = sorted(bodies)
        self.assertEqual(first.stop(), 0)  # its RAM tier, and what it listed, is lost
        first.start()
        self.wait_members(2)
        slow = []
        m = self.upstream.mark()
        for k in keys:
            t0 = time.monotonic()
            self.assertEqual(self.read(first, k), bodies[k])
            if time.monotonic() - t0 > 10:
                slow.append((k, round(time.monotonic() - t0, 1)))
        self.assertEqual(slow, [], "reads waited for a peer timeout:\n%s\n%s"
                         % (first.log()[-3000:], second.log()[-3000:]))
        # The node asked at the last hop said at once that it has no copy: S3 is still read
        # once per chunk (4 each), by the owner, not by both nodes.
        self.assertEqual({k: len(self.gets(m, k)) for k in keys}, {k: 4 for k in keys})


class ClusterRestartKeepsListings(ClusterBase):
    """node-0 listed chunks in the placement directory (it fetched them as their owner, and
    node-1 owns them now), then restarted with its NVMe tier, which still holds them. It tracks
    them again, so it keeps refreshing their entries past LARDER_DIRECTORY_TTL, and node-1 finds
    them there rather than reading S3 again."""
    NODES = 2
    NVME = True

    @classmethod
    def extra_env(cls):
        return {"LARDER_DIRECTORY_TTL": "10"}  # the least the setting takes

    def nvme_chunks(self, node):
        req = urllib.request.Request("http://127.0.0.1:%d/admin/stats" % node.admin_port,
                                     headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())["cache"]["nvme"]["chunks"]

    def test_entries_outlive_the_ttl_after_a_restart(self):
        first, second = self.nodes

        def written(keys):  # the NVMe writes follow the fills
            deadline = time.monotonic() + 10
            while self.nvme_chunks(first) < 4 * len(keys) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertEqual(self.nvme_chunks(first), 4 * len(keys))

        bodies, listed = self.cached_alone_then_moved("relist/", 70, written)
        keys = sorted(bodies)
        self.assertEqual(first.stop(), 0)
        first.start()
        self.wait_members(2)
        time.sleep(12)  # past the TTL of every entry node-0 refreshed before it stopped
        d = self.view(first)["directory"]
        self.assertEqual((d["self_entries"], d["tracked"]), (listed, 4 * len(keys)), d)
        m = self.upstream.mark()
        for k in keys:
            self.assertEqual(self.read(second, k), bodies[k])
        # node-0 restarted in a cluster, so it revalidates what its disk kept: conditional
        # requests, answered 304. No chunk's bytes come from S3 again.
        fetched = [(r["target"], r["status"]) for r in self.upstream.from_larder(m)
                   if r["method"] == "GET" and r["status"] != 304]
        self.assertEqual(fetched, [], "S3 was read for chunks node-0 holds")
        self.assertGreater(self.view(second)["directory"]["lookups"]["found"], 0)


class ClusterJoinedReadTogether(ClusterBase):
    """Right after a node joins, it and two other nodes read every chunk of an object at once.
    For the chunks the joiner now owns and node-0 held as their owner, the joiner asks node-0
    (at the last hop), which is stopped for a moment; the other nodes' requests to the joiner
    (hop 1) meanwhile wait for those fetches rather than going to S3: a request may wait for a
    fetch that asks at a higher hop than its own (store/object.h: obj_may_wait)."""

    def test_requests_from_nodes_wait_for_the_joiners_fetches_from_holders(self):
        data = blob(8, 80 * MiB + 3)  # 81 chunks: node-0 held some the joiner owns (all but surely)
        key = "join/together.bin"
        self.direct.put_object(Bucket="shared", Key=key, Body=data)
        self.assertEqual(self.read(self.nodes[0], key), data)
        self.wait_heartbeats()  # what the read listed is listed and reported
        joiner = self.join_listed(self.view(self.nodes[1])["directory"]["entries"])
        m = self.upstream.mark()
        got, threads = {}, []

        def read_chunks(node, go):
            # The threads start now and read when go is set: starting 243 threads
            # on a busy machine took seconds, and node-0, stopped meanwhile, past
            # the 5 s a member is trusted was left for S3.
            for i in range(0, len(data), MiB):
                rng = "bytes=%d-%d" % (i, min(i + MiB, len(data)) - 1)

                def read(n=node, i=i, rng=rng):
                    go.wait()
                    got[(n.port, i)] = harness.signed_request(n.url, "GET", "/shared/" + key,
                                                              {"Range": rng}).body
                t = threading.Thread(target=read)
                t.start()
                threads.append(t)

        def lookups_missed():  # directory lookups that failed or timed out (100 ms), all nodes
            return sum(v["directory"]["lookups"]["failed"] + v["directory"]["lookups"]["skipped"]
                       for v in (self.view(n) for n in self.nodes if n.alive()))

        missed = lookups_missed()
        joiner_go, others_go = threading.Event(), threading.Event()
        read_chunks(joiner, joiner_go)
        read_chunks(self.nodes[1], others_go)
        read_chunks(self.nodes[2], others_go)
        self.nodes[0].signal(signal.SIGSTOP)  # well within the 5 s a member is trusted
        try:
            joiner_go.set()
            time.sleep(0.5)  # the joiner's fetches are asking node-0
            others_go.set()
            time.sleep(0.5)
        finally:
            self.nodes[0].signal(signal.SIGCONT)
        for t in threads:
            t.join()
        wrong = sorted({i for (port, i), body in got.items() if body != data[i:i + MiB]})
        self.assertEqual((len(got), wrong), (3 * len(range(0, len(data), MiB)), []))
        # A lookup in the directory that takes past its 100 ms (a busy machine: two test
        # runners and ASan) finds no holder, and its chunk is read from S3, by design; a
        # request that went to S3 rather than wait on a fetch would be one more.
        missed = lookups_missed() - missed
        self.assertLessEqual(len(self.gets(m, key)), missed,
                             "S3 was asked for cached chunks (%d lookups missed)" % missed)


class ClusterOwnFirst(ClusterBase):
    """A node's RAM tier holds the chunks it owns before its readers' copies
    of other nodes' chunks: a dataset the cluster holds but one node does
    not is read from S3 once, however often every node reads it."""
    NODES = 2
    CHUNK = 64 * 1024

    @classmethod
    def extra_env(cls):
        # 160 chunks; each node owns about 80 and holds 120: its own and
        # about 40 copies. Before, its tier kept the 120 smallest hashes of
        # all 160, so each node dropped about 20 of its own chunks, and the
        # other node's reads of them went to S3 again.
        return {"LARDER_CHUNK_SIZE": "64KiB", "LARDER_RAM_CACHE_SIZE": str(120 * cls.CHUNK)}

    def test_copies_do_not_push_out_owned_chunks(self):
        data = blob(50, 160 * self.CHUNK)
        key = "own/first.bin"
        self.direct.put_object(Bucket="shared", Key=key, Body=data)
        for n in self.nodes:
            self.assertEqual(self.read(n, key), data)
        self.assertEqual(len(self.gets(0, key)), 160, "one S3 GET per chunk")
        m = self.upstream.mark()
        for _ in range(2):
            for n in self.nodes:
                self.assertEqual(self.read(n, key), data)
        self.assertEqual(self.gets(m, key), [],
                         "chunks the cluster held were fetched from S3 again")


class ClusterUnderBaseDomain(ClusterBase):
    """Nodes that advertise host names under LARDER_BASE_DOMAIN (as a
    StatefulSet's under a cluster domain might): a peer's path-style request
    names this node's host, which must not be read as a virtual-hosted
    bucket of the node's own name."""
    NODES = 2

    @classmethod
    def extra_env(cls):
        return {"LARDER_BASE_DOMAIN": "localhost"}

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        n.env["LARDER_ADVERTISE"] = "node%d.localhost:%d" % (i, n.port)  # curl: *.localhost is loopback
        return n

    def test_peer_requests_are_path_style(self):
        for b in ("node0", "node1"):
            self.direct.create_bucket(Bucket=b)
        keys = ["base/obj-%d" % i for i in range(8)]
        for k in keys:
            self.direct.put_object(Bucket="shared", Key=k, Body=b"right " + k.encode())
            for b in ("node0", "node1"):
                self.direct.put_object(Bucket=b, Key="shared/" + k, Body=b"wrong bucket " + b.encode())
        m = self.upstream.mark()
        for n in self.nodes:
            for k in keys:
                self.assertEqual(self.read(n, k), b"right " + k.encode())
        # One S3 GET per object: the node that does not own it read it from
        # its owner, so peer requests were made and answered right.
        for k in keys:
            self.assertEqual(len(self.gets(m, k)), 1, k)


class TlsCluster(ClusterBase):
    """Two nodes whose client ports serve TLS talk https to each other,
    verifying each other's certificate (LARDER_CLUSTER_CA_FILE)."""
    NODES = 2

    @classmethod
    def extra_env(cls):
        if not hasattr(cls, "cert"):
            import test_tls
            cls.tmp = tempfile.mkdtemp(prefix="larder-tls-cluster-")
            cls.cert, cls.key = test_tls.make_cert(cls.tmp)
        return {"LARDER_TLS_CERT": cls.cert, "LARDER_TLS_KEY": cls.key,
                "LARDER_CLUSTER_CA_FILE": cls.cert}

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    def read(self, node, key):
        import boto3
        from botocore.config import Config
        s3 = boto3.session.Session().client(
            "s3", endpoint_url=node.url.replace("http://", "https://"),
            region_name=harness.REGION, aws_access_key_id=harness.CLIENT_KEY,
            aws_secret_access_key=harness.CLIENT_SECRET, verify=self.cert,
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))
        return s3.get_object(Bucket="shared", Key=key)["Body"].read()

    def test_peers_speak_https(self):
        data = blob(30, 8 * MiB + 3)  # 9 chunks, about half owned by each node
        self.direct.put_object(Bucket="shared", Key="t/obj", Body=data)
        a, b = self.nodes
        # Through a: b fetches its chunks from S3, and a gets them from b.
        self.assertEqual(self.read(a, "t/obj"), data)
        # Through b: every chunk comes from a cache, b's own or a's (https).
        m = self.upstream.mark()
        self.assertEqual(self.read(b, "t/obj"), data)
        self.assertEqual(self.gets(m, "t/obj"), [], "b went upstream for chunks a holds")
        for n in self.nodes:
            self.assertNotIn("node failed (", n.log(), "a peer request failed over https")


class TlsClusterUnverified(TlsCluster):
    """Nodes whose certificate does not name their advertise host: every peer request fails
    verification and goes to S3 instead. It did so with one info line per chunk in curl's
    generic words; now a warning (at most one a minute) says why and what to set."""

    @classmethod
    def extra_env(cls):
        if "cert" not in cls.__dict__:  # not TlsCluster's (removed with its folder)
            cls.tmp = tempfile.mkdtemp(prefix="larder-tls-cluster-")
            cls.cert, cls.key = (os.path.join(cls.tmp, n) for n in ("cert.pem", "key.pem"))
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                            "2", "-subj", "/CN=elsewhere", "-keyout", cls.key, "-out", cls.cert,
                            "-addext", "subjectAltName=DNS:elsewhere.invalid"],
                           check=True, capture_output=True)
        return {"LARDER_TLS_CERT": cls.cert, "LARDER_TLS_KEY": cls.key,
                "LARDER_CLUSTER_CA_FILE": cls.cert}

    def read(self, node, key):
        import boto3
        import urllib3
        from botocore.config import Config
        urllib3.disable_warnings()
        s3 = boto3.session.Session().client(
            "s3", endpoint_url=node.url.replace("http://", "https://"),
            region_name=harness.REGION, aws_access_key_id=harness.CLIENT_KEY,
            aws_secret_access_key=harness.CLIENT_SECRET, verify=False,
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))
        return s3.get_object(Bucket="shared", Key=key)["Body"].read()

    def test_peers_speak_https(self):
        data = blob(31, 4 * MiB + 3)
        self.direct.put_object(Bucket="shared", Key="t/unverified", Body=data)
        a, b = self.nodes
        self.assertEqual(self.read(a, "t/unverified"), data)
        self.assertEqual(self.read(b, "t/unverified"), data)  # right bytes, from S3
        warned = [line for n in self.nodes for line in n.log().splitlines()
                  if " warn " in line and "a node's TLS failed" in line]
        self.assertTrue(warned, "no warning that peers cannot verify each other")
        self.assertIn("LARDER_CLUSTER_CA_FILE", warned[0])
        self.assertLessEqual(len(warned), 2, warned)  # once a minute per node


class TlsClusterCaFileOnly(TlsClusterUnverified):
    """LARDER_CLUSTER_CA_FILE is the only CA a node's certificate is verified against. libcurl
    kept its built-in CA folder (/etc/ssl/certs) besides the file, so any CA the system trusts
    vouched for a node: here the nodes' CA is put in a private copy of that folder (a mount
    namespace of their own) and not in LARDER_CLUSTER_CA_FILE, and peers must refuse them."""

    @classmethod
    def setUpClass(cls):
        harness.need_mount_namespace(cls)
        super().setUpClass()

    @classmethod
    def extra_env(cls):
        if "cert" not in cls.__dict__:
            import test_tls
            cls.tmp = tempfile.mkdtemp(prefix="larder-tls-cluster-")
            system_ca = test_tls.signed_cert(cls.tmp, "system-ca", [], ca=True)
            cls.cluster_ca, _ = test_tls.signed_cert(cls.tmp, "cluster-ca", [], ca=True)
            cls.cert, cls.key = test_tls.signed_cert(cls.tmp, "node", ["127.0.0.1"],
                                                     issuer=system_ca)
            certs = os.path.join(cls.tmp, "system-certs")
            os.mkdir(certs)
            name = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", system_ca[0]],
                                  check=True, capture_output=True, text=True).stdout.strip()
            shutil.copy(system_ca[0], os.path.join(certs, name + ".0"))
            cls.wrapper = harness.bind_mount_wrapper(
                os.path.join(cls.tmp, "larder-with-system-ca"), certs, "/etc/ssl/certs")
        return {"LARDER_TLS_CERT": cls.cert, "LARDER_TLS_KEY": cls.key,
                "LARDER_CLUSTER_CA_FILE": cls.cluster_ca}

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        n.binary = cls.wrapper
        return n


class OnePreviousNode:
    """Mixed in before a ClusterBase class: node-1 runs LARDER_PREVIOUS_BIN (the larder of
    scripts/previous-release, of the same cluster protocol, which scripts/test.sh builds), as
    in a rolling upgrade; the class is skipped when it is not set."""
    PREVIOUS_NODE = True

    @classmethod
    def setUpClass(cls):
        if not os.environ.get("LARDER_PREVIOUS_BIN"):
            raise unittest.SkipTest("LARDER_PREVIOUS_BIN is not set")
        super().setUpClass()

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        if i == 1:
            n.binary = os.environ["LARDER_PREVIOUS_BIN"]
        return n


if __name__ == "__main__":
    unittest.main()
