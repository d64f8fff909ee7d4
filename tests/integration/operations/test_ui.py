"""The dashboard at GET /ui on the admin port, rendered by a real browser.

Debian's chromium, headless, loads the page from a running larder that has
served reads and run a warm job; the test reads the DOM the page's script
built from the admin API and saves a screenshot (build/test-artifacts/).
The token reaches the page in the URL fragment, which the browser never
sends to the server.
"""
import html.parser
import json
import os
import shutil
import subprocess
import tempfile
import time

import harness
from test_admin import AdminCase

BUCKET = "ui-data"
ARTIFACTS = os.path.join(harness.REPO, "build", "test-artifacts")


def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    harness.need_client(None if path else "chromium missing",
                        " (Debian package chromium; scripts/deps.sh installs it)")
    return path


class Dom(html.parser.HTMLParser):
    """The rendered DOM: elements by id with their attributes, and the text
    of every table row by table id."""

    def __init__(self, text):
        super().__init__()
        self.attrs_by_id, self.rows, self.text_by_id = {}, {}, {}
        self._table, self._row, self._open = None, None, []
        self.body = {}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if "id" in a:
            self.attrs_by_id[a["id"]] = a
            self._open.append([a["id"], tag, []])
        if tag == "table":
            self._table = a.get("id")
        elif tag == "tr" and self._table:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._row.append("")

    def handle_endtag(self, tag):
        if tag == "tr" and self._row is not None:
            if self._row:
                self.rows.setdefault(self._table, []).append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        if self._open and self._open[-1][1] == tag:
            ident, _, text = self._open.pop()
            self.text_by_id[ident] = "".join(text).strip()

    def handle_data(self, data):
        if self._row:
            self._row[-1] += data.strip()
        for o in self._open:
            o[2].append(data)


class Dashboard(AdminCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.direct.create_bucket(Bucket=BUCKET)
        for i in range(4):
            cls.direct.put_object(Bucket=BUCKET, Key="set/obj-%d" % i, Body=os.urandom(3000 + i))

    def browse(self, fragment, screenshot=None, budget_ms=6000):
        """The DOM chromium rendered from /ui + fragment (after budget_ms of
        the page's virtual time: a few of its 2 s polls)."""
        exe = chromium()
        with tempfile.TemporaryDirectory(prefix="larder-ui-") as profile:
            cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu",
                   "--disable-background-networking", "--disable-component-update",
                   "--disable-sync", "--no-first-run", "--user-data-dir=" + profile,
                   "--virtual-time-budget=%d" % budget_ms]
            if screenshot:
                cmd += ["--screenshot=" + screenshot, "--window-size=1280,2200",
                        "--hide-scrollbars"]
            else:
                cmd += ["--dump-dom"]
            cmd.append("http://127.0.0.1:%d/ui%s" % (self.ADMIN_PORT, fragment))
            r = subprocess.run(cmd, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace")[-3000:])
        return Dom(r.stdout.decode(errors="replace"))

    def test_page_and_its_files_are_served_without_a_token_and_keep_to_their_origin(self):
        for path, ctype in (("/ui", "text/html"), ("/ui/app.js", "text/javascript"),
                            ("/ui/app.css", "text/css")):
            status, hdrs, body = self.admin("GET", path, token=None)
            self.assertEqual(status, 200, path)
            self.assertTrue(hdrs["content-type"].startswith(ctype), hdrs)
            csp = hdrs["content-security-policy"]
            self.assertIn("default-src 'none'", csp)
            self.assertIn("script-src 'self'", csp)
            self.assertIn("connect-src 'self'", csp)
            self.assertEqual(hdrs["x-frame-options"], "DENY")
            self.assertEqual(hdrs["x-content-type-options"], "nosniff")
            self.assertTrue(body)
        status, _, body = self.admin("GET", "/ui", token=None)
        page = body.decode()
        # Nothing from anywhere else: no absolute URL in the page or its files.
        for path in ("/ui", "/ui/app.js", "/ui/app.css"):
            text = self.admin("GET", path, token=None)[2].decode()
            self.assertNotIn("http://", text.replace("http://www.w3.org/2000/svg", ""), path)
            self.assertNotIn("https://", text, path)
        self.assertIn('src="/ui/app.js"', page)
        self.assertEqual(self.admin("GET", "/ui/nothing.js", token=None)[0], 404)
        self.assertEqual(self.admin("POST", "/ui", token=None)[0], 405)
        # The page holds no data: the API behind it still wants the token.
        self.assertEqual(self.admin("GET", "/admin/stats", token=None)[0], 401)

    def test_dashboard_renders_what_the_node_did(self):
        for i in range(4):
            key = "set/obj-%d" % i
            self.assertEqual(self.get_cache(key), "miss")
            self.assertEqual(self.get_cache(key), "hit")
        st, _, doc = self.admin_json("POST", "/admin/prefetch",
                                     body=json.dumps({"bucket": BUCKET, "prefix": "set/"}))
        self.assertEqual(st, 202, doc)
        job = doc["job"]
        deadline = time.monotonic() + 30
        while True:
            st, _, j = self.admin_json("GET", "/admin/jobs/" + job)
            if j["state"] in ("done", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(j["state"], "done", j)
        # A pin of a list of keys: shown as such (not as the whole bucket), with its id.
        st, _, pin = self.admin_json("POST", "/admin/prefetch", body=json.dumps(
            {"bucket": BUCKET, "keys": ["set/obj-0"], "pin_seconds": 600}))
        self.assertEqual(st, 202, pin)
        # Done before the figures are read: pinning its chunk changes the key's share of the
        # RAM tier (CI read the figures below before it and the page after: 11.7 vs 8.79 KiB).
        deadline = time.monotonic() + 30
        while True:
            st, _, j = self.admin_json("GET", "/admin/jobs/" + pin["job"])
            if j["state"] in ("done", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(j["state"], "done", j)
        # A lookahead with a window in bytes (and the default in objects).
        st, _, la = self.admin_json("POST", "/admin/lookahead", body=json.dumps(
            {"bucket": BUCKET, "keys": ["set/obj-0", "set/obj-1"], "window_bytes": 3 << 20,
             "idle_seconds": 600}))
        self.assertEqual(st, 201, la)
        _, _, stats = self.admin_json("GET", "/admin/stats")

        dom = self.browse("#token=" + self.TOKEN)
        self.assertEqual(dom.body.get("data-state"), "ready", dom.text_by_id.get("error"))
        self.assertNotIn("hidden", dom.attrs_by_id["main"])
        self.assertIn("hidden", dom.attrs_by_id["login"])
        self.assertEqual(dom.text_by_id["redis"], "single node")

        # Per-key traffic: this test's client key, with its requests and hits.
        clients = {r[0]: r for r in dom.rows["clients"]}
        row = clients[harness.CLIENT_KEY]
        want = stats["clients"][harness.CLIENT_KEY]
        self.assertEqual(int(row[2].replace(",", "")), want["hits"])
        self.assertGreaterEqual(int(row[1].replace(",", "")), want["requests"])
        # Its share of the RAM tier: the 4 objects its misses brought, no cap.
        kib = stats["resident"][harness.CLIENT_KEY]["bytes"] / 1024
        self.assertEqual(row[8], "%.*f KiB" % (2 if kib < 10 else 1, kib))
        buckets = {r[0]: r for r in dom.rows["buckets"]}
        self.assertIn(BUCKET, buckets)
        self.assertEqual(buckets[BUCKET][5], "50.0 %", "4 hits, 4 misses")

        # The warm job with its progress.
        jobs = {r[0]: r for r in dom.rows["jobs"]}
        self.assertEqual(jobs[job][1:3], [BUCKET, "done"])
        self.assertEqual(jobs[job][4], "4 / 4")

        pins = [r[:2] for r in dom.rows["pins"] if r[0].startswith("pin")]
        self.assertEqual(pins, [["pin " + pin["job"], BUCKET + " (1 keys)"]])
        self.assertEqual(self.admin_json("POST", "/admin/unpin",
                                         body=json.dumps({"job": pin["job"]}))[0], 200)
        lookaheads = [r for r in dom.rows["pins"] if r[0] == "lookahead"]
        self.assertEqual([(r[1], r[3]) for r in lookaheads],
                         [(BUCKET + " (2 keys)", "window 4,096 objects or 3.00 MiB")])
        st, _, _ = self.admin_json("DELETE", "/admin/lookahead/" + la["id"])
        self.assertEqual(st, 200)

        # Tiers: RAM's size as configured, and the upstream counters.
        self.assertIn("of 1.00 GiB", dom.text_by_id["tiers"])
        up = {r[0]: r for r in dom.rows["upstream"]}
        self.assertGreaterEqual(int(up["requests"][1].replace(",", "")),
                                stats["upstream"]["requests"])
        self.assertEqual(up["errors"][1], "0")
        for chart in ("chart-hits", "chart-use", "chart-upstream"):
            self.assertIn(chart, dom.attrs_by_id)

        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, "ui-dashboard.png")
        if os.path.exists(shot):
            os.unlink(shot)
        self.browse("#token=" + self.TOKEN, screenshot=shot)
        with open(shot, "rb") as f:
            png = f.read()
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(len(png), 20000, "a rendered page, not a blank one")
        print("\nscreenshot: " + os.path.relpath(shot, harness.REPO))

    def test_a_wrong_token_asks_for_another(self):
        dom = self.browse("#token=wrong-token-000000000000")
        self.assertEqual(dom.body.get("data-state"), "refused")
        self.assertNotIn("hidden", dom.attrs_by_id["login"])
        self.assertIn("hidden", dom.attrs_by_id["main"])
        self.assertIn("refused", dom.text_by_id["error"])

    def test_a_token_with_a_bare_percent_is_still_tried(self):
        # decodeURIComponent throws on a '%' that encodes nothing: the page stayed blank.
        dom = self.browse("#token=wrong%token-000000000000")
        self.assertEqual(dom.body.get("data-state"), "refused")
        self.assertNotIn("hidden", dom.attrs_by_id["login"])

    def test_without_a_token_the_page_asks_for_one(self):
        dom = self.browse("")
        self.assertEqual(dom.body.get("data-state"), "login")
        self.assertNotIn("hidden", dom.attrs_by_id["login"])

    def get_cache(self, key):
        path = harness.key_path(BUCKET, key)
        h = harness.sign_headers("GET", self.larder.url + path, harness.CLIENT_KEY,
                                 harness.CLIENT_SECRET)
        status, hdrs, _ = harness.http_request(self.larder.url, "GET", path, h)
        self.assertEqual(status, 200)
        return hdrs.get("x-larder-cache")


if __name__ == "__main__":
    import unittest
    unittest.main()
