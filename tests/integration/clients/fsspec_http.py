"""fsspec's HTTP filesystem over presigned URLs through larder.

Runs under Debian's /usr/bin/python3 (fsspec 2022.11 with aiohttp, boto3;
s3fs-python is not packaged, so fsspec's "s3://" is not available there).
boto3 presigns GET URLs with SigV4 (signature_version="s3v4"); fsspec reads
them as plain HTTPS/HTTP files.

  fsspec_http.py --bucket B --key K [--key K ...] --tar-key K --tar-member M

Endpoint and keys: AWS_ENDPOINT_URL (passed explicitly: boto3 < 1.28 ignores
it), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION. Prints one
JSON object: per operation, what it returned (digests, sizes), so the test
compares it with what it uploaded.

aiohttp before 3.11.11 (Debian 12 has 3.8.4) can hang on a keep-alive
connection that went back to its pool with reading paused: a response of more
than 128 KiB (twice the default read buffer) that arrived whole but was never
read, as fsspec's exists() and info() leave them, makes the next request on
that connection wait forever (aio-libs/aiohttp#10171). A larger read buffer
(client_kwargs={"read_bufsize": 16 MiB}) keeps reading from pausing; this
script uses it unless given --aiohttp-defaults.
"""
import argparse
import hashlib
import json
import os
import tempfile

import boto3
import fsspec
from botocore.config import Config


def sha(data):
    return hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--key", action="append", required=True)
    ap.add_argument("--tar-key")
    ap.add_argument("--tar-member")
    ap.add_argument("--aiohttp-defaults", action="store_true")
    a = ap.parse_args()
    s3 = boto3.session.Session().client(
        "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"))

    def presign(key):
        return s3.generate_presigned_url("get_object", Params={"Bucket": a.bucket, "Key": key},
                                         ExpiresIn=600)

    urls = [presign(k) for k in a.key]
    http = {} if a.aiohttp_defaults else {"client_kwargs": {"read_bufsize": 16 << 20}}
    fs = fsspec.filesystem("http", **http)
    out = {"fsspec": fsspec.__version__}
    u = urls[0]
    # whole objects: one, then several at once (fsspec runs them concurrently)
    out["cat"] = sha(fs.cat(u))
    out["cat_many"] = [sha(b) for b in fs.cat(urls).values()] if len(urls) > 1 else []
    out["cat_many_urls"] = list(fs.cat(urls).keys()) == urls if len(urls) > 1 else True
    # size and info: HEAD is refused for a GET presigned URL, fsspec falls back to GET
    out["size"] = fs.size(u)
    out["info_size"] = fs.info(u)["size"]
    out["exists"] = fs.exists(u)
    # ranged reads: cat_file with start/end, and a file object seeking
    out["cat_range"] = sha(fs.cat_file(u, start=1000, end=5096))
    with fs.open(u, "rb", block_size=16384) as f:
        f.seek(70000)
        out["seek_read"] = sha(f.read(10000))
        f.seek(-100, 2)
        out["tail"] = sha(f.read())
        out["open_size"] = f.size
    # fsspec's own local caches in front of HTTP
    with tempfile.TemporaryDirectory() as d:
        with fsspec.open("simplecache::" + u, "rb", simplecache={"cache_storage": d},
                         http=http) as f:
            out["simplecache"] = sha(f.read())
        with fsspec.open("blockcache::" + u, "rb", blockcache={"cache_storage": d},
                         http=dict(http, block_size=32768)) as f:
            f.seek(50000)
            out["blockcache_range"] = sha(f.read(20000))
    # a member of a tar shard, by fsspec's tar filesystem over the HTTP file
    if a.tar_key:
        with fsspec.open("tar://%s::%s" % (a.tar_member, presign(a.tar_key)), "rb",
                         http=http) as f:
            out["tar_member"] = sha(f.read())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
