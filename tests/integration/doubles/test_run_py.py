"""run.py gives a run one scratch folder (TMPDIR for the tests and what they
start) and removes it at the end, so that a test that forgets its folder
leaves nothing in /tmp: runs of the suite left ~1 GB there (the AWS CLI's
multipart files, caches) on a machine that runs it often."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if os.environ.get("LARDER_RUN_PY_INNER"):
    class Forgets(unittest.TestCase):
        """Run only by the tests below, inside a run.py of their own."""

        def test_forgets_its_folders(self):
            tempfile.mkdtemp(prefix="larder-forgotten-")
            subprocess.run(["mktemp", "-d"], check=True, stdout=subprocess.DEVNULL)


class ScratchFolder(unittest.TestCase):
    def inner_run(self, **env):
        tmp = tempfile.mkdtemp(prefix="larder-runpy-")
        self.addCleanup(shutil.rmtree, tmp, True)
        e = {k: v for k, v in os.environ.items() if k != "LARDER_TEST_KEEP"}
        e.update(TMPDIR=tmp, LARDER_RUN_PY_INNER="1", **env)
        out = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "-q",
                              "test_run_py.Forgets"], env=e, capture_output=True, text=True,
                             timeout=120)
        self.assertIn("INTEGRATION-COUNTS passed=1 failed=0", out.stdout, out.stderr)
        return tmp, out.stdout

    def test_what_a_test_forgets_is_removed(self):
        tmp, _ = self.inner_run()
        self.assertEqual(os.listdir(tmp), [])

    def test_kept_when_asked(self):
        tmp, text = self.inner_run(LARDER_TEST_KEEP="1")
        kept = re.search(r"scratch files kept in (\S+)", text)
        self.assertIsNotNone(kept, text)
        self.assertEqual(os.path.dirname(kept.group(1)), tmp)
        self.assertEqual(len(os.listdir(kept.group(1))), 2, os.listdir(kept.group(1)))
