#!/usr/bin/env python3
"""Cold reads of 256 MiB objects, one at a time: direct to the emulated-S3 origin
(loadtest/origin, nginx: 20 ms to the first byte, 100 MiB/s per connection) and
through larder (8 MiB chunks, one worker, RAM tier only), the time to the last byte.

  loadtest/cold_ranges.py LARDER_BIN PORT_BASE OBJECTS [SEED] [ranges|seq]

ranges (default): each object's 32 chunks in a random order, a 4 KiB range at a
random place of each, every one cold (larder-first: the object's first read, which
learns it); seq: each object read whole. Ports PORT_BASE (origin) and +1 (larder).
Prints percentiles and the origin's GETs and bytes for larder; the bytes are checked.
"""
import http.client, os, random, shutil, statistics, subprocess, sys, tempfile, time
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

here = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
SIZE, CHUNK, LEN = 256 * MiB, 8 * MiB, 4096

def sign(method, url, headers):
    req = AWSRequest(method=method, url=url, headers=headers)
    S3SigV4Auth(Credentials('bench-key', 'bench-secret'), 's3', 'us-east-1').add_auth(req)
    return dict(req.headers.items())

def get(conn, host, path, rng, signed):
    h = {'Host': host}
    if rng:
        h['Range'] = rng
    if signed:
        h = sign('GET', 'http://%s%s' % (host, path), h)
    t0 = time.perf_counter()
    conn.request('GET', path, headers=h)
    r = conn.getresponse()
    body = r.read()
    dt = time.perf_counter() - t0
    return r.status, body, dt, r.getheader('x-larder-cache')

def main():
    larder, base, nobj = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    mode = sys.argv[5] if len(sys.argv) > 5 else 'ranges'
    work = tempfile.mkdtemp(prefix='coldrange-')
    os.makedirs(os.path.join(work, 'data', 'bench'))
    for i in range(nobj):  # a pattern, so that bytes can be checked
        with open(os.path.join(work, 'data', 'bench', 'o%d' % i), 'wb') as f:
            blk = bytes((j * 7 + i) & 0xff for j in range(MiB - 3))
            for k in range(SIZE // len(blk) + 1):
                f.write(blk)
            f.truncate(SIZE)
    oport, lport = base, base + 1
    subprocess.run([os.path.join(here, 'origin', 'start.sh'), '--kind', 'origin',
                    '--run', os.path.join(work, 'origin'), '--listen', '127.0.0.1:%d' % oport,
                    '--root', os.path.join(work, 'data'), '--delay-ms', '20', '--rate', '100m'],
                   check=True)
    env = dict(os.environ, LARDER_LISTEN='127.0.0.1:%d' % lport,
               LARDER_UPSTREAM_URL='http://127.0.0.1:%d' % oport,
               LARDER_UPSTREAM_ADDRESSING='path', LARDER_UPSTREAM_REGION='us-east-1',
               AWS_ACCESS_KEY_ID='origin-key', AWS_SECRET_ACCESS_KEY='origin-secret',
               LARDER_CLIENT_KEY='bench-key', LARDER_CLIENT_SECRET='bench-secret',
               LARDER_ADMIN_LISTEN='off', LARDER_RAM_CACHE_SIZE='2GiB',
               LARDER_METADATA_TTL='immutable', LARDER_ACCESS_LOG='off', LARDER_WORKERS='1',
               LARDER_CHUNK_SIZE='8MiB')
    log = open(os.path.join(work, 'larder.log'), 'w')
    lp = subprocess.Popen([larder, 'serve'], env=env, stdout=log, stderr=log)
    try:
        for _ in range(100):
            try:
                c = http.client.HTTPConnection('127.0.0.1', lport, timeout=1)
                c.request('GET', '/')
                c.getresponse().read()
                break
            except OSError:
                time.sleep(0.1)
        rnd = random.Random(seed)
        oh, lh = '127.0.0.1:%d' % oport, '127.0.0.1:%d' % lport
        dc = http.client.HTTPConnection('127.0.0.1', oport, timeout=30)
        lc = http.client.HTTPConnection('127.0.0.1', lport, timeout=30)
        res = {'direct': [], 'larder-first': [], 'larder': []}
        bad = 0
        for i in range(nobj):
            path = '/bench/o%d' % i
            if mode == 'seq':
                s, b, dt, _ = get(dc, oh, path, None, False)
                res['direct'].append(dt)
                s, b2, dt, _ = get(lc, lh, path, None, True)
                res['larder'].append(dt)
                bad += b != b2
                continue
            chunks = list(range(SIZE // CHUNK))
            rnd.shuffle(chunks)
            for n, k in enumerate(chunks):
                a = k * CHUNK + rnd.randrange(CHUNK - LEN)
                rng = 'bytes=%d-%d' % (a, a + LEN - 1)
                s1, b1, d1, _ = get(dc, oh, path, rng, False)
                s2, b2, d2, hit = get(lc, lh, path, rng, True)
                if s1 != 206 or s2 != 206 or b1 != b2 or hit != "miss":
                    if bad < 3:
                        print("bad", s1, s2, hit, b2[:300])
                    bad += 1
                res['direct'].append(d1)
                res['larder-first' if n == 0 else 'larder'].append(d2)
        for name, v in res.items():
            if not v:
                continue
            v = sorted(x * 1000 for x in v)
            print('%-13s n=%3d  p50 %6.1f  p90 %6.1f  max %6.1f  mean %6.1f ms' % (
                name, len(v), statistics.median(v), v[int(len(v) * 0.9) - 1 if len(v) > 1 else 0],
                v[-1], statistics.mean(v)))
        print('mismatches/errors:', bad)
        time.sleep(0.5)  # the last fills end
        gets, sent = 0, 0
        with open(os.path.join(work, 'origin', 'access.log')) as f:
            for line in f:
                p = line.split()
                gets, sent = gets + 1, sent + int(p[4])
        nd = len(res['direct'])
        direct_bytes = nd * (SIZE if mode == 'seq' else LEN)
        print('origin: larder GETs %d, MiB %.1f (direct: %d GETs)' % (
            gets - nd, (sent - direct_bytes) / MiB, nd))
    finally:
        lp.terminate()
        lp.wait()
        subprocess.run([os.path.join(here, 'origin', 'stop.sh'), os.path.join(work, 'origin')])
        shutil.rmtree(work)

main()
