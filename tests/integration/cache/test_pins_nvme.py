"""Pins on the NVMe tier: a pin holds its chunks in RAM up to LARDER_PIN_MAX
and on NVMe up to LARDER_PIN_MAX_NVME, so a pinned set larger than the RAM
pin cap survives whatever streams through both tiers (RAM lets the rest go,
NVMe keeps it); past both caps a pin is refused; unpinned, the set is
evicted like anything else.
"""
import time

import harness
from admin_calls import AdminCalls
from test_cache import CacheCase
from test_pins import PinnedSet, blob

TOKEN = "pins-nvme-test-token-01"
ADMIN_PORT = harness.free_port()
MiB = 1024 * 1024
N_PINNED = 40                                # 40 MiB: past the RAM pin cap (16 MiB)


class PinsNvme(PinnedSet, AdminCalls, CacheCase):
    ADMIN_TOKEN = TOKEN
    EXTRA_ENV = {
        "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % ADMIN_PORT,
        "LARDER_ADMIN_TOKEN": TOKEN,
        "LARDER_RAM_CACHE_SIZE": "32MiB",     # pins may hold 16 MiB in RAM
        "LARDER_DISK_CACHE_SIZE": "128MiB",   # and 64 MiB on NVMe
        "LARDER_METADATA_TTL": "immutable",
        "LARDER_READAHEAD": "2",
    }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.admin = "http://127.0.0.1:%d" % ADMIN_PORT
        # 160 MiB streamed: more than both tiers; big/: 72 MiB, more than either cap
        cls.upload(n_pinned=N_PINNED, n_stream=20, n_big=9)

    def test_a_pin_past_the_ram_cap_stays_on_nvme_then_unpin_lets_it_go(self):
        st, r = self.call("POST", "/admin/prefetch", {"bucket": "pin", "prefix": "pinned/",
                                                      "pin_seconds": 3600})
        self.assertEqual(st, 202, r)
        info = self.wait_job(r["job"])
        self.assertEqual((info["state"], info["errors"]), ("done", 0), info)
        pins, cache = self.pin_stats()
        self.assertEqual([(p["id"], p["bytes"]) for p in pins], [(info["id"], N_PINNED * MiB)])
        self.assertEqual(cache["pinned_bytes"], 16 * MiB)          # the RAM cap's worth
        self.assertEqual(cache["pin_limit_bytes"], 16 * MiB)
        self.assertEqual(cache["nvme"]["pin_limit_bytes"], 64 * MiB)
        # NVMe writes follow the fills (moments later); on NVMe each entry
        # also takes its header and padding (4 KiB).
        deadline = time.monotonic() + 10
        while cache["nvme"]["pinned_bytes"] < N_PINNED * (MiB + 4096) and time.monotonic() < deadline:
            time.sleep(0.1)
            _, cache = self.pin_stats()
        self.assertEqual(cache["nvme"]["pinned_bytes"], N_PINNED * (MiB + 4096))
        m = self.metrics()
        self.assertIn('larder_pinned_bytes{tier="ram"} %d\n' % (16 * MiB), m)
        self.assertIn('larder_pinned_bytes{tier="nvme"} %d\n' % (N_PINNED * (MiB + 4096)), m)
        self.assertIn('larder_pin_limit_bytes{tier="nvme"} %d\n' % (64 * MiB), m)

        self.stream_twice()
        self.assertEqual(self.gets_of_pinned_set(), [], "the pinned set was evicted")
        _, cache = self.pin_stats()
        self.assertGreater(cache["nvme"]["used_bytes"], 64 * MiB, "nothing streamed through NVMe")

        st, r = self.call("POST", "/admin/unpin", {"job": info["id"]})
        self.assertEqual((st, r), (200, {"unpinned": 1}))
        pins, cache = self.pin_stats()
        self.assertEqual((pins, cache["pinned_bytes"], cache["nvme"]["pinned_bytes"]), ([], 0, 0))
        self.stream_twice()
        self.assertGreater(len(self.gets_of_pinned_set()), 5, "unpinned, it should be evicted")

    def test_a_pin_past_both_caps_is_refused(self):
        self.assertIn("LARDER_PIN_MAX_NVME", self.refused_pin("pin", "big/"))
        info = self.wait_job(self.call("POST", "/admin/prefetch", {
            "bucket": "pin", "keys": ["big/%d.bin" % i for i in range(9)],
            "pin_seconds": 60})[1]["job"])
        self.assertEqual(info["state"], "failed", info)
        self.assertIn("pin refused", info["error"])
        pins, cache = self.pin_stats()
        self.assertEqual((pins, cache["pinned_bytes"], cache["nvme"]["pinned_bytes"]), ([], 0, 0))


TINY_ADMIN_PORT = harness.free_port()


class TinyPins(PinnedSet, AdminCalls, CacheCase):
    """The NVMe pin cap counts what pinned entries take on disk: a 1,000-byte
    object's entry is a 4 KiB block. A pin of tiny objects that would pass the
    cap as entries is refused up front, though their bytes alone would fit;
    one that fits keeps the tier's pinned entries within the cap."""
    ADMIN_TOKEN = TOKEN
    EXTRA_ENV = {
        "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % TINY_ADMIN_PORT,
        "LARDER_ADMIN_TOKEN": TOKEN,
        "LARDER_PIN_MAX": "64KiB",            # RAM: less than either set's bytes
        "LARDER_PIN_MAX_NVME": "1MiB",        # 256 entries of tiny objects
        "LARDER_METADATA_TTL": "immutable",
    }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        from concurrent.futures import ThreadPoolExecutor
        cls.admin = "http://127.0.0.1:%d" % TINY_ADMIN_PORT
        cls.direct.create_bucket(Bucket="tiny")
        keys = ["many/%03d" % i for i in range(400)] + ["few/%03d" % i for i in range(200)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda k: cls.direct.put_object(Bucket="tiny", Key=k,
                                                          Body=blob(len(k), 1000)), keys))

    def test_tiny_objects_count_as_their_entries(self):
        # 400 KB of bytes, 1,600 KiB as entries: more than the 1 MiB cap.
        self.assertIn("1638400 as NVMe entries", self.refused_pin("tiny", "many/"))
        # 200 KB, 800 KiB as entries: pinned, and the tier holds them within the cap.
        st, r = self.call("POST", "/admin/prefetch", {"bucket": "tiny", "prefix": "few/",
                                                      "pin_seconds": 60})
        self.assertEqual(st, 202, r)
        info = self.wait_job(r["job"])
        self.assertEqual((info["state"], info["errors"]), ("done", 0), info)
        deadline = time.monotonic() + 10
        _, cache = self.pin_stats()
        while cache["nvme"]["pinned_bytes"] < 200 * 4096 and time.monotonic() < deadline:
            time.sleep(0.1)
            _, cache = self.pin_stats()
        self.assertEqual(cache["nvme"]["pinned_bytes"], 200 * 4096)
        self.assertEqual(cache["nvme"]["pin_limit_bytes"], 1024 * 1024)
        self.call("POST", "/admin/unpin", {"job": info["id"]})
