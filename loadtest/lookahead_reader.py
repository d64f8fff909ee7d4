"""A reader of S3 objects in a known order, for loadtest/run.sh scenario l.

Runs under Debian's /usr/bin/python3 (boto3; torch for --workers). Reads the
first --n keys of FILE once, in that order: with --workers 0 one boto3 client
in a plain loop, else a PyTorch DataLoader over a map-style dataset whose
sampler is a permutation fixed by --seed (what training code does), with a
boto3 client per worker.

With --lookahead ADMIN_URL the order is posted to larder first (POST
/admin/lookahead, the token from LARDER_ADMIN_TOKEN), as a job would post
its sampler's order before the epoch starts.

  lookahead_reader.py --bucket B --keys FILE [--n N] [--workers W] [--batch N]
                      [--seed S] [--lookahead URL --window N] --json OUT

Endpoint and keys from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY. The result: objects, seconds, objects/s, hits
(x-larder-cache: hit), errors.
"""
import argparse
import json
import os
import random
import sys
import time
import urllib.request

import boto3
from botocore.config import Config


def make_client():
    return boto3.session.Session().client(
        "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                      retries={"max_attempts": 2, "mode": "standard"}))


def read(s3, bucket, key):
    r = s3.get_object(Bucket=bucket, Key=key)
    r["Body"].read()
    return r["ResponseMetadata"]["HTTPHeaders"].get("x-larder-cache") == "hit"


def post_lookahead(admin, bucket, keys, window):
    body = json.dumps({"bucket": bucket, "keys": keys, "window": window}).encode()
    req = urllib.request.Request(admin.rstrip("/") + "/admin/lookahead", data=body,
                                 method="POST")
    req.add_header("Authorization", "Bearer " + os.environ["LARDER_ADMIN_TOKEN"])
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["id"]


def plain_loop(bucket, keys):
    s3 = make_client()
    hits = errors = 0
    for k in keys:
        try:
            hits += read(s3, bucket, k)
        except Exception as e:  # counted, and the run goes on
            errors += 1
            print("lookahead_reader: %s: %s" % (k, e), file=sys.stderr)
    return hits, errors


def dataloader(bucket, keys, workers, batch):
    import torch
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    class Samples(Dataset):
        def __init__(self):
            self.s3 = None

        def __len__(self):
            return len(keys)

        def __getitem__(self, i):
            if self.s3 is None:
                self.s3 = make_client()
            return read(self.s3, bucket, keys[i])

    def init(_):
        get_worker_info().dataset.s3 = make_client()

    # The order is the list itself: the caller already permuted it.
    dl = DataLoader(Samples(), batch_size=batch, sampler=list(range(len(keys))),
                    num_workers=workers, worker_init_fn=init, collate_fn=lambda b: b)
    hits = n = 0
    for b in dl:
        hits += sum(b)
        n += len(b)
    return hits, len(keys) - n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--keys", required=True)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="0: the file's order")
    ap.add_argument("--lookahead", help="larder's admin URL")
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    with open(a.keys) as f:
        keys = [k.strip() for k in f if k.strip()][:a.n]
    if a.seed:
        random.Random(a.seed).shuffle(keys)  # the sampler's order for the epoch
    la = post_lookahead(a.lookahead, a.bucket, keys, a.window) if a.lookahead else None
    t0 = time.monotonic()
    if a.workers:
        hits, errors = dataloader(a.bucket, keys, a.workers, a.batch)
    else:
        hits, errors = plain_loop(a.bucket, keys)
    secs = time.monotonic() - t0
    out = {"workers": a.workers, "objects": len(keys), "seconds": secs,
           "objects_per_s": len(keys) / secs, "hits": hits, "errors": errors,
           "lookahead": la, "window": a.window if la else None}
    with open(a.json, "w") as f:
        json.dump(out, f)
    print("%d objects in %.2f s (%.1f objects/s), %d hits, %d errors%s"
          % (len(keys), secs, len(keys) / secs, hits, errors,
             ", lookahead %s window %d" % (la, a.window) if la else ""), file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
