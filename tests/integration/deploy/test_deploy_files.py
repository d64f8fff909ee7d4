"""The container and cluster deployment files under docker/, checked with what runs here.

No Docker engine, no Kubernetes API server and no moto are needed:

* docker/Dockerfile: both stages on debian:12-slim; every package it installs
  exists in apt (apt-cache policy); the build stage has a -dev package for every
  dependency() in the meson.build files; the runtime stage has a package for
  every shared library the built larder links (readelf + dpkg -S); the settings
  the brief fixes (ENV, VOLUME, EXPOSE, HEALTHCHECK, USER, ENTRYPOINT, CMD).
* docker/docker-compose*.yml: `docker-compose config` (or `docker compose
  config`) accepts them (skipped when neither is installed: Debian package
  docker-compose), and their larder environments pass `larder serve --check`.
* Every YAML file under docker/ parses (PyYAML: Debian package python3-yaml);
  the Kubernetes manifests hang together (Secret keys, ServiceAccount, labels,
  named ports, $(VAR) order, memory sized from LARDER_RAM_CACHE_SIZE) and their
  settings pass `larder serve --check`.
* Every LARDER_* variable the files set is one larder documents in
  config/larder.conf.
* docker/docker-entrypoint.sh runs outside a container with the plain build of
  larder ($LARDER_BUILD_DIR, default build/) on PATH: root refusal, larder's own
  message and status for a bad setting, the cache directory, exec and SIGTERM.
"""
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import unittest

import harness

try:
    import yaml
except ImportError:  # Debian: python3-yaml
    yaml = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DOCKER = os.path.join(REPO, "docker")
DOCKERFILE = os.path.join(DOCKER, "Dockerfile")
ENTRYPOINT = os.path.join(DOCKER, "docker-entrypoint.sh")
COMPOSE_FILES = ("docker-compose.yml", "docker-compose.aws.yml")
K8S = os.path.join(DOCKER, "k8s")
CONF = os.path.join(REPO, "config", "larder.conf")

# Read by docker/docker-entrypoint.sh, not by larder.
ENTRYPOINT_SETTINGS = {"LARDER_ALLOW_ROOT"}

# pkg-config (or find_library) names in meson.build -> Debian -dev package.
# None: nothing to install (libc, or not built in the image).
MESON_DEV_PACKAGES = {
    "threads": None,
    "cmocka": None,  # -Dtests=disabled
    "openssl": "libssl-dev",
    "libcurl": "libcurl4-openssl-dev",
    "libmicrohttpd": "libmicrohttpd-dev",
    "inih": "libinih-dev",
    "jansson": "libjansson-dev",
    "expat": "libexpat1-dev",
    "zlib": "zlib1g-dev",
    "libisal": "libisal-dev",
    "ev": "libev-dev",
    "jemalloc": "libjemalloc-dev",
    "hiredis": "libhiredis-dev",
    "m": None,  # libm: part of libc6-dev, already in the build stage
    "liburing": None,  # optional (required : false): only loadtest/floor's --uring mode
}
# In debian:12-slim already (a NEEDED library may come from these).
BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1"}

NAMESPACED_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Service", "Secret",
                    "ServiceAccount", "NetworkPolicy", "ConfigMap", "PersistentVolumeClaim"}
CLUSTER_KINDS = {"Namespace", "StorageClass", "PersistentVolume"}
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet"}

KIB = 1024


# ------------------------------------------------------------------ helpers


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def plain_larder():
    build = os.environ.get("LARDER_BUILD_DIR") or "build"
    if not os.path.isabs(build):
        build = os.path.join(REPO, build)
    path = os.path.join(build, "gateway", "larder")
    return path if os.access(path, os.X_OK) else None


def need_larder(case):
    path = plain_larder()
    if not path:
        case.skipTest("larder not built (expected $LARDER_BUILD_DIR/gateway/larder, "
                      "default build/gateway/larder)")
    return path


def need_yaml(case):
    if yaml is None:
        case.skipTest("PyYAML missing (Debian package python3-yaml)")


def base_env(extra=None):
    """A clean environment: nothing LARDER_* or AWS_* leaks in from the caller."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]
    env.update(extra or {})
    return env


def larder_check(binary, settings):
    """Runs `larder serve --check` with exactly these settings (plus dummy
    upstream credentials, so no credential source is searched)."""
    env = base_env({"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "example"})
    env.update(settings)
    with tempfile.TemporaryDirectory(prefix="larder-deploy-") as tmp:
        env["HOME"] = tmp
        return subprocess.run([binary, "serve", "--check"], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=30)


def parse_size(text):
    """larder sizes (16384, 64KiB, 1MiB, 64k, 1MB) and Kubernetes quantities (10Gi, 512M)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not m:
        raise ValueError("not a size: %r" % text)
    n, unit = int(m.group(1)), m.group(2).lower()
    binary = {"": 1, "k": KIB, "m": KIB ** 2, "g": KIB ** 3, "t": KIB ** 4}
    decimal = {"": 1, "k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "t": 1000 ** 4}
    if unit in ("", "b"):
        return n
    if unit.endswith("ib") or (len(unit) == 2 and unit[1] == "i"):
        return n * binary[unit[0]]
    if unit.endswith("b"):
        unit = unit[:-1]
    return n * decimal[unit]


def documented_settings():
    return set(re.findall(r"\bLARDER_[A-Z0-9_]+\b", read(CONF)))


def yaml_files():
    found = []
    for root, dirs, files in os.walk(DOCKER):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".yml", ".yaml")):
                found.append(os.path.join(root, name))
    return found


def dockerfile_instructions():
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in read(DOCKERFILE).splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerfile_stages():
    """(ARG defaults before the first FROM, [[(INSTRUCTION, arguments)] per stage])."""
    args, stages = {}, []
    for instr, rest in dockerfile_instructions():
        if instr == "FROM":
            stages.append([(instr, rest)])
        elif not stages:
            if instr == "ARG" and "=" in rest:
                k, _, v = rest.partition("=")
                args[k.strip()] = v.strip()
        else:
            stages[-1].append((instr, rest))
    return args, stages


def apt_packages(stage):
    pkgs = []
    for instr, rest in stage:
        if instr != "RUN":
            continue
        for part in rest.split("&&"):
            words = part.split()
            if "apt-get" in words and "install" in words:
                after = words[words.index("install") + 1:]
                pkgs += [w for w in after if not w.startswith("-")]
    return pkgs


def apt_candidates(pkgs):
    """{package: candidate version or None} from one `apt-cache policy` call."""
    out = subprocess.run(["apt-cache", "policy"] + list(pkgs), capture_output=True, text=True,
                         timeout=120).stdout
    found, current = {}, None
    for line in out.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
        m = re.match(r"\s+Candidate:\s*(\S+)", line)
        if m and current:
            found[current] = None if m.group(1) == "(none)" else m.group(1)
    return {p: found.get(p) for p in pkgs}


def k8s_documents():
    docs = []
    for path in sorted(os.listdir(K8S)):
        if path.endswith((".yml", ".yaml")):
            with open(os.path.join(K8S, path), encoding="utf-8") as f:
                for doc in yaml.safe_load_all(f):
                    if doc is not None:
                        docs.append((path, doc))
    return docs


def pod_containers(doc):
    spec = doc["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec.get("containers", [])


def compose_env(service):
    """A compose service's environment, ${VAR:-default} resolved to the default
    and ${VAR:?msg} to an example value; None for variables passed through."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    out = {}
    for k, v in env.items():
        if v is None:
            out[k] = None
            continue
        v = str(v)
        v = re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}", r"\1", v)
        v = re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:\?[^}]*\}", "EXAMPLE", v)
        out[k] = v
    return out


def image_env():
    """ENV of the Dockerfile's runtime stage."""
    env = {}
    for instr, rest in dockerfile_stages()[1][-1]:
        if instr == "ENV":
            for k, v in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=(\S*)", rest):
                env[k] = v
    return env


# ------------------------------------------------------------------ Dockerfile



def assert_redis_evicts(case, argv, limit):
    """A full Redis with its default policy (noeviction) refuses every node's heartbeat,
    and each node works alone (docs/cluster.md, "Redis's memory"); past a container's limit
    it is killed and comes back empty. So: a maxmemory under the limit, allkeys-lru."""
    opts = dict(zip(argv[1::2], argv[2::2]))
    case.assertEqual(opts.get("--maxmemory-policy"), "allkeys-lru", argv)
    m = re.fullmatch(r"(\d+)mb", opts.get("--maxmemory", ""))
    case.assertTrue(m, argv)
    if limit:
        mi = re.fullmatch(r"(\d+)Mi", limit)
        case.assertTrue(mi, limit)
        # Redis takes more than its data (buffers, fragmentation): keep a quarter free.
        case.assertLessEqual(int(m.group(1)) * 1000 * 1000, int(mi.group(1)) * 1024 * 1024 * 3 / 4)

class DockerfileChecks(unittest.TestCase):
    def test_two_stages_on_debian_12_slim(self):
        args, stages = dockerfile_stages()
        self.assertEqual(len(stages), 2, "a build stage and a runtime stage")
        for stage in stages:
            image = stage[0][1].split()[0]
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), image)
            self.assertEqual(image, "debian:12-slim")

    def test_runtime_stage_settings(self):
        _, stages = dockerfile_stages()
        runtime = stages[1]
        by = {}
        for instr, rest in runtime:
            by.setdefault(instr, []).append(rest)
        env = image_env()
        self.assertEqual(env.get("LARDER_CACHE_DIR"), "/var/cache/larder")
        self.assertEqual(env.get("LARDER_LISTEN"), "0.0.0.0:8080")
        self.assertEqual(env.get("LARDER_ADMIN_LISTEN"), "0.0.0.0:9090")
        self.assertIn("/var/cache/larder", by.get("VOLUME", [""])[0])
        self.assertEqual(sorted(by["EXPOSE"][0].split()), ["8080", "9090"])
        self.assertIn("http://127.0.0.1:9090/healthz", by["HEALTHCHECK"][0])
        self.assertEqual(by["USER"], ["larder"])
        self.assertEqual(by["ENTRYPOINT"], ['["/usr/local/bin/docker-entrypoint.sh"]'])
        self.assertEqual(by["CMD"], ['["serve"]'])
        build = " ".join(rest for instr, rest in stages[0] if instr == "RUN")
        self.assertIn("meson setup build --buildtype=release -Dtests=disabled", build)
        self.assertIn("ninja -C build", build)

    def test_copied_files_exist_and_are_not_ignored(self):
        ignored = [l.strip() for l in read(os.path.join(REPO, ".dockerignore")).splitlines()
                   if l.strip() and not l.startswith("#")]
        for needed in (".git", "build", "**/node_modules"):
            self.assertIn(needed, ignored)
        for instr, rest in dockerfile_instructions():
            if instr != "COPY" or rest.startswith("--from"):
                continue
            for src in rest.split()[:-1]:
                if src == ".":
                    continue
                self.assertTrue(os.path.exists(os.path.join(REPO, src)), src)
                self.assertNotIn(src.split("/")[0], ignored, src)
        self.assertTrue(os.stat(ENTRYPOINT).st_mode & stat.S_IXUSR, "entrypoint executable")

    def test_build_stage_has_a_dev_package_for_every_meson_dependency(self):
        _, stages = dockerfile_stages()
        build_pkgs = set(apt_packages(stages[0]))
        for tool in ("meson", "ninja-build", "pkg-config", "gcc"):
            self.assertIn(tool, build_pkgs)
        names = set()
        for root, dirs, files in os.walk(REPO):
            dirs[:] = [d for d in dirs
                       if not d.startswith((".", "build")) and d != "node_modules"]
            if "meson.build" in files:
                text = read(os.path.join(root, "meson.build"))
                names |= set(re.findall(r"\bdependency\(\s*'([^']+)'", text))
                names |= set(re.findall(r"\bfind_library\(\s*'([^']+)'", text))
        self.assertIn("libmicrohttpd", names, "meson.build parsed")
        for name in sorted(names):
            self.assertIn(name, MESON_DEV_PACKAGES,
                          "meson.build needs %r: add its -dev package to docker/Dockerfile's "
                          "build stage and to MESON_DEV_PACKAGES here" % name)
            pkg = MESON_DEV_PACKAGES[name]
            if pkg:
                self.assertIn(pkg, build_pkgs, "for meson dependency %r" % name)

    def test_packages_exist_in_apt(self):
        if not shutil.which("apt-cache"):
            self.skipTest("apt-cache not available")
        _, stages = dockerfile_stages()
        pkgs = sorted({p for stage in stages for p in apt_packages(stage)})
        found = apt_candidates(["libc6"] + pkgs)
        if not found["libc6"]:
            self.skipTest("apt package lists are empty: run apt-get update")
        for pkg in pkgs:
            with self.subTest(pkg=pkg):
                self.assertIsNotNone(found[pkg], "no apt candidate for %s" % pkg)

    def test_runtime_stage_has_every_library_larder_links(self):
        binary = need_larder(self)
        for tool in ("readelf", "ldd", "dpkg"):
            if not shutil.which(tool):
                self.skipTest(tool + " not available")
        _, stages = dockerfile_stages()
        runtime = set(apt_packages(stages[1])) | BASE_IMAGE_PACKAGES
        dyn = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True,
                             timeout=30).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
        self.assertTrue(needed, "readelf found no NEEDED entries")
        resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)",
                                   subprocess.run(["ldd", binary], capture_output=True,
                                                  text=True, timeout=30).stdout, re.M))
        for soname in needed:
            with self.subTest(soname=soname):
                path = resolved.get(soname)
                self.assertIsNotNone(path, "ldd cannot resolve " + soname)
                candidates = {path, os.path.realpath(path)}
                for p in list(candidates):
                    if p.startswith("/usr/lib/"):
                        candidates.add(p[4:])
                    elif p.startswith("/lib/"):
                        candidates.add("/usr" + p)
                owners = set()
                for p in candidates:
                    out = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True,
                                         timeout=30).stdout
                    for line in out.splitlines():
                        owners |= {o.strip().split(":")[0] for o in line.split(": ")[0].split(",")}
                self.assertTrue(owners, "no Debian package owns " + path)
                self.assertTrue(owners & runtime,
                                "%s comes from %s, not in the runtime stage"
                                % (soname, ", ".join(sorted(owners))))


# ------------------------------------------------------------------ YAML files


class YamlFilesParse(unittest.TestCase):
    def test_every_yaml_under_docker_parses(self):
        need_yaml(self)
        files = yaml_files()
        self.assertGreaterEqual(len(files), 2 + 5)
        for path in files:
            with self.subTest(path=os.path.relpath(path, REPO)):
                with open(path, encoding="utf-8") as f:
                    docs = [d for d in yaml.safe_load_all(f) if d is not None]
                self.assertTrue(docs)
                for d in docs:
                    self.assertIsInstance(d, dict)

    def test_larder_settings_are_documented(self):
        need_yaml(self)
        known = documented_settings() | ENTRYPOINT_SETTINGS
        used = set()
        for path in yaml_files() + [DOCKERFILE, ENTRYPOINT]:
            text = "\n".join(l for l in read(path).splitlines() if not l.lstrip().startswith("#"))
            used |= {(os.path.relpath(path, REPO), n)
                     for n in re.findall(r"\bLARDER_[A-Z0-9_]+\b", text)}
        for where, name in sorted(used):
            with self.subTest(name=name, file=where):
                self.assertTrue(name in known, "%s sets %s, which config/larder.conf does "
                                "not document" % (where, name))


# ------------------------------------------------------------------ compose


class ComposeFiles(unittest.TestCase):
    @staticmethod
    def compose_command():
        if shutil.which("docker-compose"):
            return ["docker-compose"]
        if shutil.which("docker"):
            r = subprocess.run(["docker", "compose", "version"], capture_output=True,
                               timeout=30)
            if r.returncode == 0:
                return ["docker", "compose"]
        return None

    def run_config(self, name, extra_env=None):
        cmd = self.compose_command()
        if not cmd:
            self.skipTest("neither docker-compose nor `docker compose` is installed "
                          "(Debian package: docker-compose)")
        with tempfile.TemporaryDirectory(prefix="larder-compose-") as home:
            env = base_env({"HOME": home, "DOCKER_CONFIG": home})
            env.update(extra_env or {})
            return subprocess.run(cmd + ["-f", name, "config"], cwd=DOCKER, env=env,
                                  capture_output=True, text=True, timeout=120)

    def test_compose_config_demo(self):
        r = self.run_config("docker-compose.yml")
        self.assertEqual(r.returncode, 0, r.stderr)
        for svc in ("redis", "upstream", "larder-1", "larder-2", "larder-3"):
            self.assertIn(svc + ":", r.stdout)

    def test_compose_config_aws(self):
        r = self.run_config("docker-compose.aws.yml",
                            {"LARDER_CLIENT_KEY": "AKEXAMPLE0000000001",
                             "LARDER_CLIENT_SECRET": "example-secret-0123456789",
                             "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("AKIDEXAMPLE", r.stdout, "AWS credentials passed through")
        r = self.run_config("docker-compose.aws.yml")
        self.assertNotEqual(r.returncode, 0, "must insist on LARDER_CLIENT_KEY")
        self.assertIn("LARDER_CLIENT_KEY", r.stdout + r.stderr)

    def load(self, name):
        need_yaml(self)
        with open(os.path.join(DOCKER, name), encoding="utf-8") as f:
            return yaml.safe_load(f)

    def test_demo_layout(self):
        services = self.load("docker-compose.yml")["services"]
        self.assertEqual(set(services), {"redis", "upstream", "larder-1", "larder-2", "larder-3",
                                         "prometheus", "grafana"})
        self.assertTrue(services["redis"]["image"].startswith("redis:7-alpine"))
        self.assertTrue(services["upstream"]["image"].startswith("motoserver/moto"))
        self.assertIn("5000", " ".join(map(str, services["upstream"].get("command", []))))
        volumes, host_ports, ids = set(), [], set()
        for n in (1, 2, 3):
            svc = services["larder-%d" % n]
            self.assertEqual(svc["build"], {"context": "..", "dockerfile": "docker/Dockerfile"})
            env = compose_env(svc)
            self.assertEqual(env["LARDER_UPSTREAM_URL"], "http://upstream:5000")
            self.assertEqual(env["LARDER_UPSTREAM_ADDRESSING"], "path")
            # Redis asks for a password, the same the nodes send.
            url = env["LARDER_REDIS_URL"]
            self.assertTrue(url.startswith("redis://:") and url.endswith("@redis:6379"), url)
            password = url[len("redis://:"):-len("@redis:6379")]
            self.assertEqual(services["redis"]["command"][-2:],
                             ["--requirepass", "${REDIS_PASSWORD:-%s}" % password])
            assert_redis_evicts(self, services["redis"]["command"], None)
            for k in ("LARDER_CLIENT_KEY", "LARDER_CLIENT_SECRET", "LARDER_CLUSTER_SECRET",
                      "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                self.assertTrue(env.get(k), k)
            self.assertIn("${LARDER_CLIENT_KEY:-", str(svc["environment"]["LARDER_CLIENT_KEY"]))
            ids.add((env["LARDER_NODE_ID"], env["LARDER_ADVERTISE"]))
            vols = [v.split(":")[0] for v in svc["volumes"] if v.endswith(":/var/cache/larder")]
            self.assertEqual(len(vols), 1)
            volumes.add(vols[0])
            host_ports += [p.rsplit(":", 2)[-2] for p in svc["ports"]]
            self.assertIn("127.0.0.1:%d:8080" % (8080 + n), svc["ports"])
        self.assertEqual(len(volumes), 3, "one cache volume per node")
        self.assertEqual(len(ids), 3, "distinct node ids and advertised addresses")
        self.assertEqual(len(host_ports), len(set(host_ports)), "host ports collide")

    def test_aws_layout(self):
        services = self.load("docker-compose.aws.yml")["services"]
        self.assertEqual(list(services), ["larder"])
        env = compose_env(services["larder"])
        self.assertNotIn("LARDER_UPSTREAM_URL", env, "real AWS S3: no upstream URL")
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            self.assertIn(k, env)
            self.assertIsNone(env[k], k + " is passed through from the environment")

    def test_compose_settings_pass_larder_check(self):
        binary = need_larder(self)
        for name in COMPOSE_FILES:
            for svc_name, svc in self.load(name)["services"].items():
                if "build" not in svc:
                    continue
                settings = dict(image_env())
                settings.update({k: v for k, v in compose_env(svc).items() if v is not None})
                with self.subTest(file=name, service=svc_name):
                    r = larder_check(binary, settings)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertIn("configuration ok", r.stdout)


# ------------------------------------------------------------------ monitoring

GRAFANA = os.path.join(DOCKER, "grafana")
DASHBOARD = os.path.join(GRAFANA, "dashboards", "larder.json")


def dashboard_exprs():
    with open(DASHBOARD, encoding="utf-8") as f:
        dash = json.load(f)
    exprs = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            exprs.append((p["title"], t["expr"]))
    return dash, exprs


def scrape_metrics(binary):
    """larder's /metrics text from a node with every family on: a cluster
    member (its Redis unreachable, so it serves alone) with an NVMe tier, after
    one client request."""
    with tempfile.TemporaryDirectory(prefix="larder-metrics-") as tmp:
        port, admin = harness.free_port(), harness.free_port()
        token = "metrics-token-0123456789"
        env = base_env({
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "example",
            "HOME": tmp, "LARDER_LISTEN": "127.0.0.1:%d" % port,
            "LARDER_ADMIN_LISTEN": "127.0.0.1:%d" % admin, "LARDER_ADMIN_TOKEN": token,
            "LARDER_UPSTREAM_URL": "http://127.0.0.1:%d" % harness.free_port(),
            "LARDER_CLIENT_KEY": "AKMETRICS0000000001", "LARDER_CLIENT_SECRET": "metrics-secret-0123456789",
            "LARDER_CACHE_DIR": os.path.join(tmp, "cache"), "LARDER_DISK_CACHE_SIZE": "64MiB",
            "LARDER_REDIS_URL": "redis://127.0.0.1:%d" % harness.free_port(),
            "LARDER_CLUSTER_SECRET": "metrics-cluster-secret-0123", "LARDER_NODE_ID": "n1",
            "LARDER_ADVERTISE": "127.0.0.1:%d" % port})
        proc = subprocess.Popen([binary, "serve"], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            deadline = time.time() + 20
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", admin), timeout=1):
                        break
                except OSError:
                    if proc.poll() is not None or time.time() > deadline:
                        raise AssertionError("larder did not start: " +
                                             proc.stderr.read().decode(errors="replace"))
                    time.sleep(0.05)
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.sendall(b"GET /b/k HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                while c.recv(65536):
                    pass
            with socket.create_connection(("127.0.0.1", admin), timeout=5) as c:
                c.sendall(("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                           "Authorization: Bearer %s\r\n\r\n" % token).encode())
                data = b""
                while True:
                    piece = c.recv(65536)
                    if not piece:
                        break
                    data += piece
            head, _, body = data.partition(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n")[0]:
                raise AssertionError("/metrics: " + head.decode(errors="replace"))
            return body.decode()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stderr.close()


class Monitoring(unittest.TestCase):
    """docker/prometheus and docker/grafana: what the Compose demo runs to watch
    the three nodes, checked without Docker."""

    def test_dashboard_asks_only_for_metrics_larder_exports(self):
        binary = need_larder(self)
        text = scrape_metrics(binary)
        families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
        labels = {}
        for m in re.finditer(r"^(larder_\w+)\{([^}]*)\}", text, re.M):
            labels.setdefault(m.group(1), set()).update(
                re.findall(r'(\w+)="', m.group(2)))
        self.assertIn("larder_cluster_members", families, "a cluster member's families")
        dash, exprs = dashboard_exprs()
        self.assertGreaterEqual(len(exprs), 20)
        for title, expr in exprs:
            for name in re.findall(r"\blarder_\w+", expr):
                family = re.sub(r"_(bucket|count|sum)$", "", name) \
                    if name.startswith("larder_upstream_request_duration") else name
                with self.subTest(panel=title, metric=name):
                    self.assertIn(family, families)
                    # Labels the query selects or groups by are ones the samples carry.
                    used = set(re.findall(r"by \(([^)]*)\)", expr))
                    used = {l.strip() for u in used for l in u.split(",")} - {"le", "instance"}
                    for sel in re.findall(name + r"\{([^}]*)\}", expr):
                        used |= set(re.findall(r"(\w+)=~?\"", sel)) - {"instance"}
                    if name in labels:
                        self.assertLessEqual(used, labels[name], expr)

    def test_dashboard_is_well_formed(self):
        dash, exprs = dashboard_exprs()
        self.assertEqual(dash["uid"], "larder-overview")
        names = [v["name"] for v in dash["templating"]["list"]]
        self.assertEqual(names, ["datasource", "instance"])
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")
        for p in dash["panels"]:
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            if p["type"] != "row":
                self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
                self.assertTrue(p["targets"], p["title"])
        for title, expr in exprs:
            self.assertEqual(expr.count("("), expr.count(")"), title)
            self.assertEqual(expr.count("{"), expr.count("}"), title)
            if "larder_" in expr:
                self.assertIn('instance=~"$instance"', expr, title)

    def test_compose_wires_prometheus_and_grafana(self):
        need_yaml(self)
        with open(os.path.join(DOCKER, "docker-compose.yml"), encoding="utf-8") as f:
            services = yaml.safe_load(f)["services"]
        with open(os.path.join(DOCKER, "prometheus", "prometheus.yml"), encoding="utf-8") as f:
            prom = yaml.safe_load(f)
        job = prom["scrape_configs"][0]
        targets = set(job["static_configs"][0]["targets"])
        nodes = {n for n in services if n.startswith("larder-")}
        # Each node's admin listener inside the network (the image's 9090).
        self.assertEqual(targets, {n + ":9090" for n in nodes})
        self.assertEqual(job["authorization"]["type"], "Bearer")
        p = services["prometheus"]
        cmd = " ".join(p["command"])
        self.assertIn("> " + job["authorization"]["credentials_file"], cmd,
                      "the token file Prometheus reads is the one the service writes")
        self.assertIn("$$LARDER_ADMIN_TOKEN", cmd)
        self.assertEqual(str(p["environment"]["LARDER_ADMIN_TOKEN"]),
                         str(services["larder-1"]["environment"]["LARDER_ADMIN_TOKEN"]),
                         "Prometheus sends the nodes' admin token")
        mounts = dict(v.rsplit(":", 2)[:2] if v.endswith(":ro") else v.split(":", 1)
                      for v in p["volumes"])
        conf = re.search(r"--config.file=(\S+)", cmd).group(1)
        self.assertEqual(mounts.get("./prometheus/prometheus.yml"), conf)
        g = services["grafana"]
        gm = dict(v.rsplit(":", 2)[:2] for v in g["volumes"])
        with open(os.path.join(GRAFANA, "provisioning", "dashboards", "larder.yml")) as f:
            provider = yaml.safe_load(f)["providers"][0]
        self.assertEqual(gm["./grafana/dashboards"], provider["options"]["path"])
        self.assertEqual(gm["./grafana/provisioning"], "/etc/grafana/provisioning")
        home = g["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
        self.assertEqual(home, provider["options"]["path"] + "/larder.json")
        with open(os.path.join(GRAFANA, "provisioning", "datasources", "prometheus.yml")) as f:
            ds = yaml.safe_load(f)["datasources"][0]
        self.assertEqual(ds["url"], "http://prometheus:9090")
        for path in ("./prometheus/prometheus.yml", "./grafana/dashboards", "./grafana/provisioning"):
            self.assertTrue(os.path.exists(os.path.join(DOCKER, path)), path)

    def test_promtool_accepts_the_config(self):
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool missing (Debian package prometheus)")
        r = subprocess.run([promtool, "check", "config", "--syntax-only",
                            os.path.join(DOCKER, "prometheus", "prometheus.yml")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


# ------------------------------------------------------------------ Kubernetes


class KubernetesManifests(unittest.TestCase):
    def setUp(self):
        need_yaml(self)
        self.docs = k8s_documents()
        self.by_kind = {}
        for path, d in self.docs:
            self.by_kind.setdefault(d["kind"], []).append((path, d))

    def test_files_and_objects(self):
        files = {p for p, _ in self.docs}
        for f in ("namespace.yaml", "redis.yaml", "larder-daemonset.yaml",
                  "larder-statefulset.yaml", "secret.yaml"):
            self.assertIn(f, files)
        for path, d in self.docs:
            with self.subTest(file=path, kind=d.get("kind")):
                self.assertTrue(d.get("apiVersion"))
                self.assertTrue(d["metadata"].get("name"))
                kind = d["kind"]
                self.assertIn(kind, NAMESPACED_KINDS | CLUSTER_KINDS, "unexpected kind")
                if kind in NAMESPACED_KINDS:
                    self.assertEqual(d["metadata"].get("namespace"), "larder")
                else:
                    self.assertNotIn("namespace", d["metadata"])
        self.assertEqual([d["metadata"]["name"] for _, d in self.by_kind["Namespace"]],
                         ["larder"])
        daemonset = self.workload("DaemonSet")
        self.assertFalse(daemonset["spec"]["template"]["spec"].get("hostNetwork", False))
        vols = daemonset["spec"]["template"]["spec"]["volumes"]
        self.assertTrue(any("hostPath" in v for v in vols), "hostPath cache directory")
        sa = [d for _, d in self.by_kind["ServiceAccount"] if d["metadata"]["name"] == "larder"]
        self.assertEqual(len(sa), 1)
        self.assertIn("eks.amazonaws.com/role-arn", sa[0]["metadata"].get("annotations", {}))
        self.assertTrue(self.by_kind.get("Deployment") and self.by_kind.get("StatefulSet"))

    def test_redis_evicts_before_its_limit(self):
        redis = self.workload("Deployment", "redis")
        c = redis["spec"]["template"]["spec"]["containers"][0]
        assert_redis_evicts(self, c["args"], c["resources"]["limits"]["memory"])

    def workload(self, kind, name="larder"):
        found = [d for _, d in self.by_kind.get(kind, []) if d["metadata"]["name"] == name]
        self.assertEqual(len(found), 1, "%s %s" % (kind, name))
        return found[0]

    def larder_container(self, doc):
        return [c for c in doc["spec"]["template"]["spec"]["containers"]
                if c["name"] == "larder"][0]

    def test_references_resolve(self):
        secrets = {d["metadata"]["name"]: set(d.get("stringData", {})) | set(d.get("data", {}))
                   for _, d in self.by_kind["Secret"]}
        accounts = {d["metadata"]["name"] for _, d in self.by_kind["ServiceAccount"]}
        for kind in WORKLOAD_KINDS:
            for path, d in self.by_kind.get(kind, []):
                tmpl = d["spec"]["template"]
                with self.subTest(file=path, workload=d["metadata"]["name"]):
                    labels = tmpl["metadata"]["labels"]
                    for k, v in d["spec"]["selector"]["matchLabels"].items():
                        self.assertEqual(labels.get(k), v, "selector does not match template")
                    sa = tmpl["spec"].get("serviceAccountName")
                    if sa:
                        self.assertIn(sa, accounts)
                    volumes = {v["name"] for v in tmpl["spec"].get("volumes", [])}
                    volumes |= {c["metadata"]["name"]
                                for c in d["spec"].get("volumeClaimTemplates", [])}
                    for c in pod_containers(d):
                        ports = {p["name"] for p in c.get("ports", []) if "name" in p}
                        for m in c.get("volumeMounts", []):
                            self.assertIn(m["name"], volumes)
                        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                            port = (c.get(probe) or {}).get("httpGet", {}).get("port")
                            if isinstance(port, str):
                                self.assertIn(port, ports, probe)
                        defined = set()
                        for e in c.get("env", []):
                            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                            if ref:
                                self.assertIn(ref["name"], secrets)
                                self.assertIn(ref["key"], secrets[ref["name"]], e["name"])
                            for var in re.findall(r"\$\((\w+)\)", str(e.get("value", ""))):
                                self.assertIn(var, defined, "%s uses $(%s) before it is set"
                                              % (e["name"], var))
                            defined.add(e["name"])
        # Every Service selects some workload's pods, on named ports they have.
        pods = [(d["spec"]["template"]["metadata"]["labels"],
                 {p["name"] for c in pod_containers(d) for p in c.get("ports", [])})
                for k in WORKLOAD_KINDS for _, d in self.by_kind.get(k, [])]
        for path, svc in self.by_kind["Service"]:
            with self.subTest(file=path, service=svc["metadata"]["name"]):
                sel = svc["spec"]["selector"]
                matching = [ports for labels, ports in pods
                            if all(labels.get(k) == v for k, v in sel.items())]
                self.assertTrue(matching, "selects no pods")
                for p in svc["spec"]["ports"]:
                    if isinstance(p.get("targetPort"), str):
                        self.assertTrue(all(p["targetPort"] in ports for ports in matching))

    def test_larder_pods(self):
        for kind in ("DaemonSet", "StatefulSet"):
            d = self.workload(kind)
            c = self.larder_container(d)
            env = {e["name"]: e for e in c["env"]}
            with self.subTest(kind=kind):
                for name in ("LARDER_CLIENT_KEY", "LARDER_CLIENT_SECRET", "LARDER_ADMIN_TOKEN",
                             "LARDER_CLUSTER_SECRET"):
                    self.assertIn("secretKeyRef", env[name].get("valueFrom", {}), name)
                for name in ("LARDER_REDIS_URL", "LARDER_NODE_ID", "LARDER_ADVERTISE"):
                    self.assertIn(name, env)
                admin = env["LARDER_ADMIN_LISTEN"]["value"].rsplit(":", 1)[1]
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                self.assertEqual(str(ports["admin"]), admin)
                self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
                ready = c["readinessProbe"]
                if "exec" in ready:  # /readyz needs the admin token: curl sends it
                    command = " ".join(ready["exec"]["command"])
                    self.assertIn("127.0.0.1:%s/readyz" % admin, command)
                    self.assertIn("$LARDER_ADMIN_TOKEN", command)
                else:
                    self.assertEqual(ready["httpGet"]["path"], "/readyz")
                    self.assertEqual(ready["httpGet"]["port"], "admin")
                mounts = {m["mountPath"] for m in c["volumeMounts"]}
                self.assertIn(env["LARDER_CACHE_DIR"]["value"], mounts)
                # Memory sized from the chunk memory bound: at least RAM tier +
                # LARDER_INFLIGHT_SIZE (unset: the RAM tier again) + 1 GiB.
                ram = parse_size(env["LARDER_RAM_CACHE_SIZE"]["value"])
                inflight = env.get("LARDER_INFLIGHT_SIZE")
                inflight = parse_size(inflight["value"]) if inflight else ram
                res = c["resources"]
                self.assertGreaterEqual(parse_size(res["limits"]["memory"]),
                                        ram + inflight + KIB ** 3)
                self.assertEqual(res["requests"]["memory"], res["limits"]["memory"])
                sc = c["securityContext"]
                self.assertTrue(sc["runAsNonRoot"])
                self.assertNotEqual(sc.get("runAsUser"), 0)
                grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                self.assertGreater(grace, 30, "longer than LARDER_SHUTDOWN_GRACE")

    def test_manifest_settings_pass_larder_check(self):
        binary = need_larder(self)
        secrets = {}
        for _, d in self.by_kind["Secret"]:
            secrets[d["metadata"]["name"]] = d.get("stringData", {})
        for kind in ("DaemonSet", "StatefulSet"):
            settings = dict(image_env())
            for e in self.larder_container(self.workload(kind))["env"]:
                if "value" in e:
                    # Kubernetes expands $(VAR) from the pod's own env (POD_IP,
                    # NODE_NAME): stand in a plausible value for it.
                    settings[e["name"]] = re.sub(r"\$\(\w+\)", "10.0.0.1", str(e["value"]))
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    settings[e["name"]] = secrets.get(ref["name"], {}).get(ref["key"], "")
            with self.subTest(kind=kind):
                # secret.yaml's values are public placeholders: refused until
                # the Secret is made with values of one's own.
                r = larder_check(binary, settings)
                self.assertEqual(r.returncode, 2, r.stdout)
                self.assertIn("placeholder", r.stderr)
                own = {k: "own" + v[len("change-me"):] if v.startswith("change-me") else v
                       for k, v in settings.items()}
                r = larder_check(binary, own)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("1 client keys", r.stdout)


# ------------------------------------------------------------------ entrypoint


class RunScript(unittest.TestCase):
    """README's first command, scripts/run.sh, with a config file of the user's."""

    def test_a_config_file_names_the_upstream_not_the_demo(self):
        # run.sh started its demo moto whenever LARDER_UPSTREAM_URL was unset,
        # and pointed larder at it through that variable, which outranks the
        # file: a config file's upstream (and its listen address) was ignored.
        need_larder(self)
        tmp = tempfile.mkdtemp(prefix="larder-runsh-")
        self.addCleanup(shutil.rmtree, tmp, True)
        port, upstream = harness.free_port(), "http://127.0.0.1:%d" % harness.free_port()
        conf = os.path.join(tmp, "larder.conf")
        with open(conf, "w") as f:
            f.write("[server]\nlisten = 127.0.0.1:%d\n[upstream]\nurl = %s\n[admin]\nlisten = off\n"
                    % (port, upstream))
        env = base_env({"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "example",
                        "HOME": tmp})
        for k in ("CI", "LARDER_BUILD_DIR"):
            if k in os.environ:
                env[k] = os.environ[k]
        out_path = os.path.join(tmp, "out")
        with open(out_path, "w") as out:
            p = subprocess.Popen([os.path.join(harness.REPO, "scripts", "run.sh"), "--config", conf],
                                 env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            up = harness.wait_port(port, 120, p)
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        with open(out_path) as f:
            text = f.read()
        self.assertTrue(up, text[-3000:])
        self.assertNotIn("demo upstream", text)
        self.assertNotIn("demo key", text)
        self.assertRegex(text, r"listening on http://127\.0\.0\.1:%d .*; upstream %s"
                         % (port, re.escape(upstream)))


class Entrypoint(unittest.TestCase):
    def setUp(self):
        self.larder = need_larder(self)
        self.tmp = tempfile.mkdtemp(prefix="larder-entrypoint-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.root = os.geteuid() == 0

    def env(self, **settings):
        env = base_env({
            "PATH": os.path.dirname(self.larder) + os.pathsep
            + os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.tmp,
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "example-secret",
            "LARDER_LISTEN": "127.0.0.1:%d" % harness.free_port(),
            "LARDER_ADMIN_LISTEN": "off",
            # A closed port: larder starts without contacting its upstream.
            "LARDER_UPSTREAM_URL": "http://127.0.0.1:%d" % harness.free_port(),
            "LARDER_CLIENT_KEY": "AKENTRYPOINTTEST01",
            "LARDER_CLIENT_SECRET": "entrypoint-test-secret-0123456789abcdef",
            "LARDER_RAM_CACHE_SIZE": "64MiB",
            "LARDER_DISK_CACHE_SIZE": "64MiB",
            "LARDER_WORKERS": "1",
            "LARDER_SHUTDOWN_GRACE": "5",
            "LARDER_CACHE_DIR": os.path.join(self.tmp, "cache"),
        })
        if self.root:
            env["LARDER_ALLOW_ROOT"] = "1"
        for k, v in settings.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def run_entrypoint(self, env, *args, timeout=30):
        return subprocess.run(["sh", ENTRYPOINT] + list(args), env=env, cwd=self.tmp,
                              capture_output=True, text=True, timeout=timeout)

    def test_shell_syntax(self):
        for shell in ("sh", "dash"):
            if shutil.which(shell):
                r = subprocess.run([shell, "-n", ENTRYPOINT], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
        if shutil.which("shellcheck"):
            r = subprocess.run(["shellcheck", "-s", "sh", ENTRYPOINT], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_bad_setting_exits_2_with_larders_message(self):
        r = self.run_entrypoint(self.env(LARDER_LISTEN="nowhere"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("larder: invalid configuration: LARDER_LISTEN", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "cache")),
                         "nothing prepared for a configuration that failed")

    def test_refuses_root_without_allow_root(self):
        if not self.root:
            self.skipTest("runs as root only")
        r = self.run_entrypoint(self.env(LARDER_ALLOW_ROOT=None))
        self.assertEqual(r.returncode, 2)
        self.assertIn("refusing to run larder as root", r.stderr)
        self.assertIn("LARDER_ALLOW_ROOT=1", r.stderr)
        r = self.run_entrypoint(self.env(LARDER_ALLOW_ROOT="yes"))
        self.assertEqual(r.returncode, 2)
        self.assertIn('LARDER_ALLOW_ROOT: expected 1 or unset, got "yes"', r.stderr)

    def test_cache_dir_that_is_a_file(self):
        path = os.path.join(self.tmp, "not-a-dir")
        with open(path, "w"):
            pass
        r = self.run_entrypoint(self.env(LARDER_CACHE_DIR=path))
        self.assertEqual(r.returncode, 2)
        self.assertIn("LARDER_CACHE_DIR", r.stderr)

    def test_cache_dir_not_writable(self):
        if not self.root or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to run as another user")
        cache = os.path.join(self.tmp, "root-owned")
        os.mkdir(cache, 0o755)
        os.chmod(self.tmp, 0o755)
        env = self.env(LARDER_CACHE_DIR=cache, LARDER_ALLOW_ROOT=None)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
               "sh", ENTRYPOINT]
        r = subprocess.run(cmd + ["--version"], env=env, cwd="/", capture_output=True,
                           text=True, timeout=30)
        if r.returncode != 0:
            self.skipTest("the larder build is not executable by uid 65534: " + r.stderr)
        r = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("LARDER_CACHE_DIR", r.stderr)
        self.assertIn("not writable by uid 65534", r.stderr)

    def test_other_commands_go_to_larder(self):
        r = self.run_entrypoint(self.env(LARDER_ALLOW_ROOT=None), "--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("larder "))
        r = self.run_entrypoint(self.env(LARDER_ALLOW_ROOT=None), "serve", "--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("configuration ok", r.stdout)

    def test_starts_creates_cache_dir_and_stops_on_sigterm(self):
        env = self.env(LARDER_CACHE_DIR=os.path.join(self.tmp, "a", "cache"))
        port = int(env["LARDER_LISTEN"].rsplit(":", 1)[1])
        out_path, err_path = os.path.join(self.tmp, "out"), os.path.join(self.tmp, "err")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(["sh", ENTRYPOINT], env=env, cwd=self.tmp,
                                    stdout=out, stderr=err)
        try:
            deadline = time.monotonic() + 20
            up = False
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        up = True
                        break
                except OSError:
                    time.sleep(0.05)
            self.assertTrue(up, "larder did not listen; stderr:\n" + read(err_path))
            with open("/proc/%d/comm" % proc.pid) as f:
                self.assertEqual(f.read().strip(), "larder",
                                 "the entrypoint execs larder (signals reach it directly)")
            self.assertTrue(os.path.isdir(env["LARDER_CACHE_DIR"]))
            self.assertEqual([n for n in os.listdir(env["LARDER_CACHE_DIR"])
                              if n.startswith(".docker-entrypoint")], [], "probe file left")
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(code, 0, "exit status on SIGTERM; stderr:\n" + read(err_path))
        self.assertIn("configuration ok", read(err_path), "the --check summary goes to stderr")
        self.assertNotIn("configuration ok", read(out_path))


if __name__ == "__main__":
    unittest.main()
