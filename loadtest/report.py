#!/usr/bin/env python3
"""Tables, target checks and pictures for loadtest/run.sh.

  report.py annotate FILE key=value...   add fields to one loadgen JSON result
  report.py table DIR SCENARIO            print the scenario's table
  report.py summary DIR                   markdown: every table and the targets
  report.py plots DIR                     gnuplot PNGs (a, b, c, f) into DIR
  report.py compare A_DIRS -- B_DIRS      markdown: each run's median [min-max]
                                          over the A runs and the B runs, and B/A
  report.py sidebyside DIRS...            markdown: issue 15's table (table.sh), each
                                          figure's median [min-max] per configuration
"""
import glob
import json
import os
import re
import subprocess
import sys


def load(d, scen):
    runs = {}
    def natural(f):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", os.path.basename(f))]

    for f in sorted(glob.glob(os.path.join(d, f"{scen}-*.json")), key=natural):
        if f.endswith("policy_sim.json"):
            continue
        with open(f) as fh:
            r = json.load(fh)
        runs[os.path.basename(f)[len(scen) + 1:-5]] = r
    return runs


def annotate(path, pairs):
    with open(path) as fh:
        r = json.load(fh)
    for p in pairs:
        k, v = p.split("=", 1)
        try:
            v = int(v)
        except ValueError:
            try:
                v = float(v)
            except ValueError:
                pass
        r[k] = v
    with open(path, "w") as fh:
        json.dump(r, fh, indent=1)


def fmt(v, nd=1):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


COLS = ["run", "conc", "objects", "obj/s", "MB/s", "p50 ms", "p99 ms", "p999 ms", "max ms",
        "errors", "hits", "upstream GETs", "CPU s/GB", "VmHWM MiB"]


def row(r):
    t = r["total"]
    cpu = r.get("target_cpu_s_per_gb")
    hwm = r.get("target_vmhwm_kib")
    return [r["label"], r["concurrency"], t["objects"], fmt(t["objects_per_s"]), fmt(t["mb_per_s"]),
            fmt(t["p50_ms"], 2), fmt(t["p99_ms"], 2), fmt(t["p999_ms"], 2), fmt(t["max_ms"], 1),
            t["errors"], t["cache_hit"], r.get("upstream_gets", "-"),
            fmt(cpu, 2) if cpu is not None else "-", fmt(hwm / 1024) if hwm else "-"]


def md_table(header, rows):
    out = ["| " + " | ".join(map(str, header)) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(out)


def text_table(header, rows):
    w = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).rjust(n) if i else str(x).ljust(n) for i, (x, n) in
                       enumerate(zip(r, w))) for r in [header] + rows]
    return "\n".join(lines)


def scenario_rows(d, scen):
    runs = load(d, scen)
    return [row(r) for k, r in runs.items() if "warmup" not in k]


def t_table(d, markdown):
    """t: the DataLoader's samples/s per epoch, larder against direct."""
    runs = load(d, "t")
    direct = {e["epoch"]: e for e in runs.get("direct", {}).get("epochs", [])}
    hdr = ["run", "workers", "epoch", "samples", "seconds", "samples/s", "vs direct", "errors",
           "hits", "upstream GETs", "client CPU s"]
    rows = []
    for label, r in runs.items():
        for e in r.get("epochs", []):
            dr = direct.get(e["epoch"])
            rel = f"{e['samples_per_s'] / dr['samples_per_s']:.2f}x" if dr else "-"
            rows.append([label, r["workers"], e["epoch"], e["samples"], fmt(e["seconds"], 2),
                         fmt(e["samples_per_s"]), rel, e["errors"], e["hits"],
                         r.get(f"upstream_gets_epoch{e['epoch']}", "-"),
                         fmt(e.get("client_cpu_s"), 2)])
    if not rows:
        return ""
    return md_table(hdr, rows) if markdown else text_table(hdr, rows)


def l_table(d, markdown):
    """l: one reader (and a DataLoader) in a known order, each against its direct run."""
    runs = load(d, "l")
    hdr = ["run", "workers", "objects", "seconds", "objects/s", "vs direct", "hits",
           "upstream GETs", "errors"]
    rows = []
    for label, r in runs.items():
        dr = runs.get("dataloader4-direct" if label.startswith("dataloader4") else "direct")
        rel = f"{r['objects_per_s'] / dr['objects_per_s']:.2f}x" if dr else "-"
        rows.append([label, r["workers"], r["objects"], fmt(r["seconds"], 2),
                     fmt(r["objects_per_s"]), rel, r["hits"], r.get("upstream_gets", "-"),
                     r["errors"]])
    if not rows:
        return ""
    return md_table(hdr, rows) if markdown else text_table(hdr, rows)


def table(d, scen, markdown=False):
    if scen == "t":
        return t_table(d, markdown)
    if scen == "l":
        return l_table(d, markdown)
    rows = scenario_rows(d, scen)
    extra = ""
    if scen == "f":
        extra = f_table(d, markdown)
    if not rows:
        return ""
    t = md_table(COLS, rows) if markdown else text_table(COLS, rows)
    return t + ("\n\n" + extra if extra else "")


def f_series(d):
    runs = load(d, "f")
    out = {}
    for pol in ("subset", "lru"):
        hr, up = [], []
        for e in (1, 2, 3):
            r = runs.get(f"{pol}-epoch{e}")
            if r:
                hr.append(r["total"]["hit_ratio"])
                up.append(r.get("upstream_gets"))
        out[pol] = (hr, up)
    sim = None
    p = os.path.join(d, "f-policy_sim.json")
    if os.path.exists(p):
        with open(p) as fh:
            sim = json.load(fh)
    return out, sim


def f_table(d, markdown):
    out, sim = f_series(d)
    hdr = ["hit ratio", "epoch 1", "epoch 2", "epoch 3"]
    rows = []
    for pol, (hr, up) in out.items():
        if hr:
            rows.append([f"larder {pol} (x-larder-cache)"] + [f"{x:.3f}" for x in hr])
            rows.append([f"larder {pol} upstream GETs"] + [str(x) for x in up])
    if sim:
        for pol in ("subset", "lru"):
            rows.append([f"policy_sim {pol}"] + [f"{x:.3f}" for x in sim["policies"][pol]["hit_ratio"]])
        rows.append(["ideal (cache/dataset)", "0.000", f"{sim['ideal']:.3f}", f"{sim['ideal']:.3f}"])
    return md_table(hdr, rows) if markdown else text_table(hdr, rows)


def get(d, scen, label):
    p = os.path.join(d, f"{scen}-{label}.json")
    if not os.path.exists(p):
        return None
    with open(p) as fh:
        return json.load(fh)


def targets(d):
    """[(target, measured, met or None)]"""
    res = []

    def ratio(a, b):
        return a / b if a and b else None

    ls, ns = get(d, "e", "larder-small"), get(d, "e", "nginx-small")
    if ls and ns:
        tr = ratio(ls["total"]["mb_per_s"], ns["total"]["mb_per_s"])
        cr = ratio(ls.get("target_cpu_s_per_gb"), ns.get("target_cpu_s_per_gb"))
        p99l, p99n = ls["total"]["p99_ms"], ns["total"]["p99_ms"]
        met = tr is not None and cr is not None and tr >= 1.0 and cr <= 0.8 and p99l <= p99n
        res.append(("warm small-object hits: >= 1.0x nginx proxy_cache throughput, <= 0.8x its CPU s/GB, p99 no worse (e, c=32)",
                    f"throughput {tr:.2f}x ({ls['total']['mb_per_s']:.0f} vs {ns['total']['mb_per_s']:.0f} MB/s); "
                    f"CPU s/GB {cr:.2f}x ({ls.get('target_cpu_s_per_gb'):.2f} vs {ns.get('target_cpu_s_per_gb'):.2f}); "
                    f"p99 {p99l:.2f} vs {p99n:.2f} ms", met))
    ll, nl = get(d, "e", "larder-large"), get(d, "e", "nginx-large")
    if ll and nl:
        tr = ratio(ll["total"]["mb_per_s"], nl["total"]["mb_per_s"])
        res.append(("large-object hits: >= 1.0x nginx proxy_cache throughput (e, c=32)",
                    f"{tr:.2f}x ({ll['total']['mb_per_s']:.0f} vs {nl['total']['mb_per_s']:.0f} MB/s)",
                    tr >= 1.0))
    parts, worst = [], None
    for c in (8, 16, 32, 64):
        lc, dc = get(d, "a", f"larder-cold-c{c}"), get(d, "a", f"direct-c{c}")
        if lc and dc:
            r = ratio(lc["total"]["objects_per_s"], dc["total"]["objects_per_s"])
            parts.append(f"c={c}: {r:.2f}x")
            worst = r if worst is None else min(worst, r)
    if parts:
        res.append(("cold small-object epoch: >= 0.95x direct at the same concurrency (a)",
                    ", ".join(parts), worst >= 0.95))
    lw, dc = get(d, "a", "larder-warm-c32"), get(d, "a", "direct-c32")
    if lw and dc:
        r = ratio(lw["total"]["objects_per_s"], dc["total"]["objects_per_s"])
        res.append(("warm epoch: >= 20x direct at 20 ms and concurrency 32 (a)",
                    f"{r:.1f}x ({lw['total']['objects_per_s']:.0f} vs {dc['total']['objects_per_s']:.0f} objects/s)",
                    r >= 20))
    lc, dc = get(d, "c", "larder-cold-256MiB-r1"), get(d, "c", "direct-256MiB-r1")
    if lc and dc:
        r = ratio(lc["total"]["mb_per_s"], dc["total"]["mb_per_s"])
        res.append(("one reader of a cold 256 MiB shard, origin capped at 100 MB/s: >= 4x direct (c)",
                    f"{r:.2f}x ({lc['total']['mb_per_s']:.0f} vs {dc['total']['mb_per_s']:.0f} MB/s)", r >= 4))
    sl, sn = get(d, "d", "larder"), get(d, "d", "nginx")
    if sl and sn:
        tl, tn = sl["total"]["max_ms"], sn["total"]["max_ms"]
        ok = sl.get("upstream_gets") == sl.get("chunks") and tl <= 0.7 * tn
        res.append(("storm: one upstream GET per chunk, time to last byte <= 0.7x nginx's (d)",
                    f"larder {sl.get('upstream_gets')} GETs for {sl.get('chunks')} chunks, nginx {sn.get('upstream_gets')}; "
                    f"last byte {tl / 1000:.2f} s vs {tn / 1000:.2f} s ({tl / tn:.2f}x)", ok))
    out, _ = f_series(d)
    hr = out.get("subset", ([], []))[0]
    if len(hr) >= 3:
        res.append(("dataset twice the cache: epochs 2-3 hit ratio >= 0.45 (f, subset)",
                    f"{hr[1]:.3f}, {hr[2]:.3f} (lru: {', '.join(f'{x:.3f}' for x in out['lru'][0][1:])})",
                    min(hr[1:]) >= 0.45))
    ll, ld = get(d, "l", "larder-lookahead"), get(d, "l", "direct")
    if ll and ld:
        r = ratio(ll["objects_per_s"], ld["objects_per_s"])
        res.append(("one reader of 300 cold 115 KiB objects in a known order: >= 8x direct, one "
                    "upstream GET per object (l, lookahead)",
                    f"{r:.1f}x ({ll['objects_per_s']:.0f} vs {ld['objects_per_s']:.0f} objects/s), "
                    f"{ll.get('upstream_gets')} upstream GETs for {ll['objects']} objects",
                    r >= 8 and ll.get("upstream_gets") == ll["objects"]))
    m = get(d, "m", "c1000")
    if m and m.get("target_vmhwm_kib"):
        ram = m.get("ram_tier_bytes", 0) / 2**20
        hwm = m["target_vmhwm_kib"] / 1024
        res.append(("RSS <= RAM tier + 64 MiB at 1,000 open connections (m)",
                    f"VmHWM {hwm:.0f} MiB, RAM tier {ram:.0f} MiB (+{hwm - ram:.0f} MiB)",
                    hwm <= ram + 64))
    return res


TITLES = {
    "a": "a: random reads of small objects, one epoch",
    "d": "d: coalescing storm (64 clients, one cold object)",
    "e": "e: hit-path ceiling, concurrency 32",
    "c": "c: sequential shards, origin capped per connection",
    "b": "b: three epochs in new random orders (concurrency 32)",
    "f": "f: dataset twice the RAM cache, three epochs",
    "m": "m: memory at 1,000 open connections",
    "w": "w: 1,000 readers of cold objects at once, one prefix with a window of 16",
    "t": "t: PyTorch DataLoader (boto3 per worker), epochs 1 and 2",
    "l": "l: a reader of cold small objects in a known order, with and without lookahead",
}


def summary(d):
    out = []
    for s in "adecbfmwtl":
        t = table(d, s, markdown=True)
        if t:
            out.append(f"### {TITLES[s]}\n\n{t}\n")
    rows = [[t, m, "met" if ok else "NOT met"] for t, m, ok in targets(d)]
    if rows:
        out.append("### Targets\n\n" + md_table(["target", "measured", ""], rows) + "\n")
    return "\n".join(out)


def plots(d):
    pngs = []
    gp = []
    # a: objects/s vs concurrency
    runs = load(d, "a")
    if runs:
        series = ["direct", "larder-cold", "larder-warm", "nginx-cold", "nginx-warm"]
        with open(os.path.join(d, "a.dat"), "w") as fh:
            fh.write("# conc " + " ".join(series) + "\n")
            concs = sorted({int(m.group(1)) for k in runs for m in [re.search(r"-c(\d+)$", k)] if m})
            for c in concs:
                vals = [runs.get(f"{s}-c{c}", {}).get("total", {}).get("objects_per_s", "NaN") for s in series]
                fh.write(f"{c} " + " ".join(str(v) for v in vals) + "\n")
        gp.append(f"""set output '{d}/a-throughput.png'
set title 'a: random 115 KiB reads, one epoch (origin 20 ms + 100 MB/s per conn.)'
set xlabel 'concurrency'; set ylabel 'objects/s (log)'; set logscale xy 2; set logscale y 10
set xtics ({", ".join(str(c) for c in concs)}); set key top left
plot for [i=2:6] '{d}/a.dat' using 1:i with linespoints lw 2 pt 7 title columnhead(i)
unset logscale; set xtics autofreq
""")
        # columnhead needs the header as first row without '#'
        with open(os.path.join(d, "a.dat")) as fh:
            txt = fh.read().replace("# conc", "conc", 1)
        with open(os.path.join(d, "a.dat"), "w") as fh:
            fh.write(txt)
        pngs.append("a-throughput.png")
    runs = load(d, "b")
    if runs:
        with open(os.path.join(d, "b.dat"), "w") as fh:
            fh.write("epoch larder nginx direct\n")
            for e in (1, 2, 3):
                lv = runs.get(f"larder-epoch{e}", {}).get("total", {}).get("mb_per_s", "NaN")
                nv = runs.get(f"nginx-epoch{e}", {}).get("total", {}).get("mb_per_s", "NaN")
                dv = runs.get("direct-epoch1", {}).get("total", {}).get("mb_per_s", "NaN")
                fh.write(f"{e} {lv} {nv} {dv}\n")
        gp.append(f"""set output '{d}/b-epochs.png'
set title 'b: per-epoch throughput, 115 KiB objects, concurrency 32'
set xlabel 'epoch'; set ylabel 'MB/s (log)'; set logscale y 10; set xtics 1; set key top left
set style data histogram; set style histogram clustered gap 1; set style fill solid 0.8 border -1
plot '{d}/b.dat' using 2:xtic(1) title 'larder', '' using 3 title 'nginx proxy\\_cache', '' using 4 title 'direct (epoch 1 only, same every epoch)'
set style data lines; unset logscale; set xtics autofreq
""")
        pngs.append("b-epochs.png")
    runs = load(d, "c")
    if runs:
        sizes = sorted({int(m.group(1)) for k in runs for m in [re.search(r"-(\d+)MiB-", k)] if m})
        with open(os.path.join(d, "c.dat"), "w") as fh:
            cols = [f"{t}-r{r}" for r in (1, 8) for t in ("direct", "larder-cold", "larder-warm")]
            fh.write("size " + " ".join(cols) + "\n")
            for s in sizes:
                vals = []
                for r in (1, 8):
                    for t in ("direct", "larder-cold", "larder-warm"):
                        vals.append(runs.get(f"{t}-{s}MiB-r{r}", {}).get("total", {}).get("mb_per_s", "NaN"))
                fh.write(f"{s} " + " ".join(str(v) for v in vals) + "\n")
        gp.append(f"""set output '{d}/c-shards.png'
set title 'c: sequential shards, origin 20 ms + 100 MB/s per connection'
set xlabel 'shard size (MiB)'; set ylabel 'MB/s (log)'; set logscale xy 2; set logscale y 10
set key outside right
plot for [i=2:7] '{d}/c.dat' using 1:i with linespoints lw 2 pt 7 title columnhead(i)
unset logscale; set key inside
""")
        pngs.append("c-shards.png")
    out, sim = f_series(d)
    if any(v[0] for v in out.values()):
        with open(os.path.join(d, "f.dat"), "w") as fh:
            fh.write("epoch larder-subset larder-lru sim-subset sim-lru ideal\n")
            for e in (1, 2, 3):
                vals = []
                for pol in ("subset", "lru"):
                    hr = out[pol][0]
                    vals.append(hr[e - 1] if len(hr) >= e else "NaN")
                for pol in ("subset", "lru"):
                    vals.append(sim["policies"][pol]["hit_ratio"][e - 1] if sim else "NaN")
                vals.append(0 if e == 1 else (sim["ideal"] if sim else "NaN"))
                fh.write(f"{e} " + " ".join(str(v) for v in vals) + "\n")
        gp.append(f"""set output '{d}/f-hit-ratio.png'
set title 'f: hit ratio per epoch, dataset = 2 x RAM cache'
set xlabel 'epoch'; set ylabel 'hit ratio'; set yrange [0:0.6]; set xtics 1; set key top left
set style data histogram; set style histogram clustered gap 1; set style fill solid 0.8 border -1
plot '{d}/f.dat' using 2:xtic(1) title 'larder subset', '' using 3 title 'larder lru', '' using 4 title 'policy\\_sim subset', '' using 5 title 'policy\\_sim lru', '' using 6 title 'ideal'
""")
        pngs.append("f-hit-ratio.png")
    if not gp:
        return
    script = "set terminal pngcairo size 900,560 font ',11'\nset grid\n" + "\n".join(gp)
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    except Exception:
        script = script.replace("pngcairo", "png")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    for p in pngs:
        print(f"plot: {os.path.join(d, p)}")


def spread(vals, nd):
    """median [min-max] of a list of numbers (None when empty)."""
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return None, "-"
    n = len(vals)
    med = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    return med, f"{med:.{nd}f} [{vals[0]:.{nd}f}-{vals[-1]:.{nd}f}]"


def compare(a_dirs, b_dirs):
    """The same runs measured several times with two builds (A, B), interleaved
    by the caller: per run, the median and spread of objects/s and of the
    server's CPU seconds per GB, and B's median over A's."""
    figures = [("obj/s", lambda r: r["total"]["objects_per_s"], 1),
               ("CPU s/GB", lambda r: r.get("target_cpu_s_per_gb"), 2)]
    out = []
    for scen in "adecbfmwgt":
        names = []
        for d in a_dirs + b_dirs:
            for n in load(d, scen):
                if n not in names:
                    names.append(n)
        if not names:
            continue
        header = ["run"]
        for f, _, _ in figures:
            header += [f"A {f}", f"B {f}", "B/A"]
        rows = []
        for n in names:
            row_ = [f"{scen}-{n}"]
            for _, get_, nd in figures:
                meds = []
                for dirs in (a_dirs, b_dirs):
                    vals = []
                    for d in dirs:
                        r = load(d, scen).get(n)
                        if r is not None:
                            try:
                                vals.append(get_(r))
                            except (KeyError, TypeError):
                                pass
                    med, text = spread(vals, nd)
                    meds.append(med)
                    row_.append(text)
                row_.append(f"{meds[1] / meds[0]:.2f}" if meds[0] and meds[1] is not None else "-")
            rows.append(row_)
        out.append(f"### {scen} (A: {len(a_dirs)} runs, B: {len(b_dirs)} runs)\n")
        out.append(md_table(header, rows))
        out.append("")
    return "\n".join(out)


def run_config(d):
    """The run's configuration and whether it was pinned: "defaults unpinned",
    "tuned pinned", ... (LOADTEST_PIN can turn either way)."""
    p = os.path.join(d, "config.json")
    if not os.path.exists(p):
        return "tuned pinned"
    with open(p) as fh:
        cfg = json.load(fh)
    return "%s %s" % (cfg.get("config", "tuned"), "pinned" if cfg.get("sut_cpu") else "unpinned")


SIDE_ORDER = ("defaults unpinned", "defaults pinned", "tuned pinned", "tuned unpinned")


def side_figures(d):
    """One run folder's figures for the side-by-side table: {name: (value,
    detail numbers)}; a ratio is larder's over its peer's in the same run."""
    out = {}

    def tot(r, k):
        return r["total"][k] if r else None

    def cpu(r):
        return r.get("target_cpu_s_per_gb") if r else None

    def put(name, a, b, extra=()):
        if a is not None and b:
            out[name] = (a / b, (a, b) + tuple(extra))

    def client_cpu(r):
        """loadgen's own CPU s per GB it received."""
        b = tot(r, "bytes")
        return r["loadgen_cpu_s"] / (b / 1e9) if b and "loadgen_cpu_s" in r else None

    ls, ns = get(d, "e", "larder-small"), get(d, "e", "nginx-small")
    put("warm_ops", tot(ls, "objects_per_s"), tot(ns, "objects_per_s"))
    put("warm_cpu", cpu(ls), cpu(ns))
    fs = get(d, "e", "floor-small")
    put("floor_cpu", cpu(fs), cpu(ns))
    put("warm_cpu_floor", cpu(ls), cpu(fs))
    put("floor_ops", tot(fs, "objects_per_s"), tot(ns, "objects_per_s"))
    put("warm_client_cpu", client_cpu(ls), client_cpu(ns))
    for c in (4, 8, 16, 32, 64):
        lc, dc = get(d, "a", f"larder-cold-c{c}"), get(d, "a", f"direct-c{c}")
        put(f"cold_c{c}", tot(lc, "objects_per_s"), tot(dc, "objects_per_s"))
        nc = get(d, "a", f"nginx-cold-c{c}")
        put(f"coldcpu_c{c}", cpu(lc), cpu(nc), (cpu(dc),))
        st = get(d, "a", f"larder-steady-c{c}")
        put(f"steady_c{c}", tot(st, "objects_per_s"), tot(dc, "objects_per_s"))
        put(f"steadycpu_c{c}", cpu(st), cpu(nc), (cpu(dc),))
    sl, sn = get(d, "d", "larder"), get(d, "d", "nginx")
    if sl and sn:
        put("storm", tot(sl, "max_ms") / 1000, tot(sn, "max_ms") / 1000,
            (sl.get("upstream_gets"), sl.get("chunks"), sl.get("fill_s"), sn.get("fill_s")))
        put("storm_cpu", cpu(sl), cpu(sn))
    sizes = sorted({int(m.group(1)) for k in load(d, "c") for m in [re.search(r"-(\d+)MiB-r1$", k)] if m})
    if sizes:
        s = sizes[-1]
        lc, dc = get(d, "c", f"larder-cold-{s}MiB-r1"), get(d, "c", f"direct-{s}MiB-r1")
        put("shard", tot(lc, "mb_per_s"), tot(dc, "mb_per_s"), (s,))
    return out


SIDE_ROWS = [
    # (figure, key, target, how the detail reads)
    ("warm 115 KiB hits, objects/s vs nginx (e, c=32)", "warm_ops", ">= 1.2x", "{:.0f} vs {:.0f} obj/s"),
    ("warm 115 KiB hits, server CPU-s/GB vs nginx (e)", "warm_cpu", "<= 0.8x", "{:.2f} vs {:.2f}"),
    ("the same hits from the floor (loadtest/floor.c), CPU-s/GB vs nginx (e)", "floor_cpu", "",
     "{:.2f} vs {:.2f}"),
    ("warm 115 KiB hits, larder's CPU-s/GB vs the floor's (e)", "warm_cpu_floor", "",
     "{:.2f} vs {:.2f}"),
    ("the floor's objects/s vs nginx (e): a server that copies, with this client", "floor_ops", "",
     "{:.0f} vs {:.0f} obj/s"),
    ("the client's CPU-s/GB receiving larder's hits vs nginx's (e)", "warm_client_cpu", "",
     "{:.2f} vs {:.2f}"),
] + [(f"cold epoch of 115 KiB objects vs direct, c={c} (a)", f"cold_c{c}", ">= 0.95x",
      "{:.0f} vs {:.0f} obj/s") for c in (4, 8, 16, 32, 64)] + [
    (f"cold epoch, server CPU-s/GB vs nginx, c={c} (a)", f"coldcpu_c{c}", "<= 1.0x",
     "{:.2f} vs {:.2f}; the origin's own {:.2f}") for c in (4, 8, 16, 32, 64)] + [
    (f"cold epoch through a full RAM tier (a cache that has been running) vs direct, c={c} (a)",
     f"steady_c{c}", "", "{:.0f} vs {:.0f} obj/s") for c in (4, 8, 16, 32, 64)] + [
    (f"the same epoch, server CPU-s/GB vs nginx's cold epoch, c={c} (a)", f"steadycpu_c{c}", "",
     "{:.2f} vs {:.2f}; the origin's own {:.2f}") for c in (4, 8, 16, 32, 64)] + [
    ("64 clients x one cold object, last byte vs nginx (d)", "storm", "<= 0.7x",
     "{:.2f} vs {:.2f} s; {:.0f} GETs for {:.0f} chunks; upstream fill {:.2f} vs {:.2f} s"),
    ("64 clients x one cold object, server CPU-s/GB vs nginx (d)", "storm_cpu", "",
     "{:.2f} vs {:.2f}"),
    ("one reader of a cold shard, MB/s vs direct (c)", "shard", ">= 6x", "{:.0f} vs {:.0f} MB/s ({:.0f} MiB)"),
]


def sidebyside(dirs):
    """Issue 15's table: per configuration and pinning, each figure's
    median [min-max] over the runs, and the median of its parts."""
    configs = {}
    for d in dirs:
        configs.setdefault(run_config(d), []).append(d)
    order = [c for c in SIDE_ORDER if c in configs] + \
        sorted(c for c in configs if c not in SIDE_ORDER)
    figs = {d: side_figures(d) for d in dirs}
    header = ["figure"] + [f"{c} ({len(configs[c])} runs)" for c in order] + ["target"]
    rows = []
    for title, key, target, detail in SIDE_ROWS:
        cells, seen = [], False
        for c in order:
            got = [figs[d][key] for d in configs[c] if key in figs[d]]
            if not got:
                cells.append("-")
                continue
            seen = True
            nd = 2
            med, text = spread([v for v, _ in got], nd)
            text = text.replace(" [", "x [", 1)
            if detail:
                parts = []
                for i in range(len(got[0][1])):
                    vals = [p[i] for _, p in got if p[i] is not None]
                    if vals and all(isinstance(v, (int, float)) for v in vals):
                        m, _ = spread(vals, 2)
                        parts.append(m)
                    else:
                        parts.append(vals[0] if vals else "-")
                try:
                    text += " (" + detail.format(*parts) + ")"
                except (ValueError, IndexError, TypeError):
                    pass
            cells.append(text)
        if seen:
            rows.append([title] + cells + [target])
    modes = sorted({json.load(open(os.path.join(d, "config.json"))).get("mode", "?")
                    for d in dirs if os.path.exists(os.path.join(d, "config.json"))})
    out = [f"Side by side ({', '.join(modes) or '?'} mode): median [min-max] over interleaved runs; "
           "a ratio is larder's over its peer's in the same run (details: medians).", "",
           md_table(header, rows), ""]
    for c in order:
        out.append(f"- {c}: " + ", ".join(os.path.basename(d.rstrip("/")) for d in configs[c]))
    return "\n".join(out)


def main():
    cmd = sys.argv[1]
    if cmd == "annotate":
        annotate(sys.argv[2], sys.argv[3:])
    elif cmd == "table":
        t = table(sys.argv[2], sys.argv[3])
        if t:
            print(t)
    elif cmd == "summary":
        print(summary(sys.argv[2]))
    elif cmd == "plots":
        plots(sys.argv[2])
    elif cmd == "sidebyside":
        print(sidebyside(sys.argv[2:]))
    elif cmd == "compare":
        args = sys.argv[2:]
        if "--" not in args:
            sys.exit(__doc__)
        i = args.index("--")
        print(compare(args[:i], args[i + 1:]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
