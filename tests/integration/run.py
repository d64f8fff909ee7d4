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
"""
import argparse
import json
import os
import sys
import time
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


def discover(loader):
    """Every test_*.py module, in module-name order (as when they were all in one folder)."""
    modules = sorted(f[:-3] for d in folders() for f in os.listdir(d)
                     if f.startswith("test_") and f.endswith(".py"))
    return loader.loadTestsFromNames(modules)


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", help="write {passed, failed, skipped} as JSON here")
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    sys.path[:0] = folders()
    loader = unittest.TestLoader()
    if args.names:
        suite = loader.loadTestsFromNames(args.names)
    else:
        suite = discover(loader)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=1 if args.quiet else 2,
                                     resultclass=CountingResult)
    result = runner.run(suite)
    slowest = sorted(result.class_secs.items(), key=lambda kv: -kv[1])[:12]
    if len(result.class_secs) > 1:
        print("slowest classes (s, setup and teardown included): " +
              ", ".join("%s %.0f" % (name, secs) for name, secs in slowest), flush=True)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    counts = {"passed": result.passed, "failed": failed, "skipped": len(result.skipped)}
    if args.counts:
        with open(args.counts, "w") as f:
            json.dump(counts, f)
    print("INTEGRATION-COUNTS passed=%(passed)d failed=%(failed)d skipped=%(skipped)d" % counts,
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
