"""PyTorch training input through larder (docs/clients.md, PyTorch and WebDataset).

A DataLoader with a map-style dataset of 300 objects (~100 KiB each), 4
workers, each with its own boto3 client, reads every sample through larder
twice: epoch 1 returns every object's exact bytes, epoch 2 is all hits --
x-larder-cache: hit on every response and not one request upstream. And a
WebDataset-style read: tar shards streamed from a GET body by a torch
IterableDataset split across workers, twice, the second time from the cache.

The clients run under Debian's /usr/bin/python3 (python3-torch, python3-boto3;
scripts/deps.sh installs them) as scripts in clients/. Without that
interpreter or module the tests skip, except under CI=true, where they fail.
"""
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, REGION, LarderCase

DEBIAN_PYTHON = "/usr/bin/python3"
CLIENTS = os.path.join(harness.HERE, "clients")
BUCKET = "train"


def sha(data):
    return hashlib.sha256(data).hexdigest()


def need_debian_modules(*modules):
    """Skips (fails under CI=true) unless /usr/bin/python3 imports every module."""
    why = None
    if not os.access(DEBIAN_PYTHON, os.X_OK):
        why = "%s is missing" % DEBIAN_PYTHON
    else:
        r = subprocess.run([DEBIAN_PYTHON, "-c", "import " + ", ".join(modules)],
                           capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
        if r.returncode:
            why = "%s cannot import %s: %s" % (DEBIAN_PYTHON, ", ".join(modules),
                                               r.stderr.decode(errors="replace")[-300:])
    harness.need_client(why, " (scripts/deps.sh installs it)")


def client_env(endpoint):
    """The environment of a client script: larder's endpoint and key, nothing
    else of the caller's AWS settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "LARDER_", "PYTHON"))}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=CLIENT_KEY,
               AWS_SECRET_ACCESS_KEY=CLIENT_SECRET, AWS_DEFAULT_REGION=REGION,
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    return env


def gets_upstream(upstream, since):
    return [r for r in upstream.from_larder(since) if r["method"] == "GET"]


class TorchDataLoader(LarderCase):
    N = 300

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="larder-torch-")
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.expected = {}
        for i in range(cls.N):
            key = "samples/%05d.bin" % i
            data = os.urandom(100 * 1024 + 37 * i)
            cls.direct.put_object(Bucket=BUCKET, Key=key, Body=data)
            cls.expected[key] = sha(data)
        cls.keys_file = os.path.join(cls.tmp, "keys")
        with open(cls.keys_file, "w") as f:
            f.write("\n".join(sorted(cls.expected)) + "\n")

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def fail_with_logs(self, what, out=b"", err=b""):
        self.fail("%s\n--- stdout\n%s\n--- stderr\n%s\n--- larder log (tail)\n%s"
                  % (what, out.decode(errors="replace")[-3000:], err.decode(errors="replace")[-3000:],
                     "\n".join(self.larder.log().splitlines()[-15:])))

    def test_dataloader_two_epochs_second_all_hits(self):
        need_debian_modules("torch", "boto3")
        p = subprocess.Popen(
            [DEBIAN_PYTHON, os.path.join(CLIENTS, "torch_dataloader.py"), "--bucket", BUCKET,
             "--keys", self.keys_file, "--workers", "4", "--epochs", "2", "--pause", "--digests"],
            env=client_env(self.larder.url), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        try:
            first = p.stdout.readline()
            if first.strip() != b"epoch-done":
                p.kill()
                out, err = p.communicate()
                self.fail_with_logs("epoch 1 did not finish", first + out, err)
            mark = self.upstream.mark()
            out, err = p.communicate(b"\n", timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if p.returncode:
            self.fail_with_logs("the DataLoader exited %d" % p.returncode, out, err)
        res = json.loads(out)
        e1, e2 = res["epochs"]
        # epoch 1: every sample, byte for byte, from all 4 workers
        self.assertEqual(e1["samples"], self.N)
        self.assertEqual(e1["digests"], self.expected)
        self.assertEqual(e1["workers_seen"], [0, 1, 2, 3], e1["workers_seen"])
        # epoch 2: the same bytes, every response a hit, nothing fetched upstream
        self.assertEqual(e2["digests"], self.expected)
        self.assertEqual(e2["hits"], self.N, "epoch 2 was not all hits")
        self.assertEqual(gets_upstream(self.upstream, mark), [], "epoch 2 fetched from upstream")
        # boto3 reads AWS_ENDPOINT_URL itself only from botocore 1.31 (docs/clients.md)
        bc = tuple(int(x) for x in res["botocore"].split(".")[:2])
        self.assertEqual(res["env_endpoint_honoured"], bc >= (1, 31), res["botocore"])
        sys.stderr.write("\n  torch %s, boto3 %s: epoch 1 %.0f samples/s, epoch 2 %.0f samples/s "
                         "(ASan larder) ... " % (res["torch"], res["boto3"], e1["samples_per_s"],
                                                 e2["samples_per_s"]))


class TorchTarShards(LarderCase):
    """WebDataset's layout: samples as tar members (KEY.bin, KEY.cls), shards of them."""
    SHARDS, PER_SHARD = 4, 25

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.expected = {}
        for s in range(cls.SHARDS):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for j in range(cls.PER_SHARD):
                    name = "s%02d-%04d" % (s, j)
                    for ext, data in ((".bin", os.urandom(20000 + 13 * j)),
                                      (".cls", str(j % 10).encode())):
                        ti = tarfile.TarInfo(name + ext)
                        ti.size = len(data)
                        tar.addfile(ti, io.BytesIO(data))
                        cls.expected[name + ext] = sha(data)
            cls.direct.put_object(Bucket=BUCKET, Key="shards/shard-%06d.tar" % s,
                                  Body=buf.getvalue())

    def read_shards(self):
        keys = ",".join("shards/shard-%06d.tar" % s for s in range(self.SHARDS))
        r = subprocess.run(
            [DEBIAN_PYTHON, os.path.join(CLIENTS, "torch_tarshards.py"), "--bucket", BUCKET,
             "--shards", keys, "--workers", "2"],
            env=client_env(self.larder.url), capture_output=True, timeout=300,
            stdin=subprocess.DEVNULL)
        if r.returncode:
            self.fail("torch_tarshards.py exited %d\n%s" % (r.returncode, r.stderr.decode()[-3000:]))
        return json.loads(r.stdout)

    def test_tar_shards_streamed_twice(self):
        need_debian_modules("torch", "boto3")
        first = self.read_shards()
        self.assertEqual(first["members"], self.expected)
        self.assertEqual(first["workers_seen"], [0, 1])
        mark = self.upstream.mark()
        second = self.read_shards()
        self.assertEqual(second["members"], self.expected)
        self.assertEqual(second["shard_hits"], self.SHARDS)
        self.assertEqual(gets_upstream(self.upstream, mark), [], "the second read fetched upstream")

if __name__ == "__main__":
    import unittest
    unittest.main()
