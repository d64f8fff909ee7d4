#!/usr/bin/python3
"""GETs through the AWS CRT's S3 client (python3-awscrt: the client under Mountpoint and
the S3 Connector for PyTorch), as its users drive it: part size 8 MiB, its own connection
count, plain http. Run with Debian's python3; keys from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY.

  loadtest/crt_reads.py http://HOST:80 BUCKET KEY [KEY...]   (CONC=32: GETs in flight)

Prints objects, bytes, seconds, MB/s, objects/s and failed GETs for all the keys. The
CRT of Debian 12 (0.16.8) connects to port 80 whatever the Host header says: the server
must listen on port 80 of its own address (e.g. 127.0.10.1), which needs root.
"""
import os
import sys
import threading
import time

from awscrt import auth, io, s3
from awscrt.http import HttpHeaders, HttpRequest


def main():
    endpoint, bucket, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
    host = endpoint.split("://", 1)[1]
    elg = io.EventLoopGroup(2)
    bootstrap = io.ClientBootstrap(elg, io.DefaultHostResolver(elg))
    creds = auth.AwsCredentialsProvider.new_static(os.environ["AWS_ACCESS_KEY_ID"],
                                                   os.environ["AWS_SECRET_ACCESS_KEY"])
    client = s3.S3Client(bootstrap=bootstrap, region="us-east-1", credential_provider=creds,
                         tls_mode=s3.S3RequestTlsMode.DISABLED, part_size=8 << 20)
    room = threading.Semaphore(int(os.environ.get("CONC", "1")))
    lock = threading.Lock()
    got = {"bytes": 0, "failed": 0}

    def get(key):
        done = threading.Event()

        def on_body(chunk, offset, **kw):
            with lock:
                got["bytes"] += len(chunk)

        def on_done(error=None, **kw):
            if error is not None:
                with lock:
                    got["failed"] += 1
            done.set()
            room.release()

        req = HttpRequest("GET", "/%s/%s" % (bucket, key), HttpHeaders([("Host", host)]))
        client.make_request(type=s3.S3RequestType.GET_OBJECT, request=req, on_body=on_body,
                            on_done=on_done)
        return done

    t0 = time.monotonic()
    waits = []
    for k in keys:
        room.acquire()
        waits.append(get(k))
    for w in waits:
        w.wait()
    dt = time.monotonic() - t0
    print("%d objects %.1f MB in %.3f s: %.1f MB/s %.0f obj/s, %d failed" %
          (len(keys), got["bytes"] / 1e6, dt, got["bytes"] / 1e6 / dt, len(keys) / dt,
           got["failed"]))
    return 1 if got["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
