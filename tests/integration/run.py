#!/usr/bin/env python3
"""Runs the integration suite: tests/integration/<feature>/test_*.py with unittest.

  python3 tests/integration/run.py [--counts FILE] [NAME ...]

The tests are grouped by feature in folders (auth/, cache/, cluster/, ...);
the test doubles (moto_upstream, fault_origin, sigv4check) are in doubles/ and
harness.py, shared by all, is here. Every folder goes on sys.path, so a module
is named by its file name alone wherever it lives, and tests import each other
and the doubles that way (import harness, from test_cluster import ...).

NAME is a module, class or test id (test_refusals, test_refusals.Refusals.test_x);
without names every test_*.py in every folder runs, ordered by module name. The last line printed is
`INTEGRATION-COUNTS passed=N failed=N skipped=N`; --counts also writes those as JSON.
A failure in a class's setup or teardown (larder not exiting 0 on SIGTERM, a
sanitizer report) counts as one failure.

--jobs N runs N runners side by side, each taking the next module (or NAME)
from one queue, the longest first (MODULE_SECS), and printing a module's output
whole when it ends. Each runner hands out ports from a range of its own
(LARDER_TEST_PORTS, harness.free_port; from 20000 on, or LARDER_TEST_PORT_BASE),
so their larders, upstreams and Redis servers never collide. Most of a test's
time is spent waiting on processes and timers, so two runners on two cores take
little more than half the time of one.
"""
import argparse
import io
import json
import multiprocessing
import os
import queue
import shutil
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def folders():
    """HERE and each folder under it that holds Python files (not node/, __pycache__/)."""
    out = [HERE]
    for name in sorted(os.listdir(HERE)):
        d = os.path.join(HERE, name)
        if os.path.isdir(d) and not name.startswith((".", "_")) \
                and any(f.endswith(".py") for f in os.listdir(d)):
            out.append(d)
    return out


def module_names():
    """Every test_*.py module, in module-name order (as when they were all in one folder)."""
    return sorted(f[:-3] for d in folders() for f in os.listdir(d)
                  if f.startswith("test_") and f.endswith(".py"))


class CountingResult(unittest.TextTestResult):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.passed = 0
        self.started_at = {}
        self.class_secs = {}
        self.last_stop = time.monotonic()

    def startTest(self, test):
        self.started_at[test.id()] = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        # Wall time per class since the previous test ended: its tests, and its setup and
        # teardown (larder, moto, Redis), which the slowest list below shows.
        now = time.monotonic()
        cls = test.id().rsplit(".", 1)[0]
        self.class_secs[cls] = self.class_secs.get(cls, 0.0) + now - self.last_stop
        self.last_stop = now
        super().stopTest(test)

    def addSuccess(self, test):
        self.passed += 1
        super().addSuccess(test)

    def addExpectedFailure(self, test, err):
        self.passed += 1
        super().addExpectedFailure(test, err)


# Seconds a module took in a full run (ASan build, two runners on a busy
# machine), to hand out the longest first; a module not listed counts as 10.
# Only the order depends on it, but a long module left out is handed out
# among the last and may end the run alone on one runner.
MODULE_SECS = {
    "test_loadtest_smoke": 178, "test_cluster": 174, "test_prefetch": 91,
    "test_trust_fetch": 79, "test_large": 66, "test_cache_faults": 66, "test_key_limits": 64,
    "test_cluster_firstread": 56, "test_torch": 53, "test_cluster_firstread_raw": 51,
    "test_cluster_churn": 50, "test_operations": 49, "test_cluster_redis": 40, "test_cache": 39,
    "test_upstream_deviations": 37, "test_pins": 37, "test_trust_cluster": 32,
    "test_pins_nvme": 29, "test_refusals": 27, "test_lookahead": 26, "test_cluster_pins": 26,
    "test_cluster_partition": 26, "test_deploy_files": 24, "test_admin": 24,
    "test_pins_restart": 23, "test_trust_durable": 22, "test_passthrough": 22,
    "test_upstream_behaviour": 20, "test_cluster_split": 20, "test_tls": 19, "test_ui": 17,
    "test_clients": 16, "test_upstream_harness": 15, "test_clock": 15,
}

# Runner i of --jobs hands out ports from PORT_BASE + i * PORT_SPAN on: below
# the kernel's ephemeral range (32768 on), which the port-0 binds and
# outgoing connections draw from. LARDER_TEST_PORT_BASE moves them (another
# run on the machine: give it another base, PORT_SPAN * jobs apart).
PORT_BASE, PORT_SPAN = int(os.environ.get("LARDER_TEST_PORT_BASE") or 20000), 3000


def scratch_root():
    """A folder for every scratch file of this run, made TMPDIR for the tests and all they
    start (larder, moto, Redis, the clients): a test that forgets its folder, or dies before
    removing it, leaves it here, not in /tmp. LARDER_TEST_KEEP keeps it, as it keeps larder's."""
    root = tempfile.mkdtemp(prefix="larder-tests-")
    os.chmod(root, 0o1777)  # as /tmp: tests run some things as another user (nobody)
    os.environ["TMPDIR"] = root
    tempfile.tempdir = root
    return root


def own_scripts_first():
    """Puts the folder of the interpreter running the tests first on PATH when it is not on
    it: a version manager's shim (pyenv's) there would take half a second to pick this same
    interpreter for each python3 and aws the tests start (loadtest/run.sh alone starts
    hundreds: test_loadtest_smoke)."""
    own = os.path.dirname(os.path.abspath(sys.executable))
    path = os.environ.get("PATH", "")
    if own not in path.split(os.pathsep):
        os.environ["PATH"] = own + os.pathsep + path


def remove_scratch(root):
    """Removes root, unless something is still mounted under it (a FUSE test that could not
    unmount: removing through the mount would delete the files it shows)."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f]
    inside = [m for m in mounts if m == root or m.startswith(root + "/")]
    if inside:
        print("run.py: left %s: still mounted there: %s" % (root, ", ".join(inside)), flush=True)
        return
    shutil.rmtree(root, ignore_errors=True)


def run_suite(suite, stream, quiet):
    runner = unittest.TextTestRunner(stream=stream, verbosity=1 if quiet else 2,
                                     resultclass=CountingResult)
    r = runner.run(suite)
    failed = len(r.failures) + len(r.errors) + len(r.unexpectedSuccesses)
    return {"passed": r.passed, "failed": failed, "skipped": len(r.skipped)}, r.class_secs


def runner_proc(slot, names, results, quiet):
    """One runner of --jobs: runs each name it takes off names until None."""
    os.environ["LARDER_TEST_PORTS"] = "%d-%d" % (PORT_BASE + slot * PORT_SPAN,
                                                 PORT_BASE + (slot + 1) * PORT_SPAN)
    loader = unittest.TestLoader()
    for name in iter(names.get, None):
        out = io.StringIO()
        started = time.monotonic()
        try:
            counts, secs = run_suite(loader.loadTestsFromNames([name]), out, quiet)
        except Exception:  # the module did not load: one failure, with why
            out.write(traceback.format_exc())
            counts, secs = {"passed": 0, "failed": 1, "skipped": 0}, {}
        results.put((name, slot, time.monotonic() - started, out.getvalue(), counts, secs))


def run_jobs(names, jobs, quiet):
    """Runs names on jobs runners side by side; returns (counts, class_secs)."""
    ctx = multiprocessing.get_context("fork")
    todo, results = ctx.Queue(), ctx.Queue()
    for name in sorted(names, key=lambda n: -MODULE_SECS.get(n, 10)):
        todo.put(name)
    for _ in range(jobs):
        todo.put(None)
    procs = [ctx.Process(target=runner_proc, args=(i, todo, results, quiet), daemon=True)
             for i in range(jobs)]
    for p in procs:
        p.start()
    total = {"passed": 0, "failed": 0, "skipped": 0}
    class_secs, left = {}, set(names)
    while left:
        try:
            name, slot, secs, text, counts, csecs = results.get(timeout=5)
        except queue.Empty:
            if any(p.is_alive() for p in procs):
                continue
            print("run.py: the runners ended without running %s" % ", ".join(sorted(left)),
                  flush=True)
            total["failed"] += len(left)
            break
        left.discard(name)
        print("== %s (runner %d, %.0f s)" % (name, slot, secs), flush=True)
        sys.stdout.write(text)
        sys.stdout.flush()
        for k in total:
            total[k] += counts[k]
        class_secs.update(csecs)
    for p in procs:
        p.join(timeout=30)
    return total, class_secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", help="write {passed, failed, skipped} as JSON here")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("-j", "--jobs", type=int, default=1,
                    help="runners side by side (default 1)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    sys.path[:0] = folders()
    root = scratch_root()
    own_scripts_first()
    if args.jobs > 1:
        names = args.names or module_names()
        counts, class_secs = run_jobs(names, args.jobs, args.quiet)
    else:
        loader = unittest.TestLoader()
        suite = loader.loadTestsFromNames(args.names or module_names())
        counts, class_secs = run_suite(suite, sys.stdout, args.quiet)
    slowest = sorted(class_secs.items(), key=lambda kv: -kv[1])[:12]
    if len(class_secs) > 1:
        print("slowest classes (s, setup and teardown included): " +
              ", ".join("%s %.0f" % (name, secs) for name, secs in slowest), flush=True)
    if os.environ.get("LARDER_TEST_KEEP"):
        print("run.py: scratch files kept in %s" % root, flush=True)
    else:
        remove_scratch(root)
    if args.counts:
        with open(args.counts, "w") as f:
            json.dump(counts, f)
    print("INTEGRATION-COUNTS passed=%(passed)d failed=%(failed)d skipped=%(skipped)d" % counts,
          flush=True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
