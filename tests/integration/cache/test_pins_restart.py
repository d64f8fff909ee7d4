"""Pins across a restart: with a cache directory each pin is saved under
DIR/pins, so a node restarted (SIGTERM, or kill -9 a second after the last
change) shows its pins again with the time they have left and holds the
chunks the NVMe tier recovered: whatever streams through both tiers, the
pinned set is re-read with no GET upstream. A pin that expired while
larder was stopped is gone; a file there that is not a saved pin is logged
and ignored; a pin restored under a lower cap keeps what fits.
"""
import json
import os
import signal
import time

import harness
import test_pins_nvme
from admin_calls import AdminCalls
from test_cache import CacheCase
from test_pins import PinnedSet

TOKEN = "pins-restart-test-token-01"
ADMIN_PORT = harness.free_port()
MiB = 1024 * 1024
N_PINNED = 20
# A pin that must outlive its warming and larder's stop (1-1.6 s with the plain build on a
# loaded 2-core machine; until is whole seconds, so it has 5-6), then run out before the restart.
EXPIRING_PIN_S = 6


class PinsRestart(PinnedSet, AdminCalls, CacheCase):
    ADMIN_TOKEN = TOKEN
    # The tiers and pin caps of test_pins_nvme (16 MiB in RAM, 64 MiB on NVMe).
    EXTRA_ENV = dict(test_pins_nvme.PinsNvme.EXTRA_ENV,
                     LARDER_ADMIN_LISTEN="127.0.0.1:%d" % ADMIN_PORT, LARDER_ADMIN_TOKEN=TOKEN)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.admin = "http://127.0.0.1:%d" % ADMIN_PORT
        # 20 MiB to pin; 160 MiB streamed: more than both tiers
        cls.upload(n_pinned=N_PINNED, n_stream=20, n_big=0)

    def setUp(self):
        if not self.larder.alive():           # a test that failed while it was stopped
            self.larder.start()

    def tearDown(self):
        for p in self.pin_stats()[0]:
            self.call("POST", "/admin/unpin", {"job": p["id"]})

    def pin_dir(self):
        return os.path.join(self.cache_dir, "pins")

    def pin_files(self):
        return sorted(f for f in os.listdir(self.pin_dir()) if f.endswith(".json"))

    def wait_saved(self, pin_id, until, chunks, timeout=10):
        """Until pin pin_id's file says what the pin is now: until, and its chunks. The saver
        writes a changed pin within a second (atomically: a temporary file, renamed)."""
        deadline = time.monotonic() + timeout
        while True:
            docs = []
            for name in self.pin_files():
                try:
                    with open(os.path.join(self.pin_dir(), name)) as f:
                        docs.append(json.load(f))
                except (OSError, ValueError):
                    continue  # removed meanwhile: read again
            if any(d.get("id") == pin_id and d.get("until") == until and
                   len(d.get("chunks", [])) == chunks for d in docs):
                return
            self.assertLess(time.monotonic(), deadline, "pin %s not saved: %r" % (pin_id, docs))
            time.sleep(0.05)

    def pin_set(self, seconds):
        """Warms and pins pinned/; returns the job once its chunks are all on NVMe."""
        st, r = self.call("POST", "/admin/prefetch", {"bucket": "pin", "prefix": "pinned/",
                                                      "pin_seconds": seconds})
        self.assertEqual(st, 202, r)
        info = self.wait_job(r["job"])
        self.assertEqual((info["state"], info["errors"]), ("done", 0), info)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.pin_stats()[1]["nvme"]["pinned_bytes"] == N_PINNED * (MiB + 4096):
                break
            time.sleep(0.1)
        self.assertEqual(self.pin_stats()[1]["nvme"]["pinned_bytes"], N_PINNED * (MiB + 4096))
        return info

    def restart(self, kill=False):
        if kill:
            self.larder.signal(signal.SIGKILL)
            self.larder.proc.wait()
        else:
            self.assertEqual(self.larder.stop(), 0)
        self.larder.start()

    def check_held_after_restart(self, kill):
        info = self.pin_set(3600)
        pins, _ = self.pin_stats()
        self.assertEqual(len(pins), 1, pins)
        until = pins[0]["until"]
        if kill:  # no save at exit: what the saver wrote is all there is
            self.wait_saved(info["id"], until, N_PINNED)
        self.restart(kill)
        pins, cache = self.pin_stats()
        self.assertEqual([(p["id"], p["bucket"], p["prefix"], p["bytes"], p["until"]) for p in pins],
                         [(info["id"], "pin", "pinned/", N_PINNED * MiB, until)])
        self.assertIn("pin %s restored: %d chunks" % (info["id"], N_PINNED), self.larder.log())
        self.assertEqual(cache["nvme"]["pinned_bytes"], N_PINNED * (MiB + 4096))

        self.stream_twice()
        _, cache = self.pin_stats()
        self.assertGreater(cache["nvme"]["used_bytes"], 64 * MiB, "nothing streamed through NVMe")
        self.assertEqual(self.gets_of_pinned_set(), [], "the pinned set was evicted")

        # A new job does not take the restored pin's id.
        st, r = self.call("POST", "/admin/prefetch", {"bucket": "pin", "keys": ["stream/00.bin"]})
        self.assertEqual(st, 202, r)
        self.assertNotEqual(r["job"], info["id"])
        self.wait_job(r["job"])

        # Unpinned, it is gone after the next restart too.
        st, r = self.call("POST", "/admin/unpin", {"job": info["id"]})
        self.assertEqual((st, r), (200, {"unpinned": 1}))
        self.restart()
        self.assertEqual(self.pin_stats()[0], [])
        self.assertEqual(self.pin_files(), [])

    def test_a_pin_holds_its_chunks_after_sigterm(self):
        self.check_held_after_restart(kill=False)

    def test_a_pin_holds_its_chunks_after_kill9(self):
        self.check_held_after_restart(kill=True)

    def test_a_pin_whose_job_was_running_at_shutdown_keeps_what_it_pinned(self):
        st, r = self.call("POST", "/admin/prefetch", {
            "bucket": "pin", "prefix": "pinned/", "pin_seconds": 3600, "concurrency": 1,
            "bandwidth_bytes_per_second": 4 * MiB})
        self.assertEqual(st, 202, r)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            pins, _ = self.pin_stats()
            if pins and pins[0]["bytes"] >= 3 * MiB:
                break
            time.sleep(0.1)
        before = pins[0]["bytes"]
        self.assertEqual(self.call("GET", "/admin/jobs/" + r["job"])[1]["state"], "warming")
        self.restart()
        pins, _ = self.pin_stats()
        self.assertEqual([p["id"] for p in pins], [r["job"]])
        self.assertGreaterEqual(pins[0]["bytes"], before)
        self.assertLess(pins[0]["bytes"], N_PINNED * MiB, "the job should not have finished")
        self.assertEqual(self.call("GET", "/admin/jobs/" + r["job"])[0], 404)  # not resumed

    def test_a_pin_past_a_smaller_cap_keeps_what_fits(self):
        """A restart under a lower LARDER_PIN_MAX_NVME (or an upgrade that counts pins
        differently, operations.md): the chunks that fit are pinned again, the rest are
        logged and stay ordinary entries, read back with no GET upstream."""
        info = self.pin_set(3600)
        self.assertEqual(self.larder.stop(), 0)
        # 9 entries of 1 MiB + 4 KiB on NVMe; 4 MiB in RAM, which the same 9 cover
        lower = {"LARDER_PIN_MAX_NVME": "10MiB", "LARDER_PIN_MAX": "4MiB"}
        self.larder.env.update(lower)
        try:
            self.larder.start()
            pins, cache = self.pin_stats()
            self.assertEqual([(p["id"], p["bytes"]) for p in pins], [(info["id"], 9 * MiB)])
            self.assertEqual(cache["nvme"]["pinned_bytes"], 9 * (MiB + 4096))
            self.assertIn("pin %s: 11 chunks not pinned again: past the pin limits" % info["id"],
                          self.larder.log())
            self.assertEqual(self.gets_of_pinned_set(), [], "chunks past the cap were dropped")
        finally:
            self.assertEqual(self.larder.stop(), 0)
            for k in lower:
                del self.larder.env[k]
            self.larder.start()

    def test_a_pin_that_expired_while_stopped_is_gone(self):
        info = self.pin_set(EXPIRING_PIN_S)
        until = self.pin_stats()[0][0]["until"]
        self.wait_saved(info["id"], until, N_PINNED)
        self.assertEqual(len(self.pin_files()), 1)
        self.assertEqual(self.larder.stop(), 0)
        self.assertLess(time.time(), until, "the pin ran out before larder stopped: the test "
                        "needs a longer EXPIRING_PIN_S")
        # A fixed wait on purpose: until the pin's time has run out (until, unix seconds),
        # while larder is stopped. The clock, not a guess at what larder does.
        time.sleep(max(0.0, until - time.time()) + 0.2)
        self.larder.start()
        self.assertEqual(self.pin_stats(), ([], self.pin_stats()[1]))
        _, cache = self.pin_stats()
        self.assertEqual(cache["nvme"]["pinned_bytes"], 0)
        self.assertIn("pin %s expired while larder was stopped" % info["id"], self.larder.log())
        self.assertEqual(self.pin_files(), [])

    def test_a_file_that_is_not_a_pin_is_ignored(self):
        self.larder.stop()
        good = {"version": 1, "id": "pf-77", "bucket": "pin", "keys": 0,
                "until": int(time.time()) + 3600, "chunks": [["00" * 16, MiB]]}
        bad = {
            "garbage.json": b"\x00\x01 not json",
            "truncated.json": json.dumps(good).encode()[:40],
            "badhex.json": json.dumps(dict(good, chunks=[["zz" * 16, MiB]])).encode(),
            "badlen.json": json.dumps(dict(good, chunks=[["00" * 16, -1]])).encode(),
            "version.json": json.dumps(dict(good, version=2)).encode(),
            "noid.json": json.dumps(dict(good, id="")).encode(),
        }
        os.makedirs(self.pin_dir(), exist_ok=True)
        for name, data in bad.items():
            with open(os.path.join(self.pin_dir(), name), "wb") as f:
                f.write(data)
        try:
            self.larder.start()
            pins, cache = self.pin_stats()
            self.assertEqual((pins, cache["pinned_bytes"], cache["nvme"]["pinned_bytes"]),
                             ([], 0, 0))
            log = self.larder.log()
            for name in bad:
                self.assertIn("%s: not a saved pin, ignored" % os.path.join(self.pin_dir(), name),
                              log)
            self.assertEqual(self.s3.get_object(Bucket="pin", Key="pinned/00.bin")["Body"].read(),
                             self.pinned["pinned/00.bin"])
        finally:
            for name in bad:
                os.unlink(os.path.join(self.pin_dir(), name))
