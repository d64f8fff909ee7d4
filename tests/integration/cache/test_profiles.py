"""Access profiles: POST/GET /admin/profiles, POST /admin/profiles/NAME/stop,
POST /admin/prefetch {"profile": NAME}, larder profile / larder warm --profile.

What an operator sees: switch recording on for a job tag (the x-larder-job
header) or a client key, run the job, stop; the profile lists the objects the
job read, once each, in first-read order, is kept in the cache directory
across a restart, and warming it after a purge makes the job's reads hits
with no upstream GET, fetched in the recorded order.
"""
import http.client
import json
import os
import random
import shutil
import tempfile
import time

import harness
from admin_calls import AdminCalls
from harness import LarderCase

TOKEN = "profiles-test-token-0"
ADMIN_PORT = harness.free_port()
CACHE_DIR = tempfile.mkdtemp(prefix="larder-profiles-")


class Profiles(AdminCalls, LarderCase):
    ADMIN_TOKEN = TOKEN
    LARDER_ENV = {
        "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % ADMIN_PORT,
        "LARDER_ADMIN_TOKEN": TOKEN,
        "LARDER_CACHE_DIR": CACHE_DIR,
        "LARDER_DISK_CACHE_SIZE": "256MiB",
        "LARDER_METADATA_TTL": "immutable",
    }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.admin = "http://127.0.0.1:%d" % ADMIN_PORT
        cls.direct.create_bucket(Bucket="prof")
        cls.data = {}
        for i in range(60):
            key = "ds/%02d.jpg" % i
            cls.data[key] = random.Random(i).randbytes(5000 + i)
            cls.direct.put_object(Bucket="prof", Key=key, Body=cls.data[key])

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(CACHE_DIR, ignore_errors=True)

    def get(self, key, tag=None):
        r = harness.signed_request(self.larder.url, "GET", harness.key_path("prof", key),
                                   headers={"x-larder-job": tag} if tag else None)
        self.assertEqual((r.status, r.body), (200, self.data[key]), key)
        return r

    def profile(self, name):
        st, r = self.call("GET", "/admin/profiles")
        self.assertEqual(st, 200, r)
        return next((p for p in r["profiles"] if p["name"] == name), None)

    def test_record_restart_purge_replay(self):
        st, r = self.call("POST", "/admin/profiles", {"name": "train-7", "tag": "job-7"})
        self.assertEqual((st, r), (201, {"name": "train-7", "recording": True}))
        st, r = self.call("POST", "/admin/profiles", {"name": "train-7", "tag": "x"})
        self.assertEqual((st, r["error"]), (409, "profile_recording"))
        st, r = self.call("POST", "/admin/profiles", {"name": "by-key",
                                                      "key": harness.CLIENT_KEY})
        self.assertEqual(st, 201, r)

        keys = sorted(self.data)
        order = keys[:50]
        random.Random(7).shuffle(order)
        for k in order:
            self.get(k, "job-7")
        for k in order[:10]:                 # read again: no new entries
            self.get(k, "job-7")
        for k in keys[50:]:                  # another job's reads: not in train-7
            self.get(k, "job-8")

        st, r = self.call("POST", "/admin/profiles/train-7/stop")
        self.assertEqual((st, r), (200, {"name": "train-7", "recording": False}))
        st, r = self.call("POST", "/admin/profiles/train-7/stop")
        self.assertEqual(st, 409, r)
        self.assertEqual(self.call("POST", "/admin/profiles/nope/stop")[0], 404)
        self.assertEqual(self.profile("train-7"), {"name": "train-7", "recording": False,
                                                   "tag": "job-7", "reads": 50, "dropped": 0})
        self.assertEqual(self.profile("by-key")["reads"], 60)
        with open(os.path.join(CACHE_DIR, "profiles", "train-7.json")) as f:
            saved = json.load(f)
        self.assertEqual(saved["reads"], [["prof", k] for k in order])

        # A restart keeps both (by-key was still recording: saved at shutdown).
        self.assertEqual(self.larder.stop(), 0, self.larder.log()[-3000:])
        self.larder.start()
        self.assertEqual(self.profile("train-7")["reads"], 50)
        self.assertEqual(self.profile("by-key"), {"name": "by-key", "recording": False,
                                                  "key": harness.CLIENT_KEY, "reads": 60,
                                                  "dropped": 0})

        st, r = self.call("POST", "/admin/purge", {"bucket": "prof", "prefix": "ds/"})
        self.assertEqual(st, 200, r)
        mark = self.upstream.mark()
        st, r = self.call("POST", "/admin/prefetch", {"profile": "train-7", "concurrency": 1})
        self.assertEqual(st, 202, r)
        self.assertEqual((r["jobs"], r["objects"]), ([r["job"]], 50))
        info = self.wait_job(r["job"])
        self.assertEqual((info["state"], info["objects_done"], info["errors"]), ("done", 50, 0))
        fetched = []
        for q in self.upstream.from_larder(mark):
            k = q["target"].split("?")[0][len("/prof/"):]
            if q["method"] == "GET" and k in self.data and k not in fetched:
                fetched.append(k)
        self.assertEqual(fetched, order, "the replay did not follow the recorded order")

        mark = self.upstream.mark()
        for k in order:
            self.assertEqual(self.get(k).headers.get("x-larder-cache"), "hit", k)
        self.assertEqual([q for q in self.upstream.from_larder(mark) if q["method"] == "GET"],
                         [], "reads after the replay went upstream")

        self.assertEqual(self.call("POST", "/admin/prefetch", {"profile": "nope"})[0], 404)
        self.assertEqual(self.call("POST", "/admin/prefetch", {"profile": "train-7",
                                                               "bucket": "prof"})[0], 400)
        self.assertEqual(self.call("POST", "/admin/profiles", {"name": "../x", "tag": "t"})[0],
                         400)

    def test_cli(self):
        out = self.cli("profile", "start", "clip", "--tag", "clip-job")
        self.assertEqual((out.returncode, out.stdout), (0, b"profile clip: recording\n"),
                         out.stderr)
        for k in sorted(self.data)[:3]:
            self.get(k, "clip-job")
        out = self.cli("profile", "stop", "clip")
        self.assertEqual(out.returncode, 0, out.stderr)
        out = self.cli("profile", "list")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"name\trecording\trecords\treads\tdropped\n", out.stdout)
        self.assertIn(b"clip\tno\ttag clip-job\t3\t0\n", out.stdout)
        out = self.cli("warm", "--profile", "clip")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(self.cli("profile", "start", "clip").returncode, 2)
        self.assertEqual(self.cli("warm", "--profile", "missing").returncode, 1)

    def test_stop_with_a_longer_name_stops_nothing(self):
        name = "long-" + "n" * 59                      # 64 bytes, the longest a name may be
        st, r = self.call("POST", "/admin/profiles", {"name": name, "tag": "long-job"})
        self.assertEqual(st, 201, r)
        st, r = self.call("POST", "/admin/profiles/%sX/stop" % name)
        self.assertEqual((st, r.get("error")), (404, "no_such_profile"), r)
        self.assertIn(name + "X", r["message"])
        self.assertTrue(self.profile(name)["recording"], "another profile was stopped")
        st, r = self.call("POST", "/admin/profiles/%s/stop" % name)
        self.assertEqual((st, r), (200, {"name": name, "recording": False}))

    def two_bucket_profile(self, name, bucket, key):
        """Profile name recorded over ds/00.jpg of "prof", then key of bucket (made here)."""
        self.direct.create_bucket(Bucket=bucket)
        self.direct.put_object(Bucket=bucket, Key=key, Body=b"x")
        st, r = self.call("POST", "/admin/profiles", {"name": name, "tag": name + "-job"})
        self.assertEqual(st, 201, r)
        self.get("ds/00.jpg", name + "-job")
        r = harness.signed_request(self.larder.url, "GET", harness.key_path(bucket, key),
                                   headers={"x-larder-job": name + "-job"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.call("POST", "/admin/profiles/%s/stop" % name)[0], 200)
        self.direct.delete_object(Bucket=bucket, Key=key)

    def test_replay_with_an_unreadable_bucket_starts_nothing(self):
        self.two_bucket_profile("two", "prof-gone", "x")
        self.direct.delete_bucket(Bucket="prof-gone")

        def job_ids():
            st, r = self.call("GET", "/admin/jobs")
            self.assertEqual(st, 200, r)
            return [j["id"] for j in r["jobs"]]
        before = job_ids()
        st, r = self.call("POST", "/admin/prefetch", {"profile": "two"})
        self.assertEqual((st, r.get("error")), (404, "bucket_unreadable"), r)
        self.assertEqual(job_ids(), before, "a refused replay started a job")

    def test_a_read_answered_before_the_stop_is_recorded(self):
        # A read is recorded as its answer starts: a client that holds its answer (here its
        # headers, the body still on the wire) and then stops the profile finds the read in it.
        # It was recorded when libmicrohttpd reported the request done, which can come after
        # the client has read everything and sent the stop.
        big = random.Random(99).randbytes(16 << 20)
        self.direct.put_object(Bucket="prof", Key="big/slow.bin", Body=big)
        st, r = self.call("POST", "/admin/profiles", {"name": "held", "tag": "held-job"})
        self.assertEqual(st, 201, r)
        path = harness.key_path("prof", "big/slow.bin")
        h = harness.sign_headers("GET", self.larder.url + path, harness.CLIENT_KEY,
                                 harness.CLIENT_SECRET, {"x-larder-job": "held-job"})
        c = http.client.HTTPConnection("127.0.0.1", self.larder.port, timeout=30)
        try:
            c.request("GET", path, headers=h)
            resp = c.getresponse()
            self.assertEqual(resp.status, 200)
            first = resp.read(4096)                  # the rest waits in the socket
            self.assertEqual(first, big[:4096])
            st, r = self.call("POST", "/admin/profiles/held/stop")
            self.assertEqual(st, 200, r)
            self.assertEqual(self.profile("held")["reads"], 1)
            self.assertEqual(first + resp.read(), big)
        finally:
            c.close()

    def test_warm_exits_1_when_any_job_of_a_replay_had_errors(self):
        # A replay is a job per bucket; larder warm --profile followed the first only and
        # exited 0 while another had errors (audit round 3).
        self.two_bucket_profile("two-buckets", "prof-other", "gone")
        st, r = self.call("POST", "/admin/purge", {"bucket": "prof-other", "key": "gone"})
        self.assertEqual(st, 200, r)
        out = self.cli("warm", "--profile", "two-buckets")
        self.assertEqual(out.returncode, 1, (out.stdout, out.stderr))
        self.assertIn(b"errors", out.stderr)

    def test_warm_no_wait_prints_every_job_of_a_replay(self):
        # --no-wait prints the job id to follow; a replay is a job per bucket, and printing
        # the first alone left the others to be found in `larder jobs`.
        self.two_bucket_profile("two-nowait", "prof-nowait", "k")
        out = self.cli("warm", "--no-wait", "--profile", "two-nowait")
        self.assertEqual(out.returncode, 0, out)
        ids = out.stdout.decode().split()
        self.assertEqual(len(ids), 2, out.stdout)
        for job in ids:
            self.assertIn(self.wait_job(job)["bucket"], ("prof", "prof-nowait"))


class ProfilesPastTheCap(AdminCalls, LarderCase):
    """A profiles folder holding more than the 1,024 profiles larder keeps (copied in
    by hand, or kept from a build that did not bound them at start) loads 1,024 and
    says which it skipped: it loaded them all, and new ones were then refused."""
    ADMIN_TOKEN = TOKEN
    CAP = 1024

    @classmethod
    def setUpClass(cls):
        cls.cache_dir = tempfile.mkdtemp(prefix="larder-profiles-cap-")
        cls.addClassCleanup(shutil.rmtree, cls.cache_dir, True)
        folder = os.path.join(cls.cache_dir, "profiles")
        os.mkdir(folder)
        for i in range(cls.CAP + 6):
            with open(os.path.join(folder, "p%04d.json" % i), "w") as f:
                json.dump({"name": "p%04d" % i, "tag": "t", "reads": [["prof", "k"]]}, f)
        port = harness.free_port()
        cls.admin = "http://127.0.0.1:%d" % port
        cls.LARDER_ENV = {"LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % port,
                          "LARDER_ADMIN_TOKEN": TOKEN, "LARDER_CACHE_DIR": cls.cache_dir,
                          "LARDER_DISK_CACHE_SIZE": "64MiB"}
        super().setUpClass()

    def test_loads_the_cap_and_says_what_it_skipped(self):
        st, r = self.call("GET", "/admin/profiles")
        self.assertEqual(st, 200, r)
        self.assertEqual(len(r["profiles"]), self.CAP)
        skipped = [l for l in self.larder.log().splitlines() if "profiles kept already" in l]
        self.assertEqual(len(skipped), 6, skipped)
