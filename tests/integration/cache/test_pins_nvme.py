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
        st, r = self.call("POST", "/admin/prefetch", {"bucket": "pin", "prefix": "big/",
                                                      "pin_seconds": 60})
        self.assertEqual(st, 409, r)
        self.assertEqual(r["error"], "pin_too_large", r)
        self.assertIn("LARDER_PIN_MAX_NVME", r["message"])
        info = self.wait_job(self.call("POST", "/admin/prefetch", {
            "bucket": "pin", "keys": ["big/%d.bin" % i for i in range(9)],
            "pin_seconds": 60})[1]["job"])
        self.assertEqual(info["state"], "failed", info)
        self.assertIn("pin refused", info["error"])
        pins, cache = self.pin_stats()
        self.assertEqual((pins, cache["pinned_bytes"], cache["nvme"]["pinned_bytes"]), ([], 0, 0))
