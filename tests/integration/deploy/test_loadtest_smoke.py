"""Every benchmark scenario runs: loadtest/run.sh smoke (tiny sizes).

The benchmarks are not timed tests and their figures are not asserted here;
this only proves each scenario still starts its origin, nginx peer, larder
nodes and load generator, finishes, and records a result without errors.
"""
import glob
import json
import os
import subprocess
import unittest

import harness

LOADTEST = os.path.join(harness.REPO, "loadtest")


class LoadtestSmoke(unittest.TestCase):
    def test_every_scenario_runs(self):
        build = os.environ.get("LARDER_BUILD_DIR") or "build"
        if not os.path.isabs(build):
            build = os.path.join(harness.REPO, build)
        for b in ("gateway/larder", "loadtest/loadgen", "loadtest/policy_sim"):
            if not os.access(os.path.join(build, b), os.X_OK):
                raise unittest.SkipTest("%s is not built" % b)
        if os.geteuid() != 0 and not os.environ.get("CI"):
            raise unittest.SkipTest("the load tests install nginx with apt-get: run as root")
        env = dict(os.environ, LOADTEST_BUILD=build)
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


if __name__ == "__main__":
    unittest.main()
