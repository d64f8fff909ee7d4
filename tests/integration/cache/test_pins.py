"""Pinning a warm job's objects: POST /admin/prefetch {"pin_seconds": N},
POST /admin/unpin, larder warm --pin, larder unpin.

What an operator sees: a pinned set stays in a small RAM cache however much
else streams through it (re-reading it sends no GET upstream), while the same
set unpinned is evicted; a pin past LARDER_PIN_MAX is refused with 409; stats
and metrics show each pin; a pin ends when its time is up or when unpinned.
"""
import time
import urllib.request

import harness
from admin_calls import AdminCalls
from harness import LarderCase

TOKEN = "pins-test-token-0123"
ADMIN_PORT = harness.free_port()
MiB = 1024 * 1024


def blob(seed, n):
    import random
    return random.Random(seed).randbytes(n)


class PinnedSet:
    """What a pin test does with bucket "pin": self.pinned (key -> bytes) is
    the set to pin, self.stream_keys the other objects; needs AdminCalls."""

    @classmethod
    def upload(cls, n_pinned, n_stream, n_big):
        """Bucket "pin": pinned/ (n_pinned 1 MiB objects), stream/ and big/
        (n_stream and n_big 8 MiB objects)."""
        cls.direct.create_bucket(Bucket="pin")
        cls.pinned = {}
        for i in range(n_pinned):
            key = "pinned/%02d.bin" % i
            cls.pinned[key] = blob(i, MiB)
            cls.direct.put_object(Bucket="pin", Key=key, Body=cls.pinned[key])
        cls.stream_keys = []
        for i in range(n_stream):
            key = "stream/%02d.bin" % i
            cls.direct.put_object(Bucket="pin", Key=key, Body=blob(1000 + i, 8 * MiB))
            cls.stream_keys.append(key)
        for i in range(n_big):
            cls.direct.put_object(Bucket="pin", Key="big/%d.bin" % i, Body=blob(2000 + i, 8 * MiB))

    def refused_pin(self, bucket, prefix):
        """POSTs a pin of bucket's prefix that must be refused up front (409
        pin_too_large); returns the refusal's message."""
        st, r = self.call("POST", "/admin/prefetch", {"bucket": bucket, "prefix": prefix,
                                                      "pin_seconds": 60})
        self.assertEqual(st, 409, r)
        self.assertEqual(r["error"], "pin_too_large", r)
        return r["message"]

    def pin_stats(self):
        """/admin/stats' pins and cache sections."""
        st, stats = self.call("GET", "/admin/stats")
        self.assertEqual(st, 200, stats)
        return stats["pins"], stats["cache"]

    def metrics(self):
        req = urllib.request.Request(self.admin + "/metrics")
        req.add_header("Authorization", "Bearer " + self.ADMIN_TOKEN)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read().decode()

    def stream_twice(self):
        for _ in range(2):
            for key in self.stream_keys:
                self.s3.get_object(Bucket="pin", Key=key)["Body"].read()

    def gets_of_pinned_set(self):
        """Re-reads the pinned set; returns the GETs it sent upstream."""
        mark = self.upstream.mark()
        for key, data in self.pinned.items():
            self.assertEqual(self.s3.get_object(Bucket="pin", Key=key)["Body"].read(), data)
        return [r for r in self.upstream.from_larder(mark)
                if r["method"] == "GET" and r["target"].startswith("/pin/pinned/")]


class Pins(PinnedSet, AdminCalls, LarderCase):
    ADMIN_TOKEN = TOKEN
    LARDER_ENV = {
        "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % ADMIN_PORT,
        "LARDER_ADMIN_TOKEN": TOKEN,
        "LARDER_CHUNK_SIZE": "1MiB",
        "LARDER_RAM_CACHE_SIZE": "64MiB",     # RAM only; pins may hold 32 MiB
        "LARDER_METADATA_TTL": "immutable",
        "LARDER_READAHEAD": "2",
    }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.admin = "http://127.0.0.1:%d" % ADMIN_PORT
        # 20 MiB to pin, 320 MiB of other objects, 40 MiB: more than the pin limit
        cls.upload(n_pinned=20, n_stream=40, n_big=5)


    def warm(self, body):
        st, r = self.call("POST", "/admin/prefetch", dict(body, bucket="pin"))
        self.assertEqual(st, 202, r)
        return self.wait_job(r["job"])


    def pins(self):
        pins, cache = self.pin_stats()
        return pins, cache["pinned_bytes"]

    def test_pinned_set_stays_through_streaming_then_unpin_lets_it_go(self):
        info = self.warm({"prefix": "pinned/", "pin_seconds": 3600})
        self.assertEqual((info["state"], info["errors"]), ("done", 0), info)
        pins, pinned_bytes = self.pins()
        self.assertEqual(pinned_bytes, 20 * MiB)
        self.assertEqual([(p["id"], p["bucket"], p["prefix"], p["bytes"]) for p in pins],
                         [(info["id"], "pin", "pinned/", 20 * MiB)])
        self.assertAlmostEqual(pins[0]["until"], time.time() + 3600, delta=30)
        m = self.metrics()
        self.assertIn('larder_pinned_bytes{tier="ram"} %d\n' % (20 * MiB), m)
        self.assertIn("larder_pins 1\n", m)
        self.assertIn('larder_pin_bytes{pin="%s"} %d\n' % (info["id"], 20 * MiB), m)

        self.stream_twice()
        self.assertEqual(self.gets_of_pinned_set(), [], "the pinned set was evicted")

        st, r = self.call("POST", "/admin/unpin", {"job": info["id"]})
        self.assertEqual((st, r), (200, {"unpinned": 1}))
        self.assertEqual(self.pins(), ([], 0))
        self.stream_twice()
        self.assertNotEqual(self.gets_of_pinned_set(), [], "unpinned, it should be evicted")

    def test_every_pin_is_shown(self):
        # Nothing bounds how many pins there are: stats and metrics show them all (the first
        # 256 were shown, and larder_pins said 256, with 260 in force).
        key = "pinned/00.bin"
        ids = []
        for i in range(260):
            st, r = self.call("POST", "/admin/prefetch", {"bucket": "pin", "keys": [key],
                                                          "pin_seconds": 3600})
            self.assertEqual(st, 202, r)
            ids.append(r["job"])
            if i % 50 == 49:
                self.wait_job(ids[-1])
        self.wait_job(ids[-1])
        try:
            pins, _ = self.pins()
            self.assertEqual(sorted(p["id"] for p in pins), sorted(ids))
            m = self.metrics()
            self.assertIn("larder_pins 260\n", m)
            self.assertEqual(m.count("larder_pin_bytes{pin="), 260)
        finally:
            for job in ids:
                self.call("POST", "/admin/unpin", {"job": job})
        self.assertEqual(self.pins()[0], [])

    def test_without_a_pin_streaming_evicts_the_set(self):
        info = self.warm({"prefix": "pinned/"})
        self.assertEqual(info["state"], "done", info)
        self.assertEqual(self.pins(), ([], 0))
        self.stream_twice()
        self.assertGreater(len(self.gets_of_pinned_set()), 5)

    def test_pin_past_the_limit_is_refused(self):
        self.assertIn("LARDER_PIN_MAX", self.refused_pin("pin", "big/"))
        # A key list's size is known only as it warms: the job fails, and
        # what it had pinned is let go.
        info = self.warm({"keys": ["big/%d.bin" % i for i in range(5)], "pin_seconds": 60})
        self.assertEqual(info["state"], "failed", info)
        self.assertIn("pin refused", info["error"])
        self.assertEqual(self.pins(), ([], 0))
        st, r = self.call("POST", "/admin/prefetch", {"bucket": "pin", "prefix": "big/",
                                                      "pin_seconds": 0})
        self.assertEqual(st, 400, r)

    def test_a_key_past_the_limit_is_refused_before_its_chunks(self):
        # A key list is sized object by object: one larger than the limit (40 MiB against
        # 32) failed the job only once the limit's worth of its chunks had been fetched and
        # pinned (32 GETs here), though its size was known before the first.
        self.direct.put_object(Bucket="pin", Key="huge/one.bin", Body=blob(5000, 40 * MiB))
        try:
            m = self.upstream.mark()
            info = self.warm({"keys": ["huge/one.bin"], "pin_seconds": 60})
            self.assertEqual(info["state"], "failed", info)
            self.assertIn("pin refused", info["error"])
            gets = [r for r in self.upstream.from_larder(m) if r["method"] == "GET"]
            self.assertLessEqual(len(gets), 2, [r["target"] for r in gets])
            self.assertEqual(self.pins(), ([], 0))
        finally:
            self.direct.delete_object(Bucket="pin", Key="huge/one.bin")

    def test_a_pin_keeps_the_room_it_was_sized_for(self):
        # Two prefix pins that could not both fit were both taken (the up-front check counted
        # only what was pinned already, not what a pin job still warming would pin), and the
        # first failed midway. Now a pin's room is kept for it until its job ends.
        sets = {}
        for p in ("pa", "pb"):
            sets[p] = ["%s/%d.bin" % (p, i) for i in range(6)]
            for i, key in enumerate(sets[p]):
                self.direct.put_object(Bucket="pin", Key=key, Body=blob(3000 + i, 3 * MiB))
        st, a = self.call("POST", "/admin/prefetch", {"bucket": "pin", "prefix": "pa/",
                                                      "pin_seconds": 3600,
                                                      "bandwidth_bytes_per_second": 4 * MiB})
        self.assertEqual(st, 202, a)
        try:
            self.assertIn("pin jobs still warming", self.refused_pin("pin", "pb/"))
            # A key list is sized as it warms: it fails where the room runs out, not pa/.
            info = self.warm({"keys": sets["pb"], "pin_seconds": 60})
            self.assertEqual(info["state"], "failed", info)
            self.assertIn("pin refused", info["error"])
            info = self.wait_job(a["job"])
            self.assertEqual((info["state"], info["errors"], info["bytes_done"]),
                             ("done", 0, 18 * MiB), info)
            pins, pinned_bytes = self.pins()
            self.assertEqual([(p["id"], p["bytes"]) for p in pins], [(a["job"], 18 * MiB)])
            self.assertEqual(pinned_bytes, 18 * MiB)
        finally:
            self.call("POST", "/admin/unpin", {"job": a["job"]})
        self.assertEqual(self.pins(), ([], 0))

    def test_a_prefix_pinned_again_counts_once(self):
        # Pinning a prefix again (to hold it longer) sized it whole beside the pin that held
        # it already: 20 + 20 MiB against a 32 MiB cap was refused, though it added nothing.
        first = self.warm({"prefix": "pinned/", "pin_seconds": 60})
        try:
            self.assertEqual(first["state"], "done", first)
            again = self.warm({"prefix": "pinned/", "pin_seconds": 3600})
            self.assertEqual((again["state"], again["errors"]), ("done", 0), again)
            pins, pinned_bytes = self.pins()
            self.assertEqual(sorted(p["bytes"] for p in pins), [20 * MiB, 20 * MiB])
            self.assertEqual(pinned_bytes, 20 * MiB)
            self.call("POST", "/admin/unpin", {"job": first["id"]})
            self.assertEqual(self.pins()[1], 20 * MiB)  # the second holds them
            self.assertEqual(self.gets_of_pinned_set(), [])
        finally:
            self.call("POST", "/admin/unpin", {"bucket": "pin", "prefix": "pinned/"})
        self.assertEqual(self.pins(), ([], 0))

    def test_chunks_that_fail_leave_the_pin(self):
        # A pin counted each chunk from when its fetch began; chunks that then failed (the
        # object deleted since larder learnt its size: metadata is immutable here) stayed in
        # it, so the pin showed bytes the cache did not hold and saved chunks that never came.
        self.direct.put_object(Bucket="pin", Key="fails/gone.bin", Body=blob(4000, 4 * MiB))
        self.direct.put_object(Bucket="pin", Key="fails/kept.bin", Body=blob(4001, 2 * MiB))
        self.s3.head_object(Bucket="pin", Key="fails/gone.bin")
        self.direct.delete_object(Bucket="pin", Key="fails/gone.bin")
        info = self.warm({"keys": ["fails/gone.bin", "fails/kept.bin"], "pin_seconds": 60})
        try:
            # What larder had of gone.bin (its HEAD may have brought a chunk) is warm, the rest
            # failed: the pin holds what is warm, and only that.
            self.assertEqual(info["state"], "done", info)
            self.assertGreater(info["errors"], 0, info)
            self.assertEqual(info["objects_done"], 1, info)  # kept.bin only: gone.bin failed
            warm = info["bytes_done"]
            self.assertEqual(warm, 2 * MiB + (4 - info["errors"]) * MiB, info)
            pins, pinned_bytes = self.pins()
            self.assertEqual([(p["id"], p["bytes"]) for p in pins], [(info["id"], warm)])
            self.assertEqual(pinned_bytes, warm)
        finally:
            self.call("POST", "/admin/unpin", {"job": info["id"]})
            self.direct.delete_object(Bucket="pin", Key="fails/kept.bin")
        self.assertEqual(self.pins(), ([], 0))

    def test_pin_expires(self):
        keys = sorted(self.pinned)[:4]
        info = self.warm({"keys": keys, "pin_seconds": 2})
        self.assertEqual(info["state"], "done", info)
        pins, pinned_bytes = self.pins()
        self.assertEqual([(p["id"], p["keys"], p["bytes"]) for p in pins],
                         [(info["id"], 4, 4 * MiB)])
        self.assertEqual(pinned_bytes, 4 * MiB)
        deadline = time.monotonic() + 10
        while self.pins() != ([], 0) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.pins(), ([], 0))

    def test_cli_warm_pin_and_unpin(self):
        out = self.cli("warm", "--pin", "10m", "s3://pin/pinned/0")
        self.assertEqual(out.returncode, 0, out.stderr)
        pins, pinned_bytes = self.pins()
        self.assertEqual([(p["prefix"], p["bytes"]) for p in pins], [("pinned/0", 10 * MiB)])
        self.assertAlmostEqual(pins[0]["until"], time.time() + 600, delta=30)
        out = self.cli("unpin", "s3://pin/pinned/")
        self.assertEqual((out.returncode, out.stdout), (0, b"unpinned 1 pin\n"), out.stderr)
        self.assertEqual(self.pins(), ([], 0))
        out = self.cli("unpin", "pf-999")
        self.assertEqual(out.returncode, 1)
        self.assertIn(b"no pin pf-999", out.stderr)
        out = self.cli("warm", "--pin", "soon", "s3://pin/pinned/")
        self.assertEqual(out.returncode, 2)
        # Out of range is a usage error too, caught before anything is asked.
        for args in (("--pin", "31d"), ("--bandwidth", "99999999999999999999")):
            out = self.cli("warm", *args, "s3://pin/pinned/")
            self.assertEqual(out.returncode, 2, (args, out.stderr))
            self.assertIn(args[0].encode(), out.stderr)
        out = self.cli("warm", "--pin", "1m", "s3://pin/big/")
        self.assertEqual(out.returncode, 1)
        self.assertIn(b"LARDER_PIN_MAX", out.stderr)
