"""fsspec through larder (docs/clients.md, fsspec row).

Debian's fsspec (2022.11) has no S3 filesystem without s3fs-python, which
Debian does not package; what it has is the HTTP filesystem, and S3 objects
are HTTP files by presigned URL. clients/fsspec_http.py (under /usr/bin/python3)
presigns GET URLs with boto3 (SigV4) against larder and reads them with
fsspec: cat of one and of several, size/info/exists, ranged reads (cat_file
start/end, open + seek + read), simplecache:: and blockcache:: in front, and a
member of a tar shard by tar::. The test compares every result with what it
uploaded, then runs it all again and sees nothing fetched upstream.
"""
import hashlib
import io
import json
import os
import subprocess
import tarfile

from harness import LarderCase
from test_torch import CLIENTS, DEBIAN_PYTHON, client_env, gets_upstream, need_debian_modules

BUCKET = "fsspec-data"


def sha(data):
    return hashlib.sha256(data).hexdigest()


class FsspecHttp(LarderCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)
        cls.objects = {}
        for i in range(3):
            data = os.urandom(200 * 1024 + 999 * i)
            key = "data/part-%d.bin" % i
            cls.direct.put_object(Bucket=BUCKET, Key=key, Body=data)
            cls.objects[key] = data
        buf = io.BytesIO()
        cls.member = os.urandom(30000)
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in (("a.txt", b"first"), ("sample.bin", cls.member), ("z.cls", b"3")):
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
        cls.direct.put_object(Bucket=BUCKET, Key="shards/shard-000000.tar", Body=buf.getvalue())

    def run_client(self):
        args = [DEBIAN_PYTHON, os.path.join(CLIENTS, "fsspec_http.py"), "--bucket", BUCKET,
                "--tar-key", "shards/shard-000000.tar", "--tar-member", "sample.bin"]
        for k in sorted(self.objects):
            args += ["--key", k]
        r = subprocess.run(args, env=client_env(self.larder.url), capture_output=True,
                           timeout=120, stdin=subprocess.DEVNULL)
        if r.returncode:
            self.fail("fsspec_http.py exited %d\n%s\n--- larder access log (tail)\n%s"
                      % (r.returncode, r.stderr.decode(errors="replace")[-4000:],
                         "\n".join(self.larder.access_log().splitlines()[-10:])))
        return json.loads(r.stdout)

    def test_http_filesystem_over_presigned_urls(self):
        need_debian_modules("fsspec", "aiohttp", "boto3")
        first = sorted(self.objects)
        d = self.objects[first[0]]
        want = {
            "cat": sha(d),
            "cat_many": [sha(self.objects[k]) for k in first],
            "cat_many_urls": True,
            "size": len(d), "info_size": len(d), "open_size": len(d), "exists": True,
            "cat_range": sha(d[1000:5096]),
            "seek_read": sha(d[70000:80000]),
            "tail": sha(d[-100:]),
            "simplecache": sha(d),
            "blockcache_range": sha(d[50000:70000]),
            "tar_member": sha(self.member),
        }
        got = self.run_client()
        self.assertEqual({k: got.get(k) for k in want}, want)
        # The same again: larder answers all of it from its cache.
        mark = self.upstream.mark()
        again = self.run_client()
        self.assertEqual({k: again.get(k) for k in want}, want)
        self.assertEqual(gets_upstream(self.upstream, mark), [], "the second run fetched upstream")


if __name__ == "__main__":
    import unittest
    unittest.main()
