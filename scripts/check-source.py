#!/usr/bin/env python3
"""Source rules a compiler does not enforce, checked on every C file of the project.

  scripts/check-source.py [--list]

1. Banned functions (docs/CONTRIBUTING.md says why, and what to use instead):
   a call to one of BANNED in a .c or .h file fails, unless its file and name
   are in scripts/check-source.allow. Comments and string literals are skipped.
2. Layers: a file in one source folder may include headers only from its own
   folder and the folders below it (LAYERS); tests/, loadtest/ may include all.
3. The allocator: in the folders of ALLOC_FOLDERS (those converted so far),
   memory comes from base/alloc.h, not from malloc & co. directly.
4. Private headers: a header of PRIVATE is included only by the files listed
   with it (tests/ aside).

Prints one line per finding (file:line: what, and the replacement) and exits 1
if there was any; prints `check-source: ok (N files)` and exits 0 otherwise.
--list prints the banned names with their replacements.
"""
import fnmatch
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> what to use instead. Keep in step with docs/CONTRIBUTING.md.
BANNED = {}
for names, instead in [
    ("strcpy strcat strncpy strncat", "memcpy with a length you checked, snprintf, or a struct buf"),
    ("sprintf vsprintf", "snprintf / vsnprintf (check the result), or buf_printf"),
    ("gets", "fgets or getline"),
    ("strtok", "strtok_r, or a loop over memchr/strchr"),
    ("atoi atol atoll atof", "strtol / strtoull / strtod with an end pointer and errno"),
    ("rand srand random srandom drand48 lrand48 mrand48",
     "base/splitmix.h (seeded per thread), or RAND_bytes for secrets"),
    ("asctime ctime gmtime localtime asctime_r ctime_r",
     "gmtime_r / localtime_r, then strftime"),
    ("tmpnam tempnam mktemp", "mkstemp / mkdtemp"),
    ("alloca", "a fixed-size array with a checked bound, or the allocator"),
    ("system popen", "fork + execv (or posix_spawn): no shell"),
    ("usleep", "nanosleep"),
    ("inet_ntoa inet_addr gethostbyname gethostbyaddr", "inet_ntop / inet_pton / getaddrinfo"),
    ("bzero bcopy", "memset / memmove"),
]:
    for n in names.split():
        BANNED[n] = instead

# Lowest first; a folder may include itself and anything before it.
LAYERS = ["base", "net", "auth", "config", "store", "cluster", "gateway"]

# Folders that allocate only through base/alloc.h; add one when it is converted.
ALLOC_FOLDERS = ["base"]
RAW_ALLOC = ["malloc", "calloc", "realloc", "reallocarray", "strdup", "strndup"]

# header -> the only files of the libraries that may include it (fnmatch patterns;
# tests and fuzz targets may include any).
PRIVATE = {
    "gateway/request_internal.h": ["gateway/request.c", "gateway/authn.c",
                                   "gateway/passthrough.c"],
    "gateway/admin_internal.h": ["gateway/admin.c", "gateway/admin_jobs.c"],
    "gateway/cli_internal.h": ["gateway/cli.c", "gateway/cli_jobs.c"],
    "gateway/prefetch_internal.h": ["gateway/prefetch.c", "gateway/prefetch_list.c"],
    "gateway/cread.h": ["gateway/cache.c", "gateway/cache_body.c"],
    "store/disk_internal.h": ["store/disk*.c"],
    "store/idmap.h": ["store/*.c"],
    "cluster/cluster_internal.h": ["cluster/cluster*.c", "cluster/inval_msg.c"],
    "auth/creds_provider.h": ["auth/creds*.c"],
    "config/load.h": ["config/*.c"],
}
PRIVATE_INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+/[a-z_]+\.h)"')

RAW_CALL = re.compile(r"(?<![\w.>])(" + "|".join(RAW_ALLOC) + r")\s*\(")
CALL = re.compile(r"(?<![\w.>])(" + "|".join(sorted(BANNED)) + r")\s*\(")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def c_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z", "*.c", "*.h"], cwd=ROOT, check=True,
                             capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = []
        for d, subdirs, names in os.walk(ROOT):
            subdirs[:] = [s for s in subdirs if not s.startswith((".", "build"))
                          and s != "node_modules"]
            files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names
                      if n.endswith((".c", ".h"))]
    return sorted(f for f in files if os.path.isfile(os.path.join(ROOT, f)))


def code_only(text):
    """text with comments and string/char literals blanked, line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def load_allow():
    allow = set()
    path = os.path.join(ROOT, "scripts", "check-source.allow")
    if os.path.exists(path):
        for line in open(path):
            line = line.split("#", 1)[0].split()
            if len(line) == 2:
                allow.add((line[0], line[1]))
    return allow


def main():
    if sys.argv[1:] == ["--list"]:
        for n in sorted(BANNED):
            print("%-14s %s" % (n, BANNED[n]))
        return 0
    allow, used_allow = load_allow(), set()
    findings = []
    files = c_files()
    for f in files:
        text = open(os.path.join(ROOT, f), encoding="utf-8", errors="replace").read()
        code = code_only(text)
        for no, line in enumerate(code.split("\n"), 1):
            for m in CALL.finditer(line):
                name = m.group(1)
                if (f, name) in allow:
                    used_allow.add((f, name))
                    continue
                findings.append("%s:%d: %s() is banned: use %s" % (f, no, name, BANNED[name]))
        top = f.split("/", 1)[0]
        if top in ALLOC_FOLDERS and f != "base/alloc.c":
            for no, line in enumerate(code.split("\n"), 1):
                for m in RAW_CALL.finditer(line):
                    findings.append("%s:%d: %s() directly: %s/ allocates through base/alloc.h "
                                    "(mem_* or x*)" % (f, no, m.group(1), top))
        if top in LAYERS:
            for no, line in enumerate(text.split("\n"), 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in LAYERS and LAYERS.index(m.group(1)) > LAYERS.index(top):
                    findings.append("%s:%d: %s/ may not include %s/ (layers, lowest first: %s)"
                                    % (f, no, top, m.group(1), " <- ".join(LAYERS)))
        if top in LAYERS:
            for no, line in enumerate(text.split("\n"), 1):
                m = PRIVATE_INCLUDE.match(line)
                if m and m.group(1) in PRIVATE and \
                        not any(fnmatch.fnmatchcase(f, p) for p in PRIVATE[m.group(1)]):
                    findings.append("%s:%d: %s is private to %s" % (f, no, m.group(1),
                                                                    ", ".join(PRIVATE[m.group(1)])))
    for f, name in sorted(allow - used_allow):
        findings.append("scripts/check-source.allow: %s %s is not used any more: remove the line"
                        % (f, name))
    for line in findings:
        print(line)
    if findings:
        print("check-source: %d finding(s) in %d files" % (len(findings), len(files)))
        return 1
    print("check-source: ok (%d files)" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
