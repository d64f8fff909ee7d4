"""WebDataset-style tar shards streamed from S3 by a torch IterableDataset.

Runs under Debian's /usr/bin/python3 (torch, boto3; webdataset itself is not
packaged). The shards are split across DataLoader workers; each worker opens
a GET per shard with its own boto3 client and reads the body as a tar stream
(tarfile mode "r|": no seeking, as webdataset reads a shard), yielding members.

  torch_tarshards.py --bucket B --shards KEY,KEY,... [--workers N]

Endpoint and keys: AWS_ENDPOINT_URL (passed explicitly: boto3 < 1.28 ignores
it), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION. Prints
JSON: the SHA-256 of every member, the workers that read shards, and how many
shard GETs said x-larder-cache: hit.
"""
import argparse
import hashlib
import json
import os
import tarfile

import boto3
from botocore.config import Config
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class TarShards(IterableDataset):
    def __init__(self, bucket, shards):
        self.bucket, self.shards = bucket, shards

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        s3 = boto3.session.Session().client(
            "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
            config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"))
        for key in self.shards[wid::nw]:
            r = s3.get_object(Bucket=self.bucket, Key=key)
            hit = r["ResponseMetadata"]["HTTPHeaders"].get("x-larder-cache") == "hit"
            with tarfile.open(fileobj=r["Body"], mode="r|") as tar:
                for m in tar:
                    if m.isfile():
                        yield wid, key, hit, m.name, tar.extractfile(m).read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    ds = TarShards(a.bucket, a.shards.split(","))
    dl = DataLoader(ds, batch_size=None, num_workers=a.workers)
    members, seen, hit_shards = {}, set(), set()
    for wid, key, hit, name, data in dl:
        members[name] = hashlib.sha256(data).hexdigest()
        seen.add(wid)
        if hit:
            hit_shards.add(key)
    print(json.dumps({"members": members, "workers_seen": sorted(seen),
                      "shard_hits": len(hit_shards)}))


if __name__ == "__main__":
    main()
