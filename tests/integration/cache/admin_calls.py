"""The admin API as the pin and profile tests call it: a mixin for a
LarderCase that sets cls.admin (the admin URL) and ADMIN_TOKEN."""
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import harness


class AdminCalls:
    ADMIN_TOKEN = None

    def call(self, method, path, body=None, token=""):
        """(status, JSON answer) of an admin request: body a dict or list (sent
        as JSON) or raw bytes; token the class's ADMIN_TOKEN unless given (None:
        no Authorization header)."""
        token = self.ADMIN_TOKEN if token == "" else token
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        req = urllib.request.Request(self.admin + path, data=data, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                self.fail("%s %s: %d with a body that is not JSON: %r" % (method, path, e.code, raw))

    def wait_job(self, job, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st, info = self.call("GET", "/admin/jobs/" + job)
            self.assertEqual(st, 200, info)
            if info["state"] in ("done", "failed", "cancelled"):
                return info
            time.sleep(0.1)
        self.fail("job %s did not finish: %r" % (job, info))

    def cli(self, *args):
        """The larder command line against this larder's admin endpoint."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LARDER_")}
        env.update({"LARDER_ADMIN_URL": self.admin, "LARDER_ADMIN_TOKEN": self.ADMIN_TOKEN})
        return subprocess.run([harness.larder_binary()] + list(args), env=env,
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
