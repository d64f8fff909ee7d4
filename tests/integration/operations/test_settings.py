"""Settings checked as the documentation says: a bad value (or upstream
credentials set up wrong) stops --check and the start alike, naming the
setting (and its line in the file); a SIGHUP says which changed settings
it did not apply."""
import os
import shutil
import signal
import tempfile
import time
import unittest

import harness
from harness import Larder

CLUSTER = {"LARDER_REDIS_URL": "redis://127.0.0.1:6379", "LARDER_NODE_ID": "n1",
           "LARDER_ADVERTISE": "127.0.0.1:8080", "LARDER_CLUSTER_SECRET": "0123456789abcdef0123"}


def scratch_dir(case):
    d = tempfile.mkdtemp(prefix="larder-settings-")
    case.addCleanup(shutil.rmtree, d, True)
    return d


def run_check(env, config_text=None):
    """larder serve --check with only env (and a stand-in upstream) set."""
    if config_text is None:
        return harness.run_serve(["--check"], env)
    d = tempfile.mkdtemp(prefix="larder-settings-")
    try:
        path = os.path.join(d, "larder.conf")
        with open(path, "w") as f:
            f.write(config_text)
        return harness.run_serve(["--check", "--config", path], env)
    finally:
        shutil.rmtree(d, True)


class ClusterSettings(unittest.TestCase):
    """LARDER_ADVERTISE is where peers fetch this node's chunks: an address
    they cannot use passed --check, and the node then started and was
    never reachable (its peers fell back to S3). Cluster mistakes named
    LARDER_REDIS_URL whatever setting was wrong."""

    def assert_refused(self, env, needle, config_text=None):
        out = run_check(env, config_text)
        self.assertEqual(out.returncode, 2, (env, out.stdout, out.stderr))
        self.assertIn(needle, out.stderr, (env, out.stderr))
        self.assertNotIn(b"configuration ok", out.stdout)
        return out

    def test_advertise_must_be_host_and_port(self):
        for bad in ("10.0.0.1:", "10.0.0.1:http", ":8080", "http://10.0.0.1:8080",
                    "10.0.0.1:8080/", "10.0.0.1:0", "10.0.0.1:99999", "fd00::1:8080"):
            self.assert_refused(dict(CLUSTER, LARDER_ADVERTISE=bad), b"LARDER_ADVERTISE")
        for good in ("10.0.0.1:8080", "larder-0.larder-peers.larder.svc.cluster.local:8080",
                     "larder_1:8080", "[fd00::1]:8080"):
            out = run_check(dict(CLUSTER, LARDER_ADVERTISE=good))
            self.assertEqual(out.returncode, 0, (good, out.stderr))

    def test_advertise_in_the_file_names_its_line(self):
        env = {k: v for k, v in CLUSTER.items() if k != "LARDER_ADVERTISE"}
        self.assert_refused(env, b"larder.conf:2: [cluster] advertise",
                            config_text="[cluster]\nadvertise = 10.0.0.1:\n")

    def test_cluster_mistakes_name_their_setting(self):
        out = self.assert_refused(dict(CLUSTER, LARDER_NODE_ID="node one"), b"LARDER_NODE_ID")
        self.assertNotIn(b"LARDER_REDIS_URL", out.stderr)
        out = self.assert_refused(dict(CLUSTER, LARDER_RAM_CACHE_SIZE="0"),
                                  b"LARDER_RAM_CACHE_SIZE")
        self.assertNotIn(b"LARDER_REDIS_URL", out.stderr)


class EmptyValuesInTheFile(unittest.TestCase):
    """"name =" with nothing after it turned four kinds of setting off (the
    upstream URL, so AWS S3; the cache directory, so RAM only; the admin
    token; the cluster's Redis URL...) without a word, where every other
    setting called it an error: a config template whose variable was empty
    fell back to the defaults. (An empty environment variable is unset, as
    documented.)"""

    def test_an_empty_value_is_an_error_naming_the_line(self):
        for section, name in (("upstream", "url"), ("cache", "dir"), ("admin", "token"),
                              ("cluster", "redis_url"), ("server", "base_domain"),
                              ("server", "tls_cert"), ("upstream", "ca_file")):
            out = run_check({}, "[%s]\n%s =\n" % (section, name))
            self.assertEqual(out.returncode, 2, (section, name, out.stdout, out.stderr))
            self.assertIn(("larder.conf:2: [%s] %s" % (section, name)).encode(), out.stderr)
        out = run_check({"LARDER_UPSTREAM_URL": "", "LARDER_CACHE_DIR": ""})
        self.assertEqual(out.returncode, 0, out.stderr)


class UpstreamCredentialsChecked(unittest.TestCase):
    """--check said "configuration ok" where the start then stopped (exit 1)
    for want of upstream credentials it was told where to find: a key id
    without its secret, a profile no file holds, a web identity token file
    that is not there. The entrypoint runs --check, so a container passed
    it and then died. --check cannot call STS, the container endpoint or
    IMDS: it checks what is local."""

    def check(self, env):
        d = scratch_dir(self)
        e = {"HOME": d, "AWS_EC2_METADATA_DISABLED": "true",
             "LARDER_UPSTREAM_URL": "http://127.0.0.1:9", "LARDER_ADMIN_LISTEN": "off",
             "LARDER_LISTEN": "127.0.0.1:%d" % harness.free_port()}
        e.update({k: v.replace("HOME", d) for k, v in env.items()})
        return (harness.run_serve(["--check"], e, upstream=False),
                harness.run_serve([], e, upstream=False))

    def test_what_the_start_refuses_check_refuses(self):
        role = "arn:aws:iam::123456789012:role/larder"
        for env, needle in (({"AWS_ACCESS_KEY_ID": "AKIDONLY"}, b"AWS_SECRET_ACCESS_KEY"),
                            ({"AWS_PROFILE": "nosuch"}, b"nosuch"),
                            ({"AWS_WEB_IDENTITY_TOKEN_FILE": "HOME/token", "AWS_ROLE_ARN": role},
                             b"AWS_WEB_IDENTITY_TOKEN_FILE"),
                            ({"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/creds",
                              "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "HOME/pod-token"},
                             b"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")):
            check, start = self.check(env)
            self.assertEqual(check.returncode, 2, (env, check.stdout, check.stderr))
            self.assertIn(needle, check.stderr, env)
            self.assertNotIn(b"configuration ok", check.stdout)
            self.assertEqual(start.returncode, 2, (env, start.stderr))
            self.assertIn(needle, start.stderr, env)

    def test_sources_it_cannot_reach_pass(self):
        d = scratch_dir(self)
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("eyJhbGciOiJSUzI1NiJ9.e30.sig\n")
        off = {"AWS_EC2_METADATA_DISABLED": "true"}
        for env, code in (({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}, 0),
                          (dict(off, AWS_WEB_IDENTITY_TOKEN_FILE=token,
                                AWS_ROLE_ARN="arn:aws:iam::123456789012:role/larder"), 0),
                          ({}, 0),  # nothing set: IMDS may answer (it is not asked)
                          (off, 2)):  # nor IMDS: the start would find nothing
            t0 = time.monotonic()
            out = harness.run_serve(["--check"], dict(env, HOME=d), upstream=False)
            self.assertEqual(out.returncode, code, (env, out.stderr))
            self.assertLess(time.monotonic() - t0, 5, "--check waited on the network")


class ConfigFileArgument(unittest.TestCase):
    """--config without its FILE was "unknown argument \"--config\"",
    --config= tried a file named "" (": cannot open"), and a directory
    was "read error"."""

    def test_config_needs_a_file(self):
        for args in (["--check", "--config"], ["--config=", "--check"]):
            out = harness.run_serve(args)
            self.assertEqual(out.returncode, 2, (args, out.stderr))
            self.assertIn(b"--config needs a FILE", out.stderr, args)

    def test_a_directory_is_named_as_one(self):
        out = harness.run_serve(["--config", scratch_dir(self), "--check"])
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn(os.strerror(21).encode(), out.stderr)  # EISDIR


class StartLogSaysWhatRuns(unittest.TestCase):
    """LARDER_DISK_CACHE_SIZE=0 turns the NVMe tier off (larder.conf), but
    with LARDER_CACHE_DIR set the start logged "NVMe tier in
    LARDER_CACHE_DIR"."""

    def test_disk_size_zero_is_logged_as_no_nvme_tier(self):
        larder = Larder(env={"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
                             "LARDER_UPSTREAM_URL": "http://127.0.0.1:9",
                             "LARDER_CACHE_DIR": scratch_dir(self),
                             "LARDER_DISK_CACHE_SIZE": "0"})
        self.addCleanup(larder.cleanup)
        larder.start()
        self.assertEqual(larder.stop(), 0, larder.log())
        store = [l for l in larder.log().splitlines() if "[store] RAM tier" in l]
        self.assertEqual(len(store), 1, larder.log())
        self.assertIn("no NVMe tier", store[0])
        self.assertIn("LARDER_DISK_CACHE_SIZE", store[0])


class ReloadSaysWhatItSkips(harness.S3Asserts, unittest.TestCase):
    """SIGHUP applies keys, grants and the anonymous grants; any other
    setting changed in the file was dropped without a word, and the log
    said only "reloaded"."""

    KEY = "[key LARDERSETTINGSKEY01]\nsecret = settings-secret-0000000000000001\nbuckets = *\n"

    def test_changed_settings_that_need_a_restart_are_named(self):
        conf = "[server]\nmax_skew = 900\n[cache]\nram_size = 64MiB\n" + self.KEY
        # Past the open-file limit (20,000 here) larder lowers
        # LARDER_MAX_CONNECTIONS itself: that is no change of the setting.
        larder = Larder(env={"LARDER_ADMIN_TOKEN": "settings-admin-token-0001",
                             "LARDER_MAX_CONNECTIONS": "1000000",
                             "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
                             "LARDER_UPSTREAM_URL": "http://127.0.0.1:9"},
                        config_text=conf, client_key=False)
        self.addCleanup(larder.cleanup)
        larder.start()
        larder.write_config(conf.replace("64MiB", "128MiB") +
                            "[bucket eu-data]\nregion = eu-west-1\n" +
                            self.KEY.replace("01]", "02]"))
        larder.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "reloaded" not in larder.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = larder.log()
        self.assertIn("reloaded: 2 client keys", log)
        self.assertIn("[cache] ram_size", log)
        self.assertIn("LARDER_RAM_CACHE_SIZE", log)
        self.assertIn("[bucket", log)
        self.assertIn("restart", log)
        # Unchanged settings, and those the environment holds, are not named.
        for quiet in ("max_skew", "LARDER_ADMIN_TOKEN", "LARDER_LISTEN", "LARDER_NODE_ID",
                      "max_connections"):
            self.assertNotIn(quiet, log)
        self.assertEqual(larder.stop(), 0, larder.log())
        larder.check_sanitizers(self)


if __name__ == "__main__":
    unittest.main()
