"""LIST answers cached for an opt-in TTL per bucket (or prefix).

Mountpoint-style lookups (a HEAD of the path, then ListObjectsV2 with
prefix=path/, delimiter=/ and max-keys=1) repeated cost one upstream LIST
when the bucket has list_cache_ttl; a write or delete through larder drops
the cached answers it could change; without the setting nothing is cached;
the key's policy is checked before the cache is consulted.
"""
import re
import time
import urllib.request
import xml.etree.ElementTree as ET

import harness
from harness import LarderCase, free_port, make_s3_client
from test_cluster import ClusterBase

READER = "AKLISTREADER0000001"
READER_SECRET = "list-reader-secret-000000000000000000001"
ADMIN_TOKEN = "list-cache-admin-token-0123456789"
ADMIN_PORT = free_port()


class ListCache(LarderCase):
    LARDER_ENV = {"LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % ADMIN_PORT,
                  "LARDER_ADMIN_TOKEN": ADMIN_TOKEN}
    CONFIG_TEXT = """
[bucket lc-on]
list_cache_ttl = 60

[bucket lc-pfx]
list_cache_ttl = 60
list_cache_prefixes = cached/, more/

[bucket lc-short]
list_cache_ttl = 1

[key %s]
secret = %s
access = read-only
buckets = lc-on/allowed/
""" % (READER, READER_SECRET)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for b in ("lc-on", "lc-off", "lc-pfx", "lc-short"):
            cls.s3.create_bucket(Bucket=b)

    def upstream_lists(self, since, bucket):
        return [r for r in self.upstream.from_larder(since)
                if r["method"] == "GET" and r["target"].split("?")[0] in ("/" + bucket,
                                                                          "/" + bucket + "/")]

    def lookup(self, bucket, path, s3=None):
        """What Mountpoint does for one path: HEAD, then a one-key LIST."""
        s3 = s3 or self.s3
        try:
            s3.head_object(Bucket=bucket, Key=path)
        except s3.exceptions.ClientError:
            pass
        r = s3.list_objects_v2(Bucket=bucket, Prefix=path + "/", Delimiter="/", MaxKeys=1)
        return ([o["Key"] for o in r.get("Contents", [])],
                [p["Prefix"] for p in r.get("CommonPrefixes", [])])

    def test_lookups_cost_one_upstream_list(self):
        self.s3.put_object(Bucket="lc-on", Key="dir/a.jpg", Body=b"a")
        mark = self.upstream.mark()
        answers = [self.lookup("lc-on", "dir") for _ in range(10)]
        self.assertEqual(answers, [(["dir/a.jpg"], [])] * 10)
        self.assertEqual(len(self.upstream_lists(mark, "lc-on")), 1)
        hits = [r for r in self.larder.access_records()
                if r.get("method") == "GET" and r.get("bucket") == "lc-on"
                and r.get("cache") == "hit"]
        self.assertGreaterEqual(len(hits), 9)

    def metric(self, name, labels):
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % ADMIN_PORT,
                                     headers={"Authorization": "Bearer " + ADMIN_TOKEN})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        m = re.search(r"^%s\{%s\} (\d+)$" % (re.escape(name), re.escape(labels)), text, re.M)
        return int(m.group(1)) if m else 0

    def test_list_hits_are_not_object_cache_hits(self):
        """larder_cache_requests_total is the object cache's hit ratio: LIST
        answers from the LIST cache stay out of it."""
        lists = ("larder_requests_total", 'op="ListObjectsV2",status="200"')
        hits = ("larder_cache_requests_total", 'result="hit"')
        before_lists, before_hits = self.metric(*lists), self.metric(*hits)
        for _ in range(5):
            self.s3.list_objects_v2(Bucket="lc-on", Prefix="m/", MaxKeys=1)
        deadline = time.monotonic() + 5  # counted once libmicrohttpd calls it complete
        while self.metric(*lists) < before_lists + 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.metric(*lists), before_lists + 5)
        self.assertEqual(self.metric(*hits), before_hits)

    def test_put_through_larder_drops_cached_list(self):
        self.assertEqual(self.lookup("lc-on", "w"), ([], []))
        mark = self.upstream.mark()
        self.assertEqual(self.lookup("lc-on", "w"), ([], []))
        self.assertEqual(len(self.upstream_lists(mark, "lc-on")), 0)
        self.s3.put_object(Bucket="lc-on", Key="w/new.bin", Body=b"new")
        self.assertEqual(self.lookup("lc-on", "w"), (["w/new.bin"], []))
        self.assertEqual(len(self.upstream_lists(mark, "lc-on")), 1)

    def test_delete_through_larder_drops_cached_list(self):
        self.s3.put_object(Bucket="lc-on", Key="d/x/old.bin", Body=b"old")
        self.assertEqual(self.lookup("lc-on", "d"), ([], ["d/x/"]))
        self.s3.delete_object(Bucket="lc-on", Key="d/x/old.bin")
        self.assertEqual(self.lookup("lc-on", "d"), ([], []))

    def raw_list(self, raw_query, signed_query):
        """(keys, x-larder-cache) of GET /lc-on?raw_query, signed as S3
        canonicalises it (signed_query)."""
        h = harness.sign_headers("GET", self.larder.url + "/lc-on?" + signed_query,
                                 harness.CLIENT_KEY, harness.CLIENT_SECRET)
        st, hdrs, body = harness.http_request(self.larder.url, "GET", "/lc-on?" + raw_query, h)
        self.assertEqual(st, 200, body[:500])
        ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
        keys = [k.text for k in ET.fromstring(body).findall("s3:Contents/s3:Key", ns)]
        return keys, hdrs.get("x-larder-cache")

    def test_write_under_a_spaced_prefix_drops_a_plus_listing(self):
        # A raw '+' in the query is a space to upstream: "prefix=c+d%2F"
        # lists "c d/", so a write of "c d/b" must drop that listing.
        self.s3.put_object(Bucket="lc-on", Key="c d/a", Body=b"a")
        raw, signed = "list-type=2&prefix=c+d%2F", "list-type=2&prefix=c%2Bd%2F"
        self.assertEqual(self.raw_list(raw, signed)[0], ["c d/a"])
        self.assertEqual(self.raw_list(raw, signed), (["c d/a"], "hit"))
        self.s3.put_object(Bucket="lc-on", Key="c d/b", Body=b"b")
        self.assertEqual(self.raw_list(raw, signed)[0], ["c d/a", "c d/b"])

    def test_write_elsewhere_keeps_cached_list(self):
        self.s3.put_object(Bucket="lc-on", Key="keep/a", Body=b"a")
        self.lookup("lc-on", "keep")
        mark = self.upstream.mark()
        self.s3.put_object(Bucket="lc-on", Key="other/b", Body=b"b")
        self.assertEqual(self.lookup("lc-on", "keep"), (["keep/a"], []))
        self.assertEqual(len(self.upstream_lists(mark, "lc-on")), 0)

    def test_multipart_parts_keep_cached_list_and_object(self):
        # A multipart upload's start and parts change no object and no
        # listing; each dropped the key's metadata and every listing over
        # it (a checkpoint written through a mount in 8 MiB parts emptied
        # the bucket's list cache once a part). Its completion drops them.
        self.s3.put_object(Bucket="lc-on", Key="ckpt/model.bin", Body=b"old model")
        self.assertEqual(self.lookup("lc-on", "ckpt"), (["ckpt/model.bin"], []))
        self.assertEqual(self.s3.get_object(Bucket="lc-on", Key="ckpt/model.bin")["Body"].read(),
                         b"old model")
        mark = self.upstream.mark()
        up = self.s3.create_multipart_upload(Bucket="lc-on", Key="ckpt/model.bin")["UploadId"]
        parts = []
        for n in (1, 2):
            body = (b"%d" % n) * (5 * 1024 * 1024 if n == 1 else 10)
            e = self.s3.upload_part(Bucket="lc-on", Key="ckpt/model.bin", UploadId=up,
                                    PartNumber=n, Body=body)["ETag"]
            parts.append({"PartNumber": n, "ETag": e})
        self.assertEqual(self.lookup("lc-on", "ckpt"), (["ckpt/model.bin"], []))
        g = self.s3.get_object(Bucket="lc-on", Key="ckpt/model.bin")
        self.assertEqual(g["Body"].read(), b"old model")
        self.assertEqual(g["ResponseMetadata"]["HTTPHeaders"]["x-larder-cache"], "hit")
        self.assertEqual(len(self.upstream_lists(mark, "lc-on")), 0)
        self.s3.complete_multipart_upload(Bucket="lc-on", Key="ckpt/model.bin", UploadId=up,
                                          MultipartUpload={"Parts": parts})
        g = self.s3.get_object(Bucket="lc-on", Key="ckpt/model.bin")
        self.assertEqual(len(g["Body"].read()), 5 * 1024 * 1024 + 10)
        self.assertEqual(len(self.upstream_lists(mark, "lc-on")), 0)
        self.lookup("lc-on", "ckpt")
        self.assertEqual(len(self.upstream_lists(mark, "lc-on")), 1)

    def test_without_setting_nothing_is_cached(self):
        self.s3.put_object(Bucket="lc-off", Key="dir/a", Body=b"a")
        mark = self.upstream.mark()
        for _ in range(5):
            self.assertEqual(self.lookup("lc-off", "dir"), (["dir/a"], []))
        self.assertEqual(len(self.upstream_lists(mark, "lc-off")), 5)

    def test_only_configured_prefixes_are_cached(self):
        mark = self.upstream.mark()
        for _ in range(3):
            self.lookup("lc-pfx", "cached/sub")
            self.lookup("lc-pfx", "elsewhere")
        targets = [r["target"] for r in self.upstream_lists(mark, "lc-pfx")]
        self.assertEqual(sum("prefix=cached" in t for t in targets), 1, targets)
        self.assertEqual(sum("prefix=elsewhere" in t for t in targets), 3, targets)

    def test_ttl_expires(self):
        mark = self.upstream.mark()
        self.lookup("lc-short", "t")
        self.lookup("lc-short", "t")
        self.assertEqual(len(self.upstream_lists(mark, "lc-short")), 1)
        time.sleep(1.2)
        self.lookup("lc-short", "t")
        self.assertEqual(len(self.upstream_lists(mark, "lc-short")), 2)

    def test_policy_is_checked_before_the_cache(self):
        self.s3.put_object(Bucket="lc-on", Key="secret/a", Body=b"a")
        self.lookup("lc-on", "secret")  # cached by a key allowed to list it
        reader = make_s3_client(self.larder.url, READER, READER_SECRET)
        self.assertS3Error(lambda: reader.list_objects_v2(Bucket="lc-on", Prefix="secret/",
                                                          Delimiter="/", MaxKeys=1),
                           403, "AccessDenied")
        self.assertEqual(self.lookup("lc-on", "allowed", s3=reader), ([], []))

    def test_listing_v1_is_cached(self):
        self.s3.put_object(Bucket="lc-on", Key="v1/a", Body=b"a")
        mark = self.upstream.mark()
        for _ in range(3):
            r = self.s3.list_objects(Bucket="lc-on", Prefix="v1/")
            self.assertEqual([o["Key"] for o in r["Contents"]], ["v1/a"])
        self.assertEqual(len(self.upstream_lists(mark, "lc-on")), 1)


class ListCacheBound(LarderCase):
    """list_cache_size bounds the answers kept: the oldest go first."""
    CONFIG_TEXT = """
[cache]
list_cache_size = 8KiB

[bucket lc-bound]
list_cache_ttl = 60
"""

    def test_oldest_answers_go_first(self):
        self.s3.create_bucket(Bucket="lc-bound")
        mark = self.upstream.mark()
        for i in range(20):  # about 1 KiB each with key and overhead: 20 do not fit
            self.s3.list_objects_v2(Bucket="lc-bound", Prefix="p%02d/" % i, MaxKeys=1)
        self.s3.list_objects_v2(Bucket="lc-bound", Prefix="p19/", MaxKeys=1)  # still held
        self.s3.list_objects_v2(Bucket="lc-bound", Prefix="p00/", MaxKeys=1)  # evicted
        targets = [r["target"] for r in self.upstream.from_larder(mark)
                   if r["method"] == "GET" and r["target"].startswith("/lc-bound?")]
        self.assertEqual(sum("p19" in t for t in targets), 1, targets)
        self.assertEqual(sum("p00" in t for t in targets), 2, targets)


class ListCacheCluster(ClusterBase):
    """A write through one node drops the other nodes' cached listings."""
    NODES = 2

    @classmethod
    def make_node(cls, i, port=None, admin=None):
        n = super().make_node(i, port, admin)
        n.write_config("[bucket shared]\nlist_cache_ttl = 60\n\n"
                       "[bucket lc-doomed]\nlist_cache_ttl = 60\n")
        n.env["LARDER_CONFIG"] = n.config_path
        return n

    def keys(self, node):
        r = node.client().list_objects_v2(Bucket="shared", Prefix="c/", Delimiter="/", MaxKeys=5)
        return [o["Key"] for o in r.get("Contents", [])]

    def test_write_on_one_node_drops_the_others_lists(self):
        self.direct.put_object(Bucket="shared", Key="c/old", Body=b"o")
        reader, writer = self.nodes
        mark = self.upstream.mark()
        self.assertEqual(self.keys(reader), ["c/old"])
        self.assertEqual(self.keys(reader), ["c/old"])
        self.assertEqual(len([r for r in self.upstream.from_larder(mark)
                              if r["target"].startswith("/shared?")]), 1)
        writer.client().put_object(Bucket="shared", Key="c/new", Body=b"n")
        deadline = time.monotonic() + 5
        while self.keys(reader) != ["c/new", "c/old"] and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.keys(reader), ["c/new", "c/old"])

    def test_bucket_deleted_on_one_node_is_gone_on_the_others(self):
        self.direct.create_bucket(Bucket="lc-doomed")
        reader, writer = self.nodes
        c = reader.client()
        mark = self.upstream.mark()
        for _ in range(2):  # the second from the reader's LIST cache
            self.assertEqual(c.list_objects_v2(Bucket="lc-doomed", Prefix="x/")["KeyCount"], 0)
        self.assertEqual(len([r for r in self.upstream.from_larder(mark)
                              if r["target"].startswith("/lc-doomed?")]), 1)
        writer.client().delete_bucket(Bucket="lc-doomed")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                c.list_objects_v2(Bucket="lc-doomed", Prefix="x/")
            except c.exceptions.NoSuchBucket:
                break
            time.sleep(0.1)
        self.assertS3Error(lambda: c.list_objects_v2(Bucket="lc-doomed", Prefix="x/"),
                           404, "NoSuchBucket")
