"""Every benchmark scenario runs: loadtest/run.sh smoke (tiny sizes).

The benchmarks are not timed tests and their figures are not asserted here;
this only proves each scenario still starts its origin, nginx peer, larder
nodes and load generator, finishes, and records a result without errors.
"""
import glob
import json
import os
import signal
import subprocess
import tempfile
import unittest

import harness

LOADTEST = os.path.join(harness.REPO, "loadtest")


def loadtest_env():
    """run.sh's environment, or SkipTest when it cannot run here."""
    build = os.environ.get("LARDER_BUILD_DIR") or "build"
    if not os.path.isabs(build):
        build = os.path.join(harness.REPO, build)
    for b in ("gateway/larder", "loadtest/loadgen", "loadtest/policy_sim", "loadtest/floor"):
        if not os.access(os.path.join(build, b), os.X_OK):
            raise unittest.SkipTest("%s is not built" % b)
    if os.geteuid() != 0 and not os.environ.get("CI"):
        raise unittest.SkipTest("the load tests install nginx with apt-get: run as root")
    env = dict(os.environ, LOADTEST_BUILD=build)
    # Its ports (LOADTEST_PORT_BASE to 29 above) at the top of this runner's range (run.py
    # --jobs): nothing else of this runner runs meanwhile, and no other runner's range is
    # touched. Without a range, run.sh's own (18080 on).
    spec = os.environ.get("LARDER_TEST_PORTS")
    if spec and not os.environ.get("LOADTEST_PORT_BASE"):
        env["LOADTEST_PORT_BASE"] = str(int(spec.split("-")[1]) - 40)
    # Data and caches of its own: the default work directory holds a developer's
    # quick or full data, which a smoke run would replace with its small files.
    env.setdefault("LOADTEST_WORK", os.path.join(tempfile.gettempdir(), "larder-loadtest-smoke"))
    return env


class LoadtestSmoke(unittest.TestCase):
    def test_every_scenario_runs(self):
        env = loadtest_env()
        out = subprocess.run([os.path.join(LOADTEST, "run.sh"), "smoke"], env=env,
                             capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
        text = (out.stdout + out.stderr).decode(errors="replace")
        self.assertEqual(out.returncode, 0, text[-4000:])
        res = os.path.realpath(os.path.join(LOADTEST, "results", "latest"))
        self.assertIn("smoke-", os.path.basename(res))
        for scen in "adecbfmgtl":
            files = glob.glob(os.path.join(res, scen + "-*.json"))
            self.assertTrue(files, "scenario %s wrote no result\n%s" % (scen, text[-3000:]))
            for f in files:
                with open(f) as fp:
                    r = json.load(fp)
                if "loadgen_rc" in r:
                    self.assertEqual(int(r["loadgen_rc"]), 0, f)
                total = r.get("total") or {}
                self.assertEqual(total.get("errors", 0), 0, f)
                if scen == "l":  # every object read once; one upstream GET each when cold
                    self.assertEqual((r["rc"], r["errors"]), (0, 0), f)
                    if not f.endswith("-warm.json"):
                        self.assertEqual(r["upstream_gets"], r["objects"], f)
                if scen == "t":  # the DataLoader's epochs: every sample, no errors
                    for e in r["epochs"]:
                        self.assertEqual((e["errors"], e["samples"] > 0), (0, True), f)
        # e's floor (loadtest/floor.c) answered every request it was sent.
        floor = json.load(open(os.path.join(res, "e-floor-small.json")))
        self.assertGreater(floor["total"]["objects"], 0, floor)
        self.assertEqual((floor["curl_errors"], floor["http_errors"]), (0, 0), floor)
        g = json.load(open(os.path.join(res, "g-cluster.json")))
        # Nodes alone would fetch every chunk three times (3.0).
        self.assertLess(g["upstream_gets_per_chunk"], 1.5, g)
        # ab.sh's table: a run compared with itself is 1.00 of itself.
        cmp = subprocess.run([os.path.join(LOADTEST, "report.py"), "compare", res, "--", res],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(cmp.returncode, 0, cmp.stderr)
        cold = [l for l in cmp.stdout.splitlines() if l.startswith("| a-larder-cold-")]
        self.assertTrue(cold, cmp.stdout)
        self.assertEqual(cold[0].split("|")[4].strip(), "1.00", cold[0])

    def test_side_by_side_table(self):
        """table.sh (issue 15): the scenarios of its figures in each
        configuration, pinned and unpinned (LOADTEST_TABLE=all), each run
        saying which, and one table of them all."""
        env = dict(loadtest_env(), LOADTEST_TABLE="all")
        out = subprocess.run([os.path.join(LOADTEST, "table.sh"), "smoke", "1"], env=env,
                             capture_output=True, timeout=900, stdin=subprocess.DEVNULL)
        text = (out.stdout + out.stderr).decode(errors="replace")
        self.assertEqual(out.returncode, 0, text[-4000:])
        lines = text.splitlines()
        pinning = os.cpu_count() >= 2  # run.sh pins nothing on one CPU
        labels = ["defaults unpinned", "defaults pinned", "tuned pinned", "tuned unpinned"]
        if not pinning:
            labels = ["defaults unpinned", "tuned unpinned"]
        # Each configuration a column, and the figures of time and
        # throughput in each (its CPU figures can be 0 at smoke size: not asserted).
        head = [l for l in lines if l.startswith("| figure |")]
        self.assertEqual(len(head), 1, text[-3000:])
        for label in labels:
            self.assertIn(label + " (", head[0])
        for figure in ("warm 115 KiB hits, objects/s vs nginx", "cold epoch of 115 KiB objects vs direct",
                       "64 clients x one cold object, last byte", "one reader of a cold shard"):
            rows = [l for l in lines if l.startswith("| " + figure)]
            self.assertTrue(rows, "%s missing\n%s" % (figure, text[-3000:]))
            self.assertNotIn("| - |", rows[0], rows[0])
        # Each run says which configuration it used, and how it pinned.
        runs = {l[2:].split(": ", 1)[0]: l.split(": ", 1)[1].split(", ") for l in lines
                if any(l.startswith("- %s: " % label) for label in labels)}
        self.assertEqual(sorted(runs), sorted(labels), text[-3000:])
        for label, names in runs.items():
            config, pinned = label.split()
            for name in names:
                res = os.path.join(LOADTEST, "results", name)
                with open(os.path.join(res, "config.json")) as fp:
                    cfg = json.load(fp)
                with open(os.path.join(res, "run.log")) as fp:
                    log = fp.read()
                self.assertEqual(cfg["config"], config)
                self.assertIn("configuration: " + config, log)
                if pinned == "pinned":
                    self.assertNotEqual(cfg["sut_cpu"], "", name)
                    self.assertIn("pinning: system under test on CPU", log)
                else:
                    self.assertEqual(cfg["sut_cpu"], "", name)
                    self.assertIn("pinning: none", log)


if __name__ == "__main__":
    unittest.main()


class OriginStop(unittest.TestCase):
    """loadtest/origin/stop.sh stops what start.sh started, workers included."""

    def test_a_stuck_master_is_killed_with_its_workers(self):
        # Until 2026-12-02 a master that outlived its 5 s was killed alone: its
        # workers went on, reparented, holding the port and their CPU.
        loadtest_env()  # skips where the load tests cannot run
        run = tempfile.mkdtemp(prefix="origin-stop-")
        os.makedirs(os.path.join(run, "data"))
        port = harness.free_port()
        subprocess.run([os.path.join(LOADTEST, "origin", "start.sh"), "--kind", "static",
                        "--run", run, "--listen", "127.0.0.1:%d" % port, "--root",
                        os.path.join(run, "data"), "--workers", "2"],
                       check=True, capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
        with open(os.path.join(run, "nginx.pid")) as f:
            master = int(f.read())
        with open("/proc/%d/task/%d/children" % (master, master)) as f:
            workers = [int(p) for p in f.read().split()]
        self.assertEqual(len(workers), 2)
        os.kill(master, signal.SIGSTOP)  # a master that does not answer TERM
        try:
            subprocess.run([os.path.join(LOADTEST, "origin", "stop.sh"), run], check=True,
                           timeout=60, stdin=subprocess.DEVNULL)
            # stop.sh has returned: what it killed is gone or a zombie.
            for pid in [master] + workers:
                self.assertFalse(alive(pid), "nginx process %d still runs after stop.sh" % pid)
        finally:
            for pid in [master] + workers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def alive(pid):
    """Whether pid runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return not any(line.split()[:2] == ["State:", "Z"] for line in f)
    except OSError:
        return False
