#include "router/status_page.h"

namespace ds {

const char* status_page_html() {
  return R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>dsinfer router</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; background: #fafafa; }
  h1 { font-size: 20px; margin: 0 0 .2em; } h2 { font-size: 16px; margin: 1.4em 0 .4em; }
  table { border-collapse: collapse; background: #fff; } th, td { padding: 3px 10px; border-bottom: 1px solid #e3e3e3; text-align: right; }
  th:first-child, td:first-child { text-align: left; } th { background: #f0f0f0; font-weight: 600; }
  .healthy { color: #137333; } .ejected { color: #b3261e; font-weight: 600; } .starting { color: #8a6d00; }
  .charts { display: flex; flex-wrap: wrap; gap: 12px; } .chart { background: #fff; border: 1px solid #e3e3e3; padding: 6px; }
  .chart svg { display: block; } .muted { color: #666; } #errors { color: #b3261e; white-space: pre-wrap; }
  .running { color: #8a6d00; } .promoted { color: #137333; } .rolled_back { color: #b3261e; }
</style>
</head>
<body>
<h1>dsinfer router</h1>
<form class="muted" id="key-form"><span id="ready" data-key="ready"></span> &middot; updated <span id="updated">never</span>
  &middot; <input type="text" name="operator" autocomplete="username" value="operator" hidden>
  <label>admin key <input id="key" type="password" size="24" autocomplete="current-password"></label></form>
<pre id="errors"></pre>
<h2>Instances</h2>
<table id="instances"><thead><tr><th>id</th><th>version</th><th>state</th><th>outstanding</th><th>running</th><th>waiting</th>
  <th>KV used</th><th>KV cached pages</th><th>requests finished</th><th>tokens generated</th><th>probe latency</th>
  <th>restarts</th><th>ejections</th><th>last error</th></tr></thead><tbody></tbody></table>
<h2>Traffic, last ten minutes (10 s buckets)</h2>
<div class="charts" id="charts"></div>
<h2>Canary release</h2>
<div id="canary" class="muted">no canary release is configured</div>
<script>
"use strict";
const errors = document.getElementById("errors");
function report(message) { errors.textContent = message; }
window.addEventListener("error", e => report("script error: " + e.message));

const keyInput = document.getElementById("key");
const fromFragment = new URLSearchParams(location.hash.slice(1)).get("key");
keyInput.value = fromFragment || sessionStorage.getItem("dsinfer-admin-key") || "";
keyInput.addEventListener("change", () => { sessionStorage.setItem("dsinfer-admin-key", keyInput.value); refresh(); });
document.getElementById("key-form").addEventListener("submit", e => e.preventDefault());

async function get(path) {
  const r = await fetch(path, { headers: { "Authorization": "Bearer " + keyInput.value } });
  if (r.status === 404 && path === "/admin/canary") return null;
  if (!r.ok) throw new Error(path + " answered " + r.status);
  return r.json();
}

function cell(row, text, key, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (key) td.dataset.key = key;
  if (cls) td.className = cls;
  return td;
}
function fixed(v, digits) { return v === null || v === undefined ? "-" : Number(v).toFixed(digits); }
function plain(v) { return v === null || v === undefined ? "-" : String(v); }

function showInstances(list) {
  const body = document.querySelector("#instances tbody");
  body.replaceChildren();
  for (const i of list) {
    const row = body.insertRow();
    const m = i.metrics || {};
    const k = "instance/" + i.id + "/";
    cell(row, i.id, k + "id");
    cell(row, i.version, k + "version");
    cell(row, i.state + (i.draining ? " (draining)" : ""), k + "state", i.state);
    cell(row, plain(i.outstanding), k + "outstanding");
    cell(row, plain(m.running), k + "running");
    cell(row, plain(m.waiting), k + "waiting");
    cell(row, m.kv_usage === undefined ? "-" : fixed(100 * m.kv_usage, 1) + "%", k + "kv_usage_percent");
    cell(row, plain(m.kv_pages_cached), k + "kv_pages_cached");
    cell(row, plain(m.requests_finished), k + "requests_finished");
    cell(row, plain(m.generation_tokens), k + "generation_tokens");
    cell(row, i.latency_ms === null ? "-" : fixed(i.latency_ms, 1) + " ms", k + "latency_ms");
    cell(row, plain(i.restarts), k + "restarts");
    cell(row, plain(i.ejections), k + "ejections");
    cell(row, i.last_error || "", k + "last_error");
  }
}

const SVG = "http://www.w3.org/2000/svg";
function chart(title, unit, points) {
  const w = 300, h = 110, pad = 4;
  const box = document.createElement("div");
  box.className = "chart";
  const values = points.filter(p => p.v !== null);
  const max = Math.max(1e-9, ...values.map(p => p.v));
  const last = values.length ? values[values.length - 1].v : null;
  const heading = document.createElement("div");
  heading.textContent = title + ": " + (last === null ? "-" : fixed(last, 1) + " " + unit) + " (max " + fixed(values.length ? max : null, 1) + ")";
  box.appendChild(heading);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  const now = Date.now(), span = 600000;
  const x = t => pad + (w - 2 * pad) * Math.max(0, (t - (now - span)) / span);
  const y = v => h - pad - (h - 2 * pad) * v / max;
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#1a73e8");
  line.setAttribute("stroke-width", "2");
  line.setAttribute("points", values.map(p => x(p.t) + "," + y(p.v)).join(" "));
  const axis = document.createElementNS(SVG, "line");
  axis.setAttribute("x1", pad); axis.setAttribute("x2", w - pad); axis.setAttribute("y1", h - pad); axis.setAttribute("y2", h - pad);
  axis.setAttribute("stroke", "#999");
  svg.append(axis, line);
  for (const p of values) {  // a point alone draws no line
    const dot = document.createElementNS(SVG, "circle");
    dot.setAttribute("cx", x(p.t)); dot.setAttribute("cy", y(p.v)); dot.setAttribute("r", "2.5"); dot.setAttribute("fill", "#1a73e8");
    svg.appendChild(dot);
  }
  box.appendChild(svg);
  return box;
}

function showHistory(history) {
  const s = history.bucket_seconds;
  const b = history.buckets;
  const at = (f) => b.map(x => ({ t: x.start_unix_ms + 500 * s, v: f(x) }));
  document.getElementById("charts").replaceChildren(
    chart("throughput", "tokens/s", at(x => x.output_tokens / s)),
    chart("requests", "req/s", at(x => x.requests / s)),
    chart("TTFT mean", "ms", at(x => x.ttft_mean_ms)),
    chart("TPOT mean", "ms", at(x => x.tpot_mean_ms)));
}

function showCanary(c) {
  const box = document.getElementById("canary");
  if (!c) { box.textContent = "no canary release is configured"; box.className = "muted"; return; }
  box.className = "";
  box.replaceChildren();
  const head = document.createElement("p");
  const state = document.createElement("b");
  state.textContent = c.state;
  state.className = c.state;
  state.dataset.key = "canary/state";
  const stage = document.createElement("span");
  stage.textContent = c.stage_percent;
  stage.dataset.key = "canary/stage_percent";
  head.append(c.stable + " \u2192 " + c.canary + ": ", state, " at ", stage, "% of traffic (stages " + c.stages.join(", ") +
              "; verdict: " + c.stage.verdict + ")");
  box.appendChild(head);
  const reasons = document.createElement("ul");
  for (const r of c.stage.reasons) { const li = document.createElement("li"); li.textContent = r; reasons.appendChild(li); }
  box.appendChild(reasons);
  const f = c.stage.figures;
  const table = document.createElement("table");
  const header = table.createTHead().insertRow();
  for (const t of ["this stage", "requests", "errors", "error rate", "error types", "TTFT p99", "TPOT p99", "TTFT p99 vs stable",
                   "TPOT p99 vs stable"]) {
    const th = document.createElement("th"); th.textContent = t; header.appendChild(th);
  }
  const body = table.createTBody();
  for (const side of ["stable", "canary"]) {
    const v = f[side], row = body.insertRow(), k = "canary/" + side + "/";
    cell(row, side + " (" + c[side] + ")");
    cell(row, plain(v.requests), k + "requests");
    cell(row, plain(v.errors), k + "errors");
    cell(row, v.error_rate === null ? "-" : fixed(100 * v.error_rate, 2) + "%", k + "error_rate_percent");
    cell(row, Object.entries(v.error_types).map(([t, n]) => t + " " + n).join(", ") || "-", k + "error_types");
    cell(row, v.ttft_p99_ms === null ? "-" : fixed(v.ttft_p99_ms, 1) + " ms", k + "ttft_p99_ms");
    cell(row, v.tpot_p99_ms === null ? "-" : fixed(v.tpot_p99_ms, 1) + " ms", k + "tpot_p99_ms");
    for (const figure of ["ttft_p99_ms", "tpot_p99_ms"]) {  // the latency deltas the policy judges
      const base = f.stable[figure], mine = v[figure];
      const delta = side === "stable" || base === null || mine === null || base === 0 ? null : 100 * (mine / base - 1);
      cell(row, delta === null ? "-" : (delta >= 0 ? "+" : "") + fixed(delta, 1) + "%", k + figure + "_delta");
    }
  }
  box.appendChild(table);
  const agreement = document.createElement("p");
  const pairs = document.createElement("span");
  pairs.textContent = f.greedy_pairs;
  pairs.dataset.key = "canary/greedy_pairs";
  const exact = document.createElement("span");
  exact.textContent = f.exact_match === null ? "-" : fixed(100 * f.exact_match, 1) + "%";
  exact.dataset.key = "canary/exact_match_percent";
  const overlap = document.createElement("span");
  overlap.textContent = f.token_overlap === null ? "-" : fixed(f.token_overlap, 3);
  overlap.dataset.key = "canary/token_overlap";
  agreement.append("agreement over ", pairs, " greedy pairs: exact match ", exact, ", token overlap ", overlap,
                   "; audit: " + c.audit.canary_requests + " canary and " + c.audit.shadow_requests + " shadow requests");
  box.appendChild(agreement);
  const decisions = document.createElement("table");
  const dh = decisions.createTHead().insertRow();
  for (const t of ["decision", "time", "from", "to", "state", "by", "reasons"]) { const th = document.createElement("th"); th.textContent = t; dh.appendChild(th); }
  const db = decisions.createTBody();
  c.decisions.slice(-10).reverse().forEach((d, n) => {
    const row = db.insertRow();
    cell(row, d.action, "canary/decision/" + n + "/action");
    cell(row, new Date(d.unix_ms).toLocaleTimeString());
    cell(row, d.from_percent + "%");
    cell(row, d.to_percent + "%", "canary/decision/" + n + "/to_percent");
    cell(row, d.state, null, d.state);
    cell(row, d.by);
    cell(row, (d.reasons || []).join("; "));
  });
  box.appendChild(decisions);
}

async function refresh() {
  try {
    const [ready, instances, history, canary] = await Promise.all([
      fetch("/ready").then(r => r.json()), get("/admin/instances"), get("/admin/history"), get("/admin/canary")]);
    document.getElementById("ready").textContent = ready.status;
    showInstances(instances.instances);
    showHistory(history);
    showCanary(canary);
    document.getElementById("updated").textContent = new Date().toLocaleTimeString();
    document.body.dataset.loaded = "1";
    report("");
  } catch (e) {
    report(e.message + (keyInput.value ? "" : " (give the admin key: /#key=KEY or the field above)"));
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)html";
}

const char* status_page_policy() {
  return "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'";
}

}  // namespace ds
