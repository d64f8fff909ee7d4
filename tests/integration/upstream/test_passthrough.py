"""S3 operations through larder with boto3 and the AWS CLI, as a user sees them.

Every request larder forwards is also checked, at class teardown, by the
independent SigV4 verifier in front of moto (harness.LarderCase): correctly
signed, canonically encoded path, body matching its hash. That covers the keys
moto's own check mishandles ('+', '%', sub-delimiters, non-ASCII): moto_upstream
hands moto the raw request-target, and the verifier checks the bytes larder
sent independently of botocore.
"""
import hashlib
import os
import socket
import subprocess
import tempfile
import time
import unittest

import harness
from harness import LarderCase

MiB = 1024 * 1024

SPECIAL_KEYS = [
    "with space.txt",
    "plus+sign",
    "percent%25literal%",
    "tilde~name",
    "double//slash",
    "trailing/",
    "données/日本語 ü.txt",
    "sub!$&'()*,:;=@delims",
    "q?mark#hash",
    "k" * 1024,
]


class Passthrough(LarderCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.bucket = "pass-boto"
        cls.s3.create_bucket(Bucket=cls.bucket)

    def test_create_bucket_reaches_upstream(self):
        self.s3.create_bucket(Bucket="pass-created")
        names = [b["Name"] for b in self.direct.list_buckets()["Buckets"]]
        self.assertIn("pass-created", names)
        names = [b["Name"] for b in self.s3.list_buckets()["Buckets"]]
        self.assertIn("pass-created", names)

    def test_put_get_head_small(self):
        body = b"small object\n" * 10
        put = self.s3.put_object(Bucket=self.bucket, Key="small.txt", Body=body,
                                 ContentType="text/plain", Metadata={"owner": "larder", "n": "42"})
        self.assertEqual(put["ETag"], '"%s"' % hashlib.md5(body).hexdigest())
        self.assertIn("x-amz-request-id", put["ResponseMetadata"]["HTTPHeaders"])
        got = self.s3.get_object(Bucket=self.bucket, Key="small.txt")
        self.assertEqual(got["Body"].read(), body)
        self.assertEqual(got["ETag"], put["ETag"])
        head = self.s3.head_object(Bucket=self.bucket, Key="small.txt")
        self.assertEqual(head["ContentLength"], len(body))
        self.assertEqual(head["ETag"], put["ETag"])
        self.assertEqual(head["ContentType"], "text/plain")
        self.assertEqual(head["Metadata"], {"owner": "larder", "n": "42"})
        self.assertIsNotNone(head["LastModified"])
        direct = self.direct.head_object(Bucket=self.bucket, Key="small.txt")
        self.assertEqual(head["LastModified"], direct["LastModified"])
        self.assertEqual(self.direct.get_object(Bucket=self.bucket, Key="small.txt")["Body"].read(),
                         body)

    def test_ranged_get(self):
        body = bytes(range(256)) * 40
        self.s3.put_object(Bucket=self.bucket, Key="ranged.bin", Body=body)
        r = self.s3.get_object(Bucket=self.bucket, Key="ranged.bin", Range="bytes=100-1099")
        self.assertEqual(r["ResponseMetadata"]["HTTPStatusCode"], 206)
        self.assertEqual(r["Body"].read(), body[100:1100])
        self.assertEqual(r["ContentRange"], "bytes 100-1099/%d" % len(body))
        r = self.s3.get_object(Bucket=self.bucket, Key="ranged.bin", Range="bytes=-10")
        self.assertEqual(r["Body"].read(), body[-10:])

    def test_missing_object_is_upstream_404(self):
        resp = self.assertS3Error(
            lambda: self.s3.get_object(Bucket=self.bucket, Key="no/such/key"), 404, "NoSuchKey")
        self.assertIn("x-amz-request-id", resp["ResponseMetadata"]["HTTPHeaders"])
        self.assertS3Error(lambda: self.s3.list_objects_v2(Bucket="no-such-bucket-x"), 404,
                           "NoSuchBucket")

    def test_multipart_upload_three_parts(self):
        key = "multi/part.bin"
        parts_data = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(1 * MiB + 7)]
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)
        parts = []
        for i, data in enumerate(parts_data, 1):
            r = self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=up["UploadId"],
                                    PartNumber=i, Body=data)
            parts.append({"PartNumber": i, "ETag": r["ETag"]})
        listed = self.s3.list_parts(Bucket=self.bucket, Key=key, UploadId=up["UploadId"])
        self.assertEqual([p["PartNumber"] for p in listed["Parts"]], [1, 2, 3])
        done = self.s3.complete_multipart_upload(Bucket=self.bucket, Key=key,
                                                 UploadId=up["UploadId"],
                                                 MultipartUpload={"Parts": parts})
        self.assertTrue(done["ETag"].endswith('-3"'), done["ETag"])
        whole = b"".join(parts_data)
        got = self.s3.get_object(Bucket=self.bucket, Key=key)
        self.assertEqual(got["ContentLength"], len(whole))
        self.assertEqual(hashlib.sha256(got["Body"].read()).digest(),
                         hashlib.sha256(whole).digest())

    def test_abort_multipart(self):
        up = self.s3.create_multipart_upload(Bucket=self.bucket, Key="aborted")
        self.s3.upload_part(Bucket=self.bucket, Key="aborted", UploadId=up["UploadId"],
                            PartNumber=1, Body=b"x" * 100)
        self.s3.abort_multipart_upload(Bucket=self.bucket, Key="aborted", UploadId=up["UploadId"])
        self.assertS3Error(lambda: self.s3.list_parts(Bucket=self.bucket, Key="aborted",
                                                      UploadId=up["UploadId"]), 404, "NoSuchUpload")

    def test_list_prefix_delimiter_pagination(self):
        b = "pass-list"
        self.s3.create_bucket(Bucket=b)
        keys = ["a/1", "a/2", "a/3", "a/sub/x", "a/sub/y", "b/1", "c", "d/e/f"]
        for k in keys:
            self.s3.put_object(Bucket=b, Key=k, Body=k.encode())
        r = self.s3.list_objects_v2(Bucket=b, Prefix="a/")
        self.assertEqual([o["Key"] for o in r["Contents"]], ["a/1", "a/2", "a/3", "a/sub/x", "a/sub/y"])
        r = self.s3.list_objects_v2(Bucket=b, Delimiter="/")
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["a/", "b/", "d/"])
        self.assertEqual([o["Key"] for o in r["Contents"]], ["c"])
        r = self.s3.list_objects_v2(Bucket=b, Prefix="a/", Delimiter="/")
        self.assertEqual([p["Prefix"] for p in r["CommonPrefixes"]], ["a/sub/"])
        seen, token, pages = [], None, 0
        while True:
            kw = {"Bucket": b, "MaxKeys": 3}
            if token:
                kw["ContinuationToken"] = token
            r = self.s3.list_objects_v2(**kw)
            pages += 1
            seen += [o["Key"] for o in r.get("Contents", [])]
            self.assertLessEqual(r["KeyCount"], 3)
            if not r["IsTruncated"]:
                break
            token = r["NextContinuationToken"]
        self.assertEqual(seen, sorted(keys))
        self.assertEqual(pages, 3)
        # The paginator and list_objects (v1) agree
        v1 = self.s3.list_objects(Bucket=b, Prefix="d/")
        self.assertEqual([o["Key"] for o in v1["Contents"]], ["d/e/f"])

    def test_copy_and_delete(self):
        self.s3.put_object(Bucket=self.bucket, Key="src", Body=b"copy me",
                           Metadata={"m": "1"})
        r = self.s3.copy_object(Bucket=self.bucket, Key="dst", CopySource={"Bucket": self.bucket,
                                                                           "Key": "src"})
        self.assertIn("ETag", r["CopyObjectResult"])
        self.assertEqual(self.s3.get_object(Bucket=self.bucket, Key="dst")["Body"].read(), b"copy me")
        self.assertEqual(self.s3.head_object(Bucket=self.bucket, Key="dst")["Metadata"], {"m": "1"})
        self.s3.delete_object(Bucket=self.bucket, Key="dst")
        self.assertS3Error(lambda: self.s3.get_object(Bucket=self.bucket, Key="dst"), 404, "NoSuchKey")
        for k in ("del/1", "del/2", "del/3"):
            self.s3.put_object(Bucket=self.bucket, Key=k, Body=b"x")
        r = self.s3.delete_objects(Bucket=self.bucket, Delete={
            "Objects": [{"Key": "del/1"}, {"Key": "del/2"}, {"Key": "del/3"}]})
        self.assertEqual(sorted(d["Key"] for d in r["Deleted"]), ["del/1", "del/2", "del/3"])
        left = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="del/")
        self.assertEqual(left["KeyCount"], 0)

    def test_special_keys_round_trip(self):
        b = "pass-keys"
        self.s3.create_bucket(Bucket=b)
        m = self.upstream.mark()
        for key in SPECIAL_KEYS:
            with self.subTest(key=key[:60]):
                body = ("body of " + key).encode("utf-8")
                self.s3.put_object(Bucket=b, Key=key, Body=body)
                self.assertEqual(self.s3.get_object(Bucket=b, Key=key)["Body"].read(), body)
                self.assertEqual(self.s3.head_object(Bucket=b, Key=key)["ContentLength"], len(body))
                # stored upstream under exactly this key
                self.assertEqual(self.direct.get_object(Bucket=b, Key=key)["Body"].read(), body)
        listed = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=b):
            listed += [o["Key"] for o in page.get("Contents", [])]
        self.assertEqual(sorted(listed), sorted(SPECIAL_KEYS))
        # list with a prefix containing non-ASCII and a space
        r = self.s3.list_objects_v2(Bucket=b, Prefix="données/日本語 ")
        self.assertEqual([o["Key"] for o in r["Contents"]], ["données/日本語 ü.txt"])
        for key in SPECIAL_KEYS:
            with self.subTest(delete=key[:60]):
                self.s3.delete_object(Bucket=b, Key=key)
        self.assertEqual(self.s3.list_objects_v2(Bucket=b)["KeyCount"], 0)
        self.upstream.assert_signed_correctly(self, m)

    def test_presigned_get_with_curl(self):
        body = b"presigned body \x00\xff"
        self.s3.put_object(Bucket=self.bucket, Key="presigned/obj ü+.bin", Body=body)
        url = self.s3.generate_presigned_url("get_object", Params={
            "Bucket": self.bucket, "Key": "presigned/obj ü+.bin"}, ExpiresIn=300)
        self.assertIn("X-Amz-Signature=", url)
        r = subprocess.run(["curl", "-sS", "-g", "-o", "-", "-w", "\n%{http_code}", url],
                           capture_output=True, timeout=60)
        out, _, code = r.stdout.rpartition(b"\n")
        self.assertEqual(code, b"200", r.stdout[-500:] + r.stderr)
        self.assertEqual(out, body)

    def ended(self, key, before, within):
        """(status, error) of the access records of key's requests after the first `before`,
        once there is one or `within` seconds have passed."""
        deadline, recs = time.monotonic() + within, []
        while time.monotonic() < deadline and not recs:
            recs = [a for a in self.larder.access_records()[before:] if a.get("key") == key]
            time.sleep(0.05)
        return [(a["status"], a["error"]) for a in recs]

    def test_put_whose_client_left_mid_body_ends_at_once(self):
        # Headers and half of a 200 KB body, then the client closes at once: the bytes and its
        # FIN arrive while the request waits for room for its body (suspended), and
        # libmicrohttpd, which reads what is left after the resume, took the socket for drained
        # and never saw the FIN. The request then held its connection, its upstream slot and
        # the PUT to S3 until the client timeout (60 s); a SIGTERM's drain waited for it.
        # Found by tests/soak/soak.py.
        body = os.urandom(200000)
        for i in range(3):
            key = "left-mid-body-%d" % i
            before = len(self.larder.access_records())
            s = harness.signed_socket(self.larder, "PUT", harness.key_path(self.bucket, key),
                                      body=body, sent=100000)
            s.close()
            self.assertEqual(self.ended(key, before, 10), [("0", "client-abort")],
                             "a PUT whose client left mid-body still ran after 10 s")
        listed = self.direct.list_objects_v2(Bucket=self.bucket, Prefix="left-mid-body-")
        self.assertEqual(listed.get("KeyCount"), 0, listed)  # S3 stored none of them

    def test_chunked_put_whose_client_left_mid_body_ends_soon(self):
        # As above, the body sent with Transfer-Encoding: chunked (no length): the peek after
        # each delivery cannot tell a client gone from one that half-closed after its last
        # chunk, whose end libmicrohttpd may hold unparsed then. The request waited for the
        # client timeout (60 s), holding its slot and its PUT to S3, and SIGTERM's drain
        # waited for it; the once-a-second sweep now ends it.
        body = os.urandom(200000)
        for i in range(2):
            key = "left-mid-chunked-%d" % i
            path = harness.key_path(self.bucket, key)
            h = harness.sign_headers("PUT", self.larder.url + path, harness.CLIENT_KEY,
                                     harness.CLIENT_SECRET, payload="UNSIGNED-PAYLOAD",
                                     headers={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})
            h["Transfer-Encoding"] = "chunked"
            head = "PUT %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (path, self.larder.port)
            head += "".join("%s: %s\r\n" % kv for kv in h.items() if kv[0].lower() != "host")
            chunks = b"".join(b"%x\r\n%s\r\n" % (10000, body[j:j + 10000])
                              for j in range(0, 100000, 10000))
            before = len(self.larder.access_records())
            s = socket.create_connection(("127.0.0.1", self.larder.port), timeout=10)
            s.sendall(head.encode() + b"\r\n" + chunks)
            s.close()
            self.assertEqual(self.ended(key, before, 5), [("0", "client-abort")],
                             "a chunked PUT whose client left mid-body still ran after 5 s")
        listed = self.direct.list_objects_v2(Bucket=self.bucket, Prefix="left-mid-chunked-")
        self.assertEqual(listed.get("KeyCount"), 0, listed)

    def test_request_ids_unique(self):
        ids = set()
        for _ in range(5):
            r = self.s3.list_objects_v2(Bucket=self.bucket, MaxKeys=1)
            ids.add(r["ResponseMetadata"]["HTTPHeaders"].get("x-amz-request-id"))
        self.assertNotIn(None, ids)
        self.assertEqual(len(ids), 5)
        for i in ids:  # the worker, its counter, a mix: 16 upper-case hex digits
            self.assertRegex(i, r"^[0-9A-F]{16}$")


class AwsCli(LarderCase):
    def run_aws(self, *args, ok=True):
        r = self.larder.aws(*args)
        if ok:
            self.assertEqual(r.returncode, 0, "aws %s\nstdout: %s\nstderr: %s"
                             % (" ".join(args), r.stdout[-2000:], r.stderr[-2000:]))
        return r

    def test_cli_workflow(self):
        tmp = tempfile.mkdtemp(prefix="larder-cli-")
        self.run_aws("s3", "mb", "s3://cli-bucket")
        src = os.path.join(tmp, "up.bin")
        data = os.urandom(3 * MiB + 5)
        with open(src, "wb") as f:
            f.write(data)
        self.run_aws("s3", "cp", src, "s3://cli-bucket/dir/up.bin")
        # multipart through the CLI: 20 MiB with 5 MiB chunks -> 4 parts
        big = os.path.join(tmp, "big.bin")
        with open(big, "wb") as f:
            f.write(os.urandom(20 * MiB))
        self.larder_cli_config_multipart()
        self.run_aws("s3", "cp", big, "s3://cli-bucket/dir/big.bin")
        head = self.direct.head_object(Bucket="cli-bucket", Key="dir/big.bin")
        self.assertRegex(head["ETag"], r'-\d+"$', "the CLI should have used multipart")
        ls = self.run_aws("s3", "ls", "s3://cli-bucket/dir/").stdout.decode()
        self.assertIn("up.bin", ls)
        self.assertIn("big.bin", ls)
        self.assertIn(str(len(data)), ls)
        buckets = self.run_aws("s3", "ls").stdout.decode()
        self.assertIn("cli-bucket", buckets)
        down = os.path.join(tmp, "down.bin")
        self.run_aws("s3", "cp", "s3://cli-bucket/dir/up.bin", down)
        with open(down, "rb") as f:
            self.assertEqual(f.read(), data)
        down_big = os.path.join(tmp, "down-big.bin")
        self.run_aws("s3", "cp", "s3://cli-bucket/dir/big.bin", down_big)
        with open(big, "rb") as a, open(down_big, "rb") as b:
            self.assertEqual(hashlib.sha256(a.read()).digest(), hashlib.sha256(b.read()).digest())
        # sync a tree with awkward names both ways
        tree = os.path.join(tmp, "tree")
        os.makedirs(os.path.join(tree, "sub dir", "ü"))
        files = {"a.txt": b"a", "sub dir/b+c.txt": b"bc", "sub dir/ü/日本.txt": b"jp"}
        for rel, content in files.items():
            with open(os.path.join(tree, rel), "wb") as f:
                f.write(content)
        self.run_aws("s3", "sync", tree, "s3://cli-bucket/tree")
        keys = sorted(o["Key"] for o in self.direct.list_objects_v2(
            Bucket="cli-bucket", Prefix="tree/")["Contents"])
        self.assertEqual(keys, sorted("tree/" + k for k in files))
        back = os.path.join(tmp, "back")
        self.run_aws("s3", "sync", "s3://cli-bucket/tree", back)
        for rel, content in files.items():
            with open(os.path.join(back, rel), "rb") as f:
                self.assertEqual(f.read(), content)
        self.run_aws("s3", "rm", "s3://cli-bucket/dir/up.bin")
        self.assertEqual(self.direct.list_objects_v2(Bucket="cli-bucket", Prefix="dir/up")["KeyCount"], 0)
        api = self.run_aws("s3api", "head-object", "--bucket", "cli-bucket", "--key", "dir/big.bin")
        self.assertIn(b'"ContentLength": 20971520', api.stdout)

    def larder_cli_config_multipart(self):
        # 5 MiB threshold and chunk size so the CLI splits big.bin into parts
        cfg = os.path.join(harness._aws_home or "", "config")
        if not harness._aws_home:
            self.larder.aws("--version")
            cfg = os.path.join(harness._aws_home, "config")
        with open(cfg) as f:
            text = f.read()
        if "multipart_threshold" not in text:
            text = text.replace("s3 =\n", "s3 =\n    multipart_threshold = 5MB\n"
                                "    multipart_chunksize = 5MB\n")
            with open(cfg, "w") as f:
                f.write(text)

    def test_cli_wrong_secret_fails(self):
        r = self.larder.aws("s3", "ls", secret="wrong-secret")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"SignatureDoesNotMatch", r.stderr)


if __name__ == "__main__":
    unittest.main()
