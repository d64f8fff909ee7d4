#!/usr/bin/env python3
"""Cold reads of 256 MiB objects, one at a time: direct to the emulated-S3 origin
(loadtest/origin, nginx: 20 ms to the first byte, 100 MiB/s per connection) and
through larder (8 MiB chunks, one worker, RAM tier only), the time to the last byte.

  loadtest/cold_ranges.py LARDER_BIN PORT_BASE OBJECTS [SEED] [ranges|seq|cluster]

ranges (default): each object's 32 chunks in a random order, a 4 KiB range at a
random place of each, every one cold (larder-first: the object's first read, which
learns it); seq: each object read whole. Ports PORT_BASE (origin) and +1 (larder).
cluster: the same reads through node A of two nodes (redis-server on +3, node B
on +2, admin ports +4 and +5), each read counted as the non-owner's when A asked
B for it (A's larder_peer_requests_total grew), else the owner's.
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

ADMIN = {'Authorization': 'Bearer cold-ranges-admin-token'}

def peer_requests(port):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    c.request('GET', '/metrics', headers=ADMIN)
    n = 0
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith('larder_peer_requests_total{'):
            n += int(float(line.split()[-1]))
    c.close()
    return n

def wait_http(port, path='/'):
    for _ in range(100):
        try:
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=1)
            c.request('GET', path)
            c.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit('nothing answers on port %d' % port)

def wait_members(port, n):
    for _ in range(200):
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=2)
        c.request('GET', '/metrics', headers=ADMIN)
        text = c.getresponse().read().decode()
        if any(l.startswith('larder_cluster_members ') and float(l.split()[-1]) == n
               for l in text.splitlines()):
            return
        time.sleep(0.1)
    sys.exit('the cluster did not form: ' + text[-300:])

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
    procs = []
    cluster = mode == 'cluster'
    if cluster:
        procs.append(subprocess.Popen(['redis-server', '--port', str(base + 3), '--bind',
                                       '127.0.0.1', '--save', '', '--appendonly', 'no',
                                       '--dir', work], stdout=subprocess.DEVNULL))
        env.update(LARDER_REDIS_URL='redis://127.0.0.1:%d' % (base + 3),
                   LARDER_CLUSTER_SECRET='cold-ranges-cluster-secret',
                   LARDER_ADMIN_TOKEN='cold-ranges-admin-token')
    for i in range(2 if cluster else 1):
        if cluster:
            env.update(LARDER_LISTEN='127.0.0.1:%d' % (lport + i), LARDER_NODE_ID='n%d' % i,
                       LARDER_ADVERTISE='127.0.0.1:%d' % (lport + i),
                       LARDER_ADMIN_LISTEN='127.0.0.1:%d' % (base + 4 + i))
        log = open(os.path.join(work, 'larder%d.log' % i), 'w')
        procs.append(subprocess.Popen([larder, 'serve'], env=env, stdout=log, stderr=log))
    try:
        for i in range(2 if cluster else 1):
            wait_http(lport + i)
        if cluster:
            wait_members(base + 4, 2)
            wait_members(base + 5, 2)
        rnd = random.Random(seed)
        oh, lh = '127.0.0.1:%d' % oport, '127.0.0.1:%d' % lport
        dc = http.client.HTTPConnection('127.0.0.1', oport, timeout=30)
        lc = http.client.HTTPConnection('127.0.0.1', lport, timeout=30)
        res = {'direct': [], 'larder-first': [], 'larder': [], 'owner': [], 'non-owner': []}
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
                asked = peer_requests(base + 4) if cluster else 0
                s2, b2, d2, hit = get(lc, lh, path, rng, True)
                # In a cluster the first read left chunk 0 cached on the object's owner.
                learnt = cluster and k == 0 and n > 0 and hit == 'hit'
                if s1 != 206 or s2 != 206 or b1 != b2 or (hit != "miss" and not learnt):
                    if bad < 3:
                        print("bad", s1, s2, hit, b2[:300])
                    bad += 1
                res['direct'].append(d1)
                if cluster and n > 0 and not learnt:
                    time.sleep(0.2)  # a peer fetch is counted once its chunk is in
                    res['non-owner' if peer_requests(base + 4) > asked else 'owner'].append(d2)
                elif not cluster or n == 0:
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
        if os.environ.get('COLD_RANGES_LOG'):
            for name in os.listdir(work):  # larder0.log, ...
                if name.endswith('.log'):
                    shutil.copy(os.path.join(work, name), os.environ['COLD_RANGES_LOG'] + '.' + name)
            shutil.copy(os.path.join(work, 'origin', 'access.log'), os.environ['COLD_RANGES_LOG'])
        with open(os.path.join(work, 'origin', 'access.log')) as f:
            for line in f:
                p = line.split()
                gets, sent = gets + 1, sent + int(p[4])
        nd = len(res['direct'])
        direct_bytes = nd * (SIZE if mode == 'seq' else LEN)
        print('origin: larder GETs %d, MiB %.1f (direct: %d GETs)' % (
            gets - nd, (sent - direct_bytes) / MiB, nd))
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        subprocess.run([os.path.join(here, 'origin', 'stop.sh'), os.path.join(work, 'origin')])
        shutil.rmtree(work)

main()
