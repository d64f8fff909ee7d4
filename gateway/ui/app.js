// larder's dashboard: polls this node's admin API and draws what it says.
// Everything from the API reaches the page through textContent, never as
// HTML. The token comes from the URL fragment (never sent to a server) or
// the form, and is kept in sessionStorage: this tab only.
"use strict";

const POLL_MS = 2000;
const HISTORY = 150;             // samples kept for the charts (5 minutes)
const $ = (id) => document.getElementById(id);

let token = null;
let timer = null;
let prev = null;                 // the last /admin/stats sample, for rates
const history = [];              // {t, hit, ram, nvme, upReq, upErr}

function takeTokenFromFragment() {
  const m = /(?:^|[#&])token=([^&]*)/.exec(location.hash);
  if (!m) return;
  let t = m[1];
  try { t = decodeURIComponent(t); } catch (e) { /* a '%' that encodes nothing: as it is */ }
  sessionStorage.setItem("larder-token", t);
  // Out of the address bar, the history and any screenshot of it.
  history_replace(location.pathname + location.search);
}

function history_replace(url) {
  try { window.history.replaceState(null, "", url); } catch (e) { /* file: or sandboxed */ }
}

async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
  if (r.status === 401 || r.status === 403) {
    const err = new Error("the admin token was refused (" + r.status + ")");
    err.auth = true;
    throw err;
  }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

// ---- formatting ----

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 2 : 1) : String(n)) + " " + u[i];
}
function pct(x) { return x === null || x === undefined ? "-" : (100 * x).toFixed(1) + " %"; }
function count(n) { return n === null || n === undefined ? "-" : Number(n).toLocaleString("en"); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fillTable(id, rows, columns) {
  const body = $(id).tBodies[0];
  body.replaceChildren();
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", "none", "empty");
    td.colSpan = $(id).tHead ? $(id).tHead.rows[0].cells.length : 2;
    tr.append(td);
    body.append(tr);
    return;
  }
  for (const row of rows) {
    const tr = el("tr");
    for (const c of columns) {
      const v = c(row);
      if (v instanceof Node) { const td = el("td"); td.append(v); tr.append(td); }
      else tr.append(el("td", v, typeof v === "string" && /^[\d.,-]/.test(v) ? "num" : ""));
    }
    body.append(tr);
  }
}

// ---- sections ----

function renderTiers(cache) {
  const box = $("tiers");
  box.replaceChildren();
  const tiers = [["RAM", cache.ram], ["NVMe", cache.nvme]];
  for (const [name, t] of tiers) {
    const card = el("div", null, "card");
    card.dataset.tier = name.toLowerCase();
    card.append(el("h3", name));
    if (!t.capacity_bytes) {
      card.append(el("div", "not configured", "muted"));
      box.append(card);
      continue;
    }
    const share = t.used_bytes / t.capacity_bytes;
    card.append(el("div", bytes(t.used_bytes) + " of " + bytes(t.capacity_bytes) + " (" + pct(share) + ")"));
    const bar = el("div", null, "bar"), fill = el("div");
    fill.style.width = Math.min(100, 100 * share).toFixed(1) + "%";
    bar.append(fill);
    card.append(bar);
    card.append(el("div", count(t.chunks) + " chunks, " + count(t.hits) + " chunk hits", "muted"));
    if (t.up === false) card.append(el("div", "down: switched off after errors", "error"));
    box.append(card);
  }
  const card = el("div", null, "card");
  card.append(el("h3", "In flight"));
  card.append(el("div", count(cache.inflight_fetches) + " fetches"));
  card.append(el("div", count(cache.metadata_objects) + " objects known", "muted"));
  box.append(card);
}

function renderUpstream(s, rates) {
  const rows = [
    ["requests", count(s.upstream.requests), rates ? rates.upReq.toFixed(1) + " /s" : "-"],
    ["errors", count(s.upstream.errors), rates ? rates.upErr.toFixed(1) + " /s" : "-"],
    ["retries", count(s.upstream.retries), ""],
    ["bytes received", bytes(s.upstream.bytes), ""],
    ["chunks asked of other nodes", s.peer_fetches ? count(s.peer_fetches.requests) : "-", ""],
    ["served to clients", bytes(s.total.bytes_served), ""],
    ["upstream bytes saved", bytes(s.total.upstream_bytes_saved), ""],
    ["object hit ratio (since start)", pct(s.total.hit_ratio), ""],
  ];
  fillTable("upstream", rows, [(r) => r[0], (r) => r[1], (r) => r[2]]);
}

function renderNodes(c) {
  const redis = $("redis");
  if (!c.clustered) {
    redis.textContent = "single node";
    redis.className = "pill";
  } else {
    redis.textContent = c.redis_up ? "Redis up" : "Redis down";
    redis.className = "pill " + (c.redis_up ? "ok" : "bad");
  }
  $("node").textContent = c.clustered ? "node " + c.self : "";
  const members = c.clustered ? c.members || []
    : [{ id: "this node (no cluster)", address: location.hostname, ownership_share: 1 }];
  fillTable("nodes", members, [
    (m) => m.id + (m.id === c.self ? " (this node)" : ""),
    (m) => m.address, (m) => (m.capacity === undefined ? "-" : bytes(m.capacity)),
    (m) => pct(m.ownership_share),
    (m) => (m.directory_entries === undefined ? "-" : count(m.directory_entries)),
  ]);
}

function renderJobs(jobs) {
  fillTable("jobs", jobs, [
    (j) => j.id, (j) => j.bucket, (j) => j.state,
    (j) => {
      const p = el("progress");
      p.max = Math.max(1, j.bytes_total || 0);
      p.value = j.bytes_done || 0;
      p.title = pct(j.bytes_total ? j.bytes_done / j.bytes_total : 0);
      return p;
    },
    (j) => count(j.objects_done) + " / " + count(j.objects_total),
    (j) => bytes(j.bytes_done) + " / " + bytes(j.bytes_total),
    (j) => bytes(j.rate_bytes_per_second) + "/s", (j) => count(j.errors),
  ]);
}

function renderPins(s) {
  const rows = [];
  for (const p of s.pins || [])
    rows.push(["pin " + p.id,
               p.prefix !== undefined ? p.bucket + "/" + p.prefix
                                      : p.bucket + " (" + count(p.keys) + " keys)", bytes(p.bytes),
               p.until ? new Date(p.until * 1000).toISOString() : "-"]);
  for (const l of s.lookaheads || [])
    rows.push(["lookahead", l.bucket + " (" + count(l.keys) + " keys)", bytes(l.bytes),
               "window " + count(l.window) + " objects" +
               (l.window_bytes ? " or " + bytes(l.window_bytes) : "")]);
  fillTable("pins", rows, [(r) => r[0], (r) => r[1], (r) => r[2], (r) => r[3]]);
}

function trafficRows(table) {
  return Object.entries(table || {}).map(([name, r]) => Object.assign({ name }, r))
    .sort((a, b) => b.requests - a.requests);
}
const trafficColumns = [
  (r) => r.name, (r) => count(r.requests), (r) => count(r.hits), (r) => count(r.misses),
  (r) => count(r.bypass), (r) => pct(r.hit_ratio), (r) => bytes(r.bytes_served),
  (r) => bytes(r.upstream_bytes_saved),
];
// A key's share of the RAM tier (max_resident_bytes), after its traffic.
function clientRows(stats) {
  const resident = stats.resident || {};
  return trafficRows(stats.clients).map((r) => Object.assign(r, { resident: resident[r.name] }));
}
const clientColumns = trafficColumns.concat([
  (r) => !r.resident ? "-" : bytes(r.resident.bytes) +
    (r.resident.max_bytes ? " of " + bytes(r.resident.max_bytes) : ""),
]);

// ---- charts ----

const SVG = "http://www.w3.org/2000/svg";

function drawChart(id, series, max) {
  const svg = $(id), W = 600, H = 140;
  svg.replaceChildren();
  for (const y of [0.25, 0.5, 0.75]) {
    const g = document.createElementNS(SVG, "line");
    g.setAttribute("x1", 0); g.setAttribute("x2", W);
    g.setAttribute("y1", H * y); g.setAttribute("y2", H * y);
    g.setAttribute("class", "grid");
    svg.append(g);
  }
  if (!max) max = Math.max(1e-9, ...series.flat().filter((v) => v !== null));
  series.forEach((vals, i) => {
    const pts = [];
    vals.forEach((v, k) => {
      if (v === null) return;
      const x = HISTORY > 1 ? (W * (HISTORY - vals.length + k)) / (HISTORY - 1) : 0;
      pts.push(x.toFixed(1) + "," + (H - (H * Math.min(v, max)) / max).toFixed(1));
    });
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("class", "s" + i);
    svg.append(line);
  });
  const title = document.createElementNS(SVG, "title");
  title.textContent = "scale: 0 to " + (max < 10 ? max.toFixed(2) : Math.round(max));
  svg.append(title);
}

function sample(s) {
  const now = performance.now() / 1000;
  const cache = s.cache || { ram: {}, nvme: {} };
  const point = {
    t: now, hit: null, upReq: 0, upErr: 0,
    ram: cache.ram.capacity_bytes ? cache.ram.used_bytes / cache.ram.capacity_bytes : null,
    nvme: cache.nvme.capacity_bytes ? cache.nvme.used_bytes / cache.nvme.capacity_bytes : null,
  };
  let rates = null;
  if (prev) {
    const dt = Math.max(1e-3, now - prev.t);
    const dh = s.total.hits - prev.s.total.hits, dm = s.total.misses - prev.s.total.misses;
    point.hit = dh + dm > 0 ? dh / (dh + dm) : null;
    point.upReq = Math.max(0, s.upstream.requests - prev.s.upstream.requests) / dt;
    point.upErr = Math.max(0, s.upstream.errors - prev.s.upstream.errors) / dt;
    rates = point;
  }
  prev = { t: now, s };
  history.push(point);
  while (history.length > HISTORY) history.shift();
  return rates;
}

// ---- the loop ----

async function refresh() {
  try {
    const [stats, cluster, jobs] = await Promise.all([
      api("/admin/stats"), api("/admin/cluster"), api("/admin/jobs"),
    ]);
    const rates = sample(stats);
    renderTiers(stats.cache);
    renderUpstream(stats, rates);
    renderNodes(cluster);
    renderJobs(jobs.jobs || []);
    renderPins(stats);
    fillTable("clients", clientRows(stats), clientColumns);
    fillTable("buckets", trafficRows(stats.buckets), trafficColumns);
    drawChart("chart-hits", [history.map((p) => p.hit)], 1);
    drawChart("chart-use", [history.map((p) => p.ram), history.map((p) => p.nvme)], 1);
    drawChart("chart-upstream", [history.map((p) => p.upReq), history.map((p) => p.upErr)]);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
    $("error").hidden = true;
    $("main").hidden = false;
    document.body.dataset.state = "ready";
  } catch (e) {
    $("error").textContent = String(e.message || e);
    $("error").hidden = false;
    if (e.auth) {
      sessionStorage.removeItem("larder-token");
      showLogin();
      document.body.dataset.state = "refused";
      return;
    }
    document.body.dataset.state = "error";
  }
  timer = setTimeout(refresh, POLL_MS);
}

function showLogin() {
  clearTimeout(timer);
  token = null;
  $("main").hidden = true;
  $("forget").hidden = true;
  $("login").hidden = false;
}

function start() {
  token = sessionStorage.getItem("larder-token");
  if (!token) { showLogin(); document.body.dataset.state = "login"; return; }
  $("login").hidden = true;
  $("forget").hidden = false;
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromFragment();
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("larder-token", $("token").value);
    $("token").value = "";
    start();
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem("larder-token");
    showLogin();
  });
  start();
});
