"""A PyTorch DataLoader over S3 objects, as training code writes one.

Runs under Debian's /usr/bin/python3 (torch, boto3). A map-style dataset of
S3 keys; every DataLoader worker makes its own boto3 client in worker_init_fn
(boto3 clients must not cross a fork); shuffle on; each sample is the object's
bytes as a uint8 tensor.

  torch_dataloader.py --bucket B --keys FILE [--workers N] [--epochs N]
                      [--batch N] [--pause] [--digests] [--json OUT]

Endpoint and keys come from the environment, as for any AWS tool:
AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION.
boto3 reads AWS_ENDPOINT_URL itself only from 1.28 (botocore 1.31); older
releases ignore it, so the client is given endpoint_url explicitly, and the
result says whether this botocore would have honoured the variable alone.

Per epoch the result has: samples, seconds, samples/s, how many responses said
x-larder-cache: hit, errors, the workers that served samples, the CPU seconds
of this process and its workers (they exit at the end of an epoch), and with
--digests the SHA-256 of every key. --pause prints a line after each epoch but
the last and waits for a line on stdin (a test counts upstream requests there).
"""
import argparse
import hashlib
import json
import os
import sys
import time

import boto3
import botocore
import torch
from botocore.config import Config
from torch.utils.data import DataLoader, Dataset, get_worker_info


def make_client():
    return boto3.session.Session().client(
        "s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                      retries={"max_attempts": 2, "mode": "standard"}))


class S3Samples(Dataset):
    def __init__(self, bucket, keys):
        self.bucket, self.keys = bucket, keys
        self.s3 = None  # made in each worker, never in the parent

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        if self.s3 is None:
            self.s3 = make_client()
        r = self.s3.get_object(Bucket=self.bucket, Key=self.keys[i])
        data = r["Body"].read()
        hit = r["ResponseMetadata"]["HTTPHeaders"].get("x-larder-cache") == "hit"
        info = get_worker_info()
        return i, torch.frombuffer(bytearray(data), dtype=torch.uint8), hit, info.id if info else -1


def worker_init(_):
    get_worker_info().dataset.s3 = make_client()


def collate(batch):
    return batch  # samples differ in size: a list, not a stacked tensor


def env_endpoint_honoured():
    """Would a client made without endpoint_url use AWS_ENDPOINT_URL?"""
    c = boto3.session.Session().client("s3", region_name="us-east-1")
    return c.meta.endpoint_url.rstrip("/") == os.environ["AWS_ENDPOINT_URL"].rstrip("/")


def cpu_seconds():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--keys", required=True, help="file: one key a line")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pause", action="store_true")
    ap.add_argument("--digests", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    with open(a.keys) as f:
        keys = [k.strip() for k in f if k.strip()]
    ds = S3Samples(a.bucket, keys)
    gen = torch.Generator()
    gen.manual_seed(a.seed)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                    worker_init_fn=worker_init, collate_fn=collate, generator=gen)
    out = {"torch": torch.__version__, "boto3": boto3.__version__,
           "botocore": botocore.__version__, "workers": a.workers,
           "env_endpoint_honoured": env_endpoint_honoured(), "epochs": []}
    for e in range(a.epochs):
        t0, c0 = time.monotonic(), cpu_seconds()
        n = hits = 0
        seen, digests = set(), {}
        for batch in dl:
            for i, t, hit, wid in batch:
                n += 1
                hits += hit
                seen.add(wid)
                if a.digests:
                    digests[keys[i]] = hashlib.sha256(t.numpy().tobytes()).hexdigest()
        # the workers exited (joined) when the epoch ended: their CPU time counts now
        secs, cpu = time.monotonic() - t0, cpu_seconds() - c0
        ep = {"epoch": e + 1, "samples": n, "seconds": secs, "samples_per_s": n / secs,
              "hits": hits, "errors": len(keys) - n, "workers_seen": sorted(seen),
              "client_cpu_s": cpu}
        if a.digests:
            ep["digests"] = digests
        out["epochs"].append(ep)
        print("epoch %d: %d samples in %.2f s (%.1f samples/s), %d hits"
              % (e + 1, n, secs, n / secs, hits), file=sys.stderr, flush=True)
        if a.pause and e + 1 < a.epochs:
            print("epoch-done", flush=True)
            sys.stdin.readline()
    text = json.dumps(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    else:
        print(text, flush=True)


if __name__ == "__main__":
    main()
