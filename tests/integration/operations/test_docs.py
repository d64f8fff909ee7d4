"""What a user can set, ask or read is written down where they would look.

Read from the sources, no larder started:

* every row of the settings table (config/settings.c) is in config/larder.conf,
  in its section, with its LARDER_* variable, and every [key], [anonymous] and
  [bucket] setting config/ini.c takes is there too;
* every admin route (gateway/admin.c) is in docs/operations.md's table, as
  METHOD /path, with {id} or {name} where the route takes a path segment;
* every larder subcommand (gateway/main.c) and every option the CLI parses
  (gateway/cli*.c, main.c) is in docs/operations.md;
* every metric family gateway/ exports is named in docs/operations.md,
  docs/cluster.md or docs/cache.md;
* every source file of the libraries is on the map, docs/ARCHITECTURE.md:
  by its name, by a pattern there (`disk*.c`), or as x.c beside its x.h.

That the example's values are the built-in defaults is checked by
tests/unit/config/test_config.c (test_example_shows_the_defaults).
"""
import fnmatch
import glob
import os
import re
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def read(*parts):
    with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
        return f.read()


def code_of(*patterns):
    """The text of the C files matching the glob patterns, joined."""
    out = []
    for p in patterns:
        for f in sorted(glob.glob(os.path.join(REPO, p))):
            with open(f, encoding="utf-8") as fh:
                out.append(fh.read())
    return "\n".join(out)


# The dashboard's own files (its script and style), which the page loads.
UNDOCUMENTED_ROUTES = {("GET", "/ui/")}
# Options every subcommand takes, which its --help describes.
UNDOCUMENTED_OPTIONS = {"--help"}


class Found(unittest.TestCase):
    def assertFound(self, text, pattern, msg):
        """Like assertRegex, without printing the whole text on failure."""
        if not re.search(pattern, text):
            self.fail(msg)


class SettingsInTheExample(Found):
    conf = read("config", "larder.conf")

    def sections(self):
        """{section name: its text}, for the sections written or commented out."""
        out, name = {}, None
        for line in self.conf.split("\n"):
            m = re.match(r";?\[(\w+)[ \]]", line)
            if m:
                name = m.group(1)
                out.setdefault(name, "")
            elif name:
                out[name] += line + "\n"
        return out

    def test_every_setting_is_in_its_section_with_its_variable(self):
        rows = re.findall(r'SET\("(\w+)",\s*"(\w+)",\s*"(\w+)"', read("config", "settings.c"))
        self.assertGreater(len(rows), 40)
        sections = self.sections()
        for section, name, env in rows:
            text = sections.get(section, "")
            self.assertFound(text, r"(?m)^;?%s = " % name,
                             "[%s] %s is not in config/larder.conf" % (section, name))
            self.assertIn(env, text, "%s is not named in config/larder.conf's [%s]"
                          % (env, section))

    def test_every_key_and_bucket_setting_is_in_the_example(self):
        names = set(re.findall(r'strcasecmp\(name, "(\w+)"\)', read("config", "ini.c")))
        self.assertTrue({"secret", "buckets", "region", "list_cache_ttl"} <= names)
        for name in names:
            self.assertFound(self.conf, r"(?m)^[;#]?\s*%s\s*=" % name,
                             "%s is not in config/larder.conf" % name)


class AdminRoutesInOperations(Found):
    def test_every_route_is_in_the_table(self):
        ops = read("docs", "operations.md")
        routes = re.findall(r'\{ "(/[^"]*)", "([A-Z]+)", (?:true|false),',
                            read("gateway", "admin.c"))
        self.assertGreater(len(routes), 15)
        for path, method in routes:
            if (method, path) in UNDOCUMENTED_ROUTES:
                continue
            # "/admin/jobs/" takes the rest as an id, "/admin/profiles/*/stop" one segment.
            want = re.escape(path).replace(r"\*", r"\{\w+\}")
            if path.endswith("/"):
                want += r"\{\w+\}"
            self.assertFound(ops, r"`%s %s`" % (method, want),
                             "%s %s is not in docs/operations.md" % (method, path))


class CommandLineInOperations(Found):
    ops = read("docs", "operations.md")

    def test_every_subcommand(self):
        usage = re.findall(r'"(?:usage: |       )larder (\w+)', read("gateway", "main.c"))
        self.assertIn("serve", usage)
        for cmd in usage:
            self.assertIn("larder %s" % cmd, self.ops,
                          "larder %s is not in docs/operations.md" % cmd)

    def test_every_option(self):
        code = code_of("gateway/cli.c", "gateway/cli_jobs.c", "gateway/main.c")
        options = set(re.findall(r'"(--[a-z][a-z-]*)', code)) - UNDOCUMENTED_OPTIONS
        self.assertIn("--pin", options)
        for opt in options:
            self.assertFound(self.ops, r"(?<![\w-])%s(?![\w-])" % re.escape(opt),
                             "%s is not in docs/operations.md" % opt)


class MetricsInTheDocs(Found):
    def test_every_family_is_named(self):
        docs = "".join(read("docs", f) for f in ("operations.md", "cluster.md", "cache.md"))
        names = set(re.findall(r'"(larder_[a-z0-9_]+)', code_of("gateway/*.c")))
        families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in names}
        self.assertGreater(len(families), 40)
        for name in sorted(families):
            self.assertFound(docs, r"(?<!\w)%s(?!\w)" % name, "%s is named in no doc" % name)


class SourcesOnTheMap(unittest.TestCase):
    def test_every_source_file_is_named(self):
        # A file added without a word on the map is how the map drifted
        # before (round 7 found fourteen such files).
        named = set(re.findall(r"`([^`\s]+)`", read("docs", "ARCHITECTURE.md")))
        patterns = [n.rsplit("/", 1)[-1] for n in named if "*" in n]
        files = [f for d in ("base", "net", "auth", "config", "store", "cluster", "gateway")
                 for f in sorted(glob.glob(os.path.join(REPO, d, "*.[ch]")))]
        self.assertGreater(len(files), 100)
        for path in files:
            folder, name = path.split(os.sep)[-2:]
            header = name[:-2] + ".h"
            on_map = (name in named or "%s/%s" % (folder, name) in named
                      or any(fnmatch.fnmatch(name, p) for p in patterns)
                      or (name.endswith(".c") and (header in named
                                                   or "%s/%s" % (folder, header) in named)))
            self.assertTrue(on_map, "%s/%s is not named in docs/ARCHITECTURE.md" % (folder, name))


if __name__ == "__main__":
    unittest.main()
