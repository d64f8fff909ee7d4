"""A FUSE client through larder: an s3fs mount (path style, SigV4).

The mount lists a prefix, reads every file of a small image set and a 40 MiB
shard byte for byte, writes a file (read back with boto3) and deletes one, as
a training job or a person at a shell would. Everything that touches the
mount runs as a child process with a timeout (ls, sha256sum, cp, rm), never
in this process, so a stuck mount fails the test instead of hanging the
suite; tearDown always unmounts (fusermount -u, then a lazy umount and a
kill of s3fs if that did not work).

Skipped only where FUSE cannot run (no s3fs, no /dev/fuse); under CI=true
that is a failure, since scripts/deps.sh installs s3fs.
"""
import hashlib
import os
import random
import shutil
import subprocess
import tempfile
import time
import unittest

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, LarderCase

MiB = 1024 * 1024
BUCKET = "fuse-bucket"
N_IMAGES = 30
CMD_TIMEOUT = 60  # any one command on the mount


def sha(data):
    return hashlib.sha256(data).hexdigest()


def fuse_missing():
    """Why FUSE cannot run here, or None."""
    if not shutil.which("s3fs"):
        return "s3fs is not installed (scripts/deps.sh installs it)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (a container without FUSE)"
    if not (shutil.which("fusermount") or shutil.which("fusermount3") or os.geteuid() == 0):
        return "neither fusermount nor root: the mount could not be undone"
    return None


class S3fsMount(LarderCase):
    @classmethod
    def setUpClass(cls):
        harness.need_client(fuse_missing())
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="larder-fuse-")
        cls.s3.create_bucket(Bucket=BUCKET)
        rnd = random.Random(12)
        cls.images = {}
        for i in range(N_IMAGES):
            data = rnd.randbytes(rnd.randint(1, 48 * 1024))
            name = "img-%03d.jpg" % i
            cls.s3.put_object(Bucket=BUCKET, Key="images/" + name, Body=data)
            cls.images[name] = sha(data)
        shard = rnd.randbytes(40 * MiB)
        cls.shard_sha = sha(shard)
        cls.s3.put_object(Bucket=BUCKET, Key="shards/shard-000.tar", Body=shard)
        del shard

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def setUp(self):
        self.mnt = tempfile.mkdtemp(prefix="mnt-", dir=self.tmp)
        passwd = os.path.join(self.tmp, "passwd-s3fs")
        with open(os.open(passwd, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("%s:%s\n" % (CLIENT_KEY, CLIENT_SECRET))
        os.chmod(passwd, 0o600)  # s3fs refuses a password file others can read
        self.s3fs_log = os.path.join(self.tmp, "s3fs.log")
        log = open(self.s3fs_log, "ab")
        # -f keeps s3fs in the foreground: this test owns the process and can
        # kill it whatever state the mount is in.
        self.proc = subprocess.Popen(
            ["s3fs", BUCKET, self.mnt, "-f",
             "-o", "url=" + self.larder.url, "-o", "use_path_request_style",
             "-o", "sigv4", "-o", "endpoint=us-east-1", "-o", "passwd_file=" + passwd,
             "-o", "retries=1", "-o", "connect_timeout=10", "-o", "readwrite_timeout=30",
             "-o", "dbglevel=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        self.addCleanup(self.unmount)
        deadline = time.monotonic() + 20
        while not self.mounted():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.fail("s3fs did not mount (exit %r)\n%s" % (self.proc.poll(), self.tail()))
            time.sleep(0.1)

    def mounted(self):
        with open("/proc/self/mounts") as f:
            return any(line.split()[1] == self.mnt for line in f if len(line.split()) > 1)

    def unmount(self):
        """Always leaves no mount and no s3fs behind, bounded in time."""
        fm = shutil.which("fusermount") or shutil.which("fusermount3")
        if fm and self.mounted():
            subprocess.run([fm, "-u", self.mnt], capture_output=True, timeout=15)
        if self.mounted():
            subprocess.run(["umount", "-l", self.mnt], capture_output=True, timeout=15)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)
        if self.mounted():
            subprocess.run(["umount", "-l", self.mnt], capture_output=True, timeout=15)
        try:
            os.rmdir(self.mnt)
        except OSError:
            pass  # still busy: the class's tmp dir removal gets it later

    def tail(self):
        try:
            with open(self.s3fs_log, "rb") as f:
                s3fs = f.read().decode("utf-8", "replace")[-3000:]
        except OSError:
            s3fs = ""
        return ("--- s3fs log (tail)\n%s\n--- larder access log (tail)\n%s"
                % (s3fs, "\n".join(self.larder.access_log().splitlines()[-15:])))

    def on_mount(self, *args, ok=True):
        """Runs a command on the mount in a child process (a stuck FUSE
        request blocks that child, not the suite). On a timeout s3fs is
        killed first: that aborts the FUSE connection, so the child's pending
        requests fail and it can be reaped."""
        p = subprocess.Popen(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, cwd=self.mnt)
        try:
            out, err = p.communicate(timeout=CMD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            p.kill()
            try:
                p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            self.fail("%s did not finish in %d s on the mount\n%s"
                      % (" ".join(args[:3]), CMD_TIMEOUT, self.tail()))
        r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        if ok and r.returncode != 0:
            self.fail("%s exited %d: %s\n%s" % (" ".join(args[:3]), r.returncode,
                                                r.stderr.decode("utf-8", "replace")[-2000:],
                                                self.tail()))
        return r

    def sums(self, paths):
        out = self.on_mount("sha256sum", "--", *paths).stdout.decode()
        got = {}
        for line in out.splitlines():
            digest, path = line.split(None, 1)
            got[path.lstrip("*")] = digest
        return got

    # -- tests
    def test_list_read_write_delete(self):
        # list a prefix
        names = self.on_mount("ls", "-1", "images").stdout.decode().split()
        self.assertEqual(sorted(names), sorted(self.images))

        # every image, byte for byte, and the 40 MiB shard
        got = self.sums(["images/" + n for n in sorted(self.images)])
        self.assertEqual(got, {"images/" + n: d for n, d in self.images.items()})
        self.assertEqual(self.sums(["shards/shard-000.tar"]),
                         {"shards/shard-000.tar": self.shard_sha})
        served = [r for r in self.larder.access_records()
                  if r.get("method") == "GET" and r.get("key") == "shards/shard-000.tar"]
        self.assertTrue(served, "the shard was not read through larder")

        # write a file through the mount: boto3 reads back the same bytes
        data = random.Random(5).randbytes(300 * 1024 + 17)
        src = os.path.join(self.tmp, "upload.bin")
        with open(src, "wb") as f:
            f.write(data)
        self.on_mount("mkdir", "-p", "out")
        self.on_mount("cp", src, "out/written.bin")
        self.on_mount("sync")
        obj = self.s3.get_object(Bucket=BUCKET, Key="out/written.bin")["Body"].read()
        self.assertEqual(sha(obj), sha(data))

        # delete a file through the mount: gone for boto3 and for ls
        self.on_mount("rm", "images/img-007.jpg")
        self.assertS3Error(lambda: self.s3.head_object(Bucket=BUCKET, Key="images/img-007.jpg"),
                           404, "404")
        self.images.pop("img-007.jpg")
        names = self.on_mount("ls", "-1", "images").stdout.decode().split()
        self.assertNotIn("img-007.jpg", names)


class S3fsMountListCache(S3fsMount):
    """The same, on a bucket with list_cache_ttl: repeated listings of a
    directory cost one upstream LIST, and the mount's own write and delete
    show in its next listing at once."""
    CONFIG_TEXT = "[bucket %s]\nlist_cache_ttl = 60\n" % BUCKET

    def test_repeated_listing_costs_one_upstream_list(self):
        self.on_mount("ls", "-1", "images")
        mark = self.upstream.mark()
        for _ in range(3):
            names = self.on_mount("ls", "-1", "images").stdout.decode().split()
            self.assertEqual(sorted(names), sorted(self.images))
        lists = [r["target"] for r in self.upstream.from_larder(mark)
                 if r["method"] == "GET" and r["target"].startswith("/%s?" % BUCKET)]
        self.assertEqual(lists, [])


if __name__ == "__main__":
    unittest.main()
