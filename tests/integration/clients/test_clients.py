"""Real S3 clients through larder, each used as its users use it (docs/clients.md).

Clients: the AWS SDK for JavaScript v3 (node/s3_ops.mjs; once with the SDK's
default checksums, which send aws-chunked bodies with a trailing CRC32, and once
with them off), s3cmd, rclone, and a short smoke of the AWS CLI and boto3 (both
covered in depth by test_passthrough.py). For each: put, get (bytes equal),
ranged get, list, delete, judged by what the user sees -- exit code, output,
file contents -- and, upstream, by what arrived there. The class teardown fails
when any request larder sent upstream was not signed byte-correctly.

scripts/deps.sh installs the tools (s3cmd, rclone, node and the SDK under
node/node_modules); a missing one fails the test, it does not skip it.
"""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import harness
from harness import CLIENT_KEY, CLIENT_SECRET, REGION, LarderCase

MiB = 1024 * 1024
NODE_DIR = os.path.join(harness.HERE, "clients", "node")


def sha(data):
    return hashlib.sha256(data).hexdigest()


def tool_env(**extra):
    """The caller's environment without its AWS/rclone/s3cmd settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "RCLONE_", "S3CMD_", "LARDER_"))}
    env.update(extra)
    return env


class Clients(LarderCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="larder-clients-")
        cls.host = cls.larder.url.replace("http://", "")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    # -- helpers
    def need(self, exe):
        path = shutil.which(exe)
        if not path:
            self.fail("%s is not installed: run scripts/deps.sh" % exe)
        return path

    def run_tool(self, args, env=None, cwd=None, timeout=300, ok=True):
        """Runs a client command; with ok, fails the test unless it exited 0,
        showing its output and the tail of larder's logs."""
        r = subprocess.run(args, env=env or tool_env(), cwd=cwd, capture_output=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        if ok and r.returncode != 0:
            self.fail("%s exited %d\n--- stdout\n%s\n--- stderr\n%s\n%s"
                      % (" ".join(args[:4]), r.returncode,
                         r.stdout.decode("utf-8", "replace")[-4000:],
                         r.stderr.decode("utf-8", "replace")[-4000:], self.larder_tail()))
        return r

    def larder_tail(self):
        return ("--- larder access log (tail)\n%s\n--- larder log (tail)\n%s"
                % ("\n".join(self.larder.access_log().splitlines()[-15:]),
                   "\n".join(self.larder.log().splitlines()[-15:])))

    def file(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def new_bucket(self, name):
        self.s3.create_bucket(Bucket=name)
        return name

    def upstream_bytes(self, bucket, key):
        return self.direct.get_object(Bucket=bucket, Key=key)["Body"].read()

    def assertGone(self, bucket, key):
        listed = self.direct.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
        self.assertNotIn(key, [o["Key"] for o in listed], "still upstream after delete")
        self.assertS3Error(lambda: self.s3.head_object(Bucket=bucket, Key=key), 404, "404")

    def assertUpstreamSaw(self, since, *methods):
        seen = {r["method"] for r in self.upstream.from_larder(since)}
        for m in methods:
            self.assertIn(m, seen, "upstream saw no %s from larder (saw %s)" % (m, sorted(seen)))
        self.upstream.assert_signed_correctly(self, since)

    # -- AWS SDK for JavaScript v3
    def run_js(self, bucket, checksum):
        node = self.need("node")
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@aws-sdk", "client-s3")):
            self.fail("@aws-sdk/client-s3 is not installed in tests/integration/clients/node: "
                      "run scripts/deps.sh")
        prefix = "js-%s/" % checksum
        env = tool_env(S3_ENDPOINT=self.larder.url, S3_BUCKET=bucket, S3_PREFIX=prefix,
                       S3_CHECKSUM=checksum, AWS_ACCESS_KEY_ID=CLIENT_KEY,
                       AWS_SECRET_ACCESS_KEY=CLIENT_SECRET, NODE_NO_WARNINGS="1", HOME=self.tmp)
        r = self.run_tool([node, "s3_ops.mjs"], env=env, cwd=NODE_DIR, ok=False)
        out = r.stdout.decode("utf-8", "replace").strip().splitlines()
        try:
            result = json.loads(out[-1])
        except (IndexError, ValueError):
            result = None
        if r.returncode != 0 or not result or not result.get("ok"):
            self.fail("s3_ops.mjs (checksum %s) exited %d\n--- stdout\n%s\n--- stderr\n%s\n%s"
                      % (checksum, r.returncode, "\n".join(out)[-4000:],
                         r.stderr.decode("utf-8", "replace")[-4000:], self.larder_tail()))
        self.assertEqual(set(result["ops"]), {"put_small", "put_big", "put_stream", "get_small",
                                              "get_big", "get_range", "head", "multipart",
                                              "list", "delete"})
        self.assertTrue(result["lib_storage"], "multipart ran without @aws-sdk/lib-storage")
        # What reached the upstream bucket: the objects the script left behind.
        listed = {o["Key"]: o for o in
                  self.direct.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}
        self.assertEqual(sorted(listed), [prefix + k for k in ("big.bin", "multipart.bin",
                                                               "stream.bin")])
        self.assertEqual(listed[prefix + "big.bin"]["Size"], 6 * MiB + 123)
        self.assertEqual(listed[prefix + "stream.bin"]["Size"], 300 * 1024 + 5)
        self.assertEqual(listed[prefix + "multipart.bin"]["Size"], 12 * MiB + 77)
        self.assertTrue(listed[prefix + "multipart.bin"]["ETag"].endswith('-3"'))
        return result

    def test_js_sdk_v3_default_checksums(self):
        """The SDK's defaults (requestChecksumCalculation WHEN_SUPPORTED): a stream body
        goes as STREAMING-UNSIGNED-PAYLOAD-TRAILER with x-amz-checksum-crc32."""
        bucket = self.new_bucket("clients-js")
        since = self.upstream.mark()
        result = self.run_js(bucket, "when_supported")
        trailer = [m for m in result["wire"]
                   if m.startswith("PUT STREAMING-UNSIGNED-PAYLOAD-TRAILER")]
        self.assertTrue(trailer, "the SDK sent no aws-chunked upload with a trailer: %s"
                        % result["wire"])
        header = [m for m in result["wire"] if m.startswith("PUT signed header=x-amz-checksum-")]
        self.assertTrue(header, "the SDK sent no signed upload with a checksum header: %s"
                        % result["wire"])
        self.assertUpstreamSaw(since, "PUT", "POST", "GET", "DELETE")

    def test_js_sdk_v3_checksums_off(self):
        """requestChecksumCalculation/responseChecksumValidation WHEN_REQUIRED."""
        bucket = self.new_bucket("clients-js-nock")
        since = self.upstream.mark()
        result = self.run_js(bucket, "when_required")
        self.assertFalse([m for m in result["wire"] if "STREAMING" in m], result["wire"])
        self.assertUpstreamSaw(since, "PUT", "POST", "GET", "DELETE")

    # -- s3cmd
    def s3cmd(self, *args, ok=True):
        exe = self.need("s3cmd")
        cfg = os.path.join(self.tmp, "s3cmd.cfg")
        if not os.path.exists(cfg):
            with open(cfg, "w") as f:
                f.write("[default]\n"
                        "access_key = %s\nsecret_key = %s\n"
                        "host_base = %s\nhost_bucket = %s\n"
                        "bucket_location = %s\nuse_https = False\nsignature_v2 = False\n"
                        % (CLIENT_KEY, CLIENT_SECRET, self.host, self.host, REGION))
        return self.run_tool([exe, "-c", cfg, "--no-progress"] + list(args),
                             env=tool_env(HOME=self.tmp), ok=ok)

    def test_s3cmd(self):
        bucket = "clients-s3cmd"
        since = self.upstream.mark()
        r = self.s3cmd("mb", "s3://" + bucket)
        self.assertIn(b"created", r.stdout)
        small = b"s3cmd through larder\n" * 50
        big = os.urandom(6 * MiB + 11)
        src_small, src_big = self.file("s3cmd-small", small), self.file("s3cmd-big", big)
        self.s3cmd("put", src_small, "s3://%s/dir/small.txt" % bucket)
        # 6 MiB in 5 MiB parts: a multipart upload
        r = self.s3cmd("put", "--multipart-chunk-size-mb=5", src_big, "s3://%s/dir/big.bin" % bucket)
        self.assertIn(b"-> 's3://%s/dir/big.bin'" % bucket.encode(), r.stdout)
        self.assertEqual(self.upstream_bytes(bucket, "dir/small.txt"), small)
        self.assertEqual(sha(self.upstream_bytes(bucket, "dir/big.bin")), sha(big))
        self.assertTrue(self.direct.head_object(Bucket=bucket, Key="dir/big.bin")["ETag"]
                        .endswith('-2"'), "s3cmd did not upload dir/big.bin in parts")

        out = os.path.join(self.tmp, "s3cmd-got")
        self.s3cmd("get", "--force", "s3://%s/dir/big.bin" % bucket, out)
        self.assertEqual(sha(self.read(out)), sha(big))
        self.s3cmd("get", "--force", "s3://%s/dir/small.txt" % bucket, out)
        self.assertEqual(self.read(out), small)
        # Ranged get: --continue resumes a partial file with Range: bytes=N-
        with open(out, "wb") as f:
            f.write(big[:1000003])
        self.s3cmd("get", "--continue", "s3://%s/dir/big.bin" % bucket, out)
        self.assertEqual(sha(self.read(out)), sha(big))
        self.assertIn("GET", [r["method"] for r in self.larder.access_records()
                              if r.get("key") == "dir/big.bin" and r.get("status") == "206"])

        r = self.s3cmd("ls", "s3://%s/dir/" % bucket)
        lines = r.stdout.decode().splitlines()
        self.assertEqual(len(lines), 2, lines)
        self.assertTrue(lines[0].split()[-2:] == [str(len(big)), "s3://%s/dir/big.bin" % bucket],
                        lines)
        self.assertTrue(lines[1].split()[-2:] == [str(len(small)),
                                                  "s3://%s/dir/small.txt" % bucket], lines)

        r = self.s3cmd("del", "s3://%s/dir/small.txt" % bucket)
        self.assertIn(b"delete: 's3://%s/dir/small.txt'" % bucket.encode(), r.stdout)
        self.assertGone(bucket, "dir/small.txt")
        r = self.s3cmd("get", "--force", "s3://%s/dir/small.txt" % bucket, out, ok=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"does not exist", r.stderr)
        self.assertUpstreamSaw(since, "PUT", "POST", "GET", "DELETE")

    # -- rclone
    def rclone(self, *args, ok=True):
        exe = self.need("rclone")
        cfg = os.path.join(self.tmp, "rclone.conf")
        if not os.path.exists(cfg):
            with open(cfg, "w") as f:
                f.write("[larder]\ntype = s3\nprovider = Other\nendpoint = %s\n"
                        "access_key_id = %s\nsecret_access_key = %s\nregion = %s\n"
                        "force_path_style = true\n"
                        % (self.larder.url, CLIENT_KEY, CLIENT_SECRET, REGION))
        return self.run_tool([exe, "--config", cfg, "--retries", "1", "--low-level-retries", "1"]
                             + list(args), env=tool_env(HOME=self.tmp), ok=ok)

    def test_rclone(self):
        bucket = "clients-rclone"
        since = self.upstream.mark()
        self.rclone("mkdir", "larder:" + bucket)
        # Versioning on: after a multipart upload rclone HEADs the object with the
        # x-amz-version-id that CompleteMultipartUpload returned. moto returns "null"
        # for an unversioned bucket (S3 sends no such header) and then answers
        # HEAD ?versionId=null with 400, larder or not.
        self.s3.put_bucket_versioning(Bucket=bucket,
                                      VersioningConfiguration={"Status": "Enabled"})
        small = b"rclone through larder\n" * 40
        big = os.urandom(6 * MiB + 5)
        self.rclone("copyto", self.file("rclone-small", small), "larder:%s/d/small.txt" % bucket)
        # above --s3-upload-cutoff: a multipart upload in 5 MiB chunks
        self.rclone("copyto", "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M",
                    self.file("rclone-big", big), "larder:%s/d/big.bin" % bucket)
        self.assertEqual(self.upstream_bytes(bucket, "d/small.txt"), small)
        self.assertEqual(sha(self.upstream_bytes(bucket, "d/big.bin")), sha(big))
        self.assertTrue(self.direct.head_object(Bucket=bucket, Key="d/big.bin")["ETag"]
                        .endswith('-2"'), "rclone did not upload d/big.bin in parts")

        out = os.path.join(self.tmp, "rclone-got")
        self.rclone("copyto", "larder:%s/d/big.bin" % bucket, out)
        self.assertEqual(sha(self.read(out)), sha(big))
        r = self.rclone("cat", "larder:%s/d/small.txt" % bucket)
        self.assertEqual(r.stdout, small)
        r = self.rclone("cat", "--offset", "1234567", "--count", "100000",
                        "larder:%s/d/big.bin" % bucket)
        self.assertEqual(r.stdout, big[1234567:1234567 + 100000])
        self.assertIn("GET", [r["method"] for r in self.larder.access_records()
                              if r.get("key") == "d/big.bin" and r.get("status") == "206"])

        r = self.rclone("ls", "larder:%s/d" % bucket)
        listed = sorted(tuple(line.split()) for line in r.stdout.decode().splitlines())
        self.assertEqual(listed, [(str(len(big)), "big.bin"), (str(len(small)), "small.txt")])

        self.rclone("deletefile", "larder:%s/d/small.txt" % bucket)
        self.assertGone(bucket, "d/small.txt")
        r = self.rclone("lsf", "larder:%s/d" % bucket)
        self.assertEqual(r.stdout.decode().split(), ["big.bin"])
        self.assertUpstreamSaw(since, "PUT", "POST", "GET", "DELETE")

    # -- AWS CLI and boto3 (smoke; test_passthrough.py has the rest)
    def test_aws_cli_smoke(self):
        bucket = self.new_bucket("clients-awscli")
        since = self.upstream.mark()
        data = os.urandom(3 * MiB + 17)
        r = self.larder.aws("s3", "cp", self.file("cli-up", data), "s3://%s/c/obj.bin" % bucket)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sha(self.upstream_bytes(bucket, "c/obj.bin")), sha(data))
        out = os.path.join(self.tmp, "cli-down")
        r = self.larder.aws("s3", "cp", "s3://%s/c/obj.bin" % bucket, out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sha(self.read(out)), sha(data))
        r = self.larder.aws("s3api", "get-object", "--bucket", bucket, "--key", "c/obj.bin",
                            "--range", "bytes=1000-2999", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["ContentRange"], "bytes 1000-2999/%d" % len(data))
        self.assertEqual(self.read(out), data[1000:3000])
        r = self.larder.aws("s3", "ls", "s3://%s/c/" % bucket)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.decode().split()[-2:], [str(len(data)), "obj.bin"])
        r = self.larder.aws("s3", "rm", "s3://%s/c/obj.bin" % bucket)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGone(bucket, "c/obj.bin")
        self.assertUpstreamSaw(since, "PUT", "GET", "DELETE")

    def test_boto3_smoke(self):
        bucket = self.new_bucket("clients-boto3")
        since = self.upstream.mark()
        data = os.urandom(100000)
        self.s3.put_object(Bucket=bucket, Key="b/obj", Body=data)
        self.assertEqual(self.s3.get_object(Bucket=bucket, Key="b/obj")["Body"].read(), data)
        r = self.s3.get_object(Bucket=bucket, Key="b/obj", Range="bytes=10-19")
        self.assertEqual(r["Body"].read(), data[10:20])
        keys = [o["Key"] for o in self.s3.list_objects_v2(Bucket=bucket, Prefix="b/")["Contents"]]
        self.assertEqual(keys, ["b/obj"])
        self.s3.delete_object(Bucket=bucket, Key="b/obj")
        self.assertGone(bucket, "b/obj")
        self.assertUpstreamSaw(since, "PUT", "GET", "DELETE")
