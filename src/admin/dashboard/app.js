// pfsnetd's dashboard: reads the daemon's read-only JSON API (/api/v1/...) and draws it.
// Everything it loads comes from the daemon itself (uPlot is embedded in pfsnetd), so the
// page works offline. It refreshes by itself; body[data-refreshes] counts the refreshes
// done (tests wait on it).
"use strict";

const GROUP_STATS = {
  node: ["latency_tcp", "latency_verbs", "latency_mixed"],
  size: ["latency"],
  message: ["execution"],
};
const RING_KEY = { "60s": "second", "60m": "minute", "24h": "hour", "30d": "day" };
const charts = new Map();  // chart key -> {plot, div}
let selftestPlot = null;
let timer = null;
let refreshes = 0;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "title") e.title = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function table(id, head, rows) {
  const t = document.getElementById(id);
  t.replaceChildren(el("tr", {}, ...head.map((h) => el("th", {}, h))));
  for (const r of rows) t.append(r);
}

function ms(v) {
  return v === undefined || v === null ? "" : Number(v).toFixed(3);
}

async function api(path) {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), 8000);
  try {
    const r = await fetch("/api/v1/" + path, { signal: ctl.signal, cache: "no-store" });
    const body = await r.json();
    return r.ok ? { ok: true, data: body } : { ok: false, error: body.error || r.statusText };
  } catch (e) {
    return { ok: false, error: String(e) };
  } finally {
    clearTimeout(t);
  }
}

function renderCluster(status, health) {
  const summary = document.getElementById("cluster-summary");
  if (!status.ok) {
    summary.textContent = "No membership table: " + status.error;
    table("nodes", [], []);
  } else {
    const nodes = status.data.nodes || [];
    const by = {};
    for (const n of nodes) by[n.state] = (by[n.state] || 0) + 1;
    summary.textContent = `${nodes.length} nodes (MGS ${status.data.mgs}): ` +
        Object.entries(by).map(([s, c]) => `${c} ${s}`).join(", ");
    table("nodes", ["node", "roles", "state", "NIDs", "last heard", "heard via"],
          nodes.map((n) => el("tr", { "data-node": n.name },
                              el("td", {}, n.name), el("td", {}, n.roles),
                              el("td", { class: "state-" + n.state }, n.state),
                              el("td", {}, (n.nids || []).join(" ")),
                              el("td", {}, `${n.last_heard} (${n.last_heard_s_ago} s ago)`),
                              el("td", {}, n.heard_via))));
  }
  if (!health.ok) {
    table("problems", ["problems"], [el("tr", {}, el("td", { class: "bad" }, health.error))]);
    return;
  }
  const list = health.data.problems || [];
  if (list.length === 0) {
    table("problems", [], [el("tr", {}, el("td", { class: "none" }, "no problems"))]);
    return;
  }
  table("problems", ["kind", "subject", "cause", "since", "seen by", "evidence"],
        list.map((p) => el("tr", { class: "problem" }, el("td", {}, p.kind),
                           el("td", {}, p.subject), el("td", { class: "bad" }, p.cause),
                           el("td", {}, p.since), el("td", {}, p.seen_by),
                           el("td", {}, p.evidence))));
}

// The statistics of the chosen group, each as {key, title, intervals}.
function statistics(diag, group, ring) {
  const g = RING_KEY[ring];
  const out = [];
  const add = (key, title, s) => {
    if (s && s[g]) out.push({ key, title, intervals: s[g] });
  };
  if (group === "node") {
    for (const n of diag.nodes || [])
      for (const st of GROUP_STATS.node)
        add(`node/${n.nid}/${st}`, `${st} to ${n.node}` + (n.nid !== n.node ? ` (${n.nid})` : ""),
            n.stats[st]);
  } else if (group === "size") {
    for (const s of diag.sizes || []) add(`size/${s.low}`, `latency, ${s.low}-${s.high} B`, s.latency);
  } else {
    for (const m of diag.messages || []) add(`message/${m.type}`, `execution of ${m.type}`, m.execution);
  }
  return out;
}

function chartData(intervals) {
  const x = [], avg = [], p50 = [], p99 = [];
  for (const i of intervals) {
    x.push(i.start);
    const has = i.count > 0;
    avg.push(has ? i.avg_ms : null);
    p50.push(has ? i.p50_ms : null);
    p99.push(has ? i.p99_ms : null);
  }
  return [x, avg, p50, p99];
}

function renderLatency(diag) {
  const note = document.getElementById("latency-note");
  const box = document.getElementById("charts");
  if (!diag.ok) {
    note.textContent = "No statistics: " + diag.error;
    return;
  }
  const group = document.getElementById("group").value;
  const ring = document.getElementById("ring").value;
  const stats = statistics(diag.data, group, ring);
  note.textContent = stats.length ? "" : "No RPCs in this group yet.";
  const seen = new Set();
  for (const s of stats) {
    const key = `${ring}/${s.key}`;
    seen.add(key);
    const data = chartData(s.intervals);
    const total = s.intervals.reduce((a, i) => a + i.count, 0);
    const last = [...s.intervals].reverse().find((i) => i.count > 0);
    const figures = `${total} RPCs in the ring` + (last ?
        `; newest: avg ${ms(last.avg_ms)} ms, p50 ${ms(last.p50_ms)} ms, p99 ${ms(last.p99_ms)} ms, ` +
        `max ${ms(last.max_ms)} ms, count ${last.count}` : "");
    let c = charts.get(key);
    if (!c) {
      const div = el("div", { class: "chart", "data-key": key },
                     el("h4", {}, s.title), el("div", { class: "figures" }, figures));
      box.append(div);
      const plot = new uPlot({
        width: 560, height: 200,
        scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max, 0.001) * 1.1] } },
        axes: [{}, { label: "ms", size: 60 }],
        series: [{}, { label: "avg", stroke: "#1f5fbf", spanGaps: false },
                 { label: "p50", stroke: "#19753a" },
                 { label: "p99", stroke: "#b3261e", dash: [6, 3] }],
      }, data, div);
      c = { plot, div };
      charts.set(key, c);
    } else {
      c.div.querySelector(".figures").textContent = figures;
      c.plot.setData(data);
    }
  }
  for (const [key, c] of charts) {
    if (seen.has(key)) continue;
    c.plot.destroy();
    c.div.remove();
    charts.delete(key);
  }
}

function median(v) {
  const s = [...v].sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : 0;
}

function renderMesh(mesh) {
  const box = document.getElementById("mesh-map");
  if (!mesh.ok) {
    box.replaceChildren(el("p", { class: "none" }, "No probe mesh: " + mesh.error));
    return;
  }
  const rows = mesh.data.rows || [];
  const to = [...new Set(rows.flatMap((r) => (r.cells || []).map((c) => c.to)))].sort();
  const p50s = rows.flatMap((r) => (r.cells || []).filter((c) => c.rtt_count > 0).map((c) => c.p50_ms));
  const med = median(p50s);
  if (to.length === 0) {
    box.replaceChildren(el("p", { class: "none" },
                           `No probes yet (${rows.length} nodes in the mesh; a probe every ` +
                           `${mesh.data.local ? mesh.data.local.interval_s : "?"} s).`));
    return;
  }
  const t = el("table", { id: "mesh-table" },
               el("tr", {}, el("th", {}, "from \\ to"), ...to.map((n) => el("th", {}, n))));
  for (const r of rows) {
    const tr = el("tr", {}, el("th", {}, r.from));
    for (const name of to) {
      const cells = (r.cells || []).filter((c) => c.to === name);
      if (cells.length === 0) {
        tr.append(el("td", { class: "cell none" }, ""));
        continue;
      }
      // The worst path between the two nodes.
      const c = cells.reduce((a, b) => (b.p50_ms > a.p50_ms || b.lost > a.lost ? b : a));
      const ratio = med > 0 && c.rtt_count > 0 ? c.p50_ms / med : 1;
      const heat = Math.max(0, Math.min(1, (ratio - 1) / 3)) ;
      const lost = c.sent > 0 ? c.lost / c.sent : 0;
      const hue = lost > 0 ? 0 : 120 * (1 - heat);
      tr.append(el("td", {
        class: "cell", "data-from": r.from, "data-to": name,
        style: `background: hsl(${hue}, 70%, ${lost > 0 ? 70 : 85}%)`,
        title: `${c.local} -> ${c.peer}: p50 ${ms(c.p50_ms)} ms, p99 ${ms(c.p99_ms)} ms, ` +
               `lost ${c.lost} of ${c.sent}, write ${c.write_mib_s} MiB/s, read ${c.read_mib_s} MiB/s`,
      }, c.rtt_count > 0 ? ms(c.p50_ms) : "lost"));
    }
    t.append(tr);
  }
  box.replaceChildren(t, el("p", {}, `median p50 ${ms(med)} ms; ${mesh.data.outliers} outlier cells`));
}

function niRows(list, peer) {
  return list.map((n) => {
    const errors = Object.values(n.errors || {}).reduce((a, b) => a + b, 0);
    return el("tr", { "data-nid": n.nid },
              el("td", {}, n.nid), el("td", { class: n.state === "up" ? "state-up" : "state-dead" }, n.state),
              el("td", { class: "num" + (n.health < 1000 ? " bad" : "") }, n.health),
              el("td", {}, n.degraded || ""),
              el("td", { class: "num" }, `${n.credits} / ${n.credits_max}`),
              el("td", { class: "num" }, n.credits_min), el("td", { class: "num" }, n.queued),
              el("td", { class: "num" }, n.send_count), el("td", { class: "num" }, n.recv_count),
              el("td", { class: "num" + (errors ? " bad" : "") }, errors),
              el("td", { class: "num" }, peer ? n.resends : n.connections));
  });
}

function renderNets(nis, peers) {
  const head = (last) => ["NID", "state", "health", "degraded", "credits", "min", "queued",
                          "sent", "received", "errors", last];
  table("nis", head("connections"), nis.ok ? niRows(nis.data.nis, false) : []);
  table("peers", head("resends"), peers.ok ? niRows(peers.data.peers, true) : []);
}

function renderSelftest(st) {
  const note = document.getElementById("selftest-note");
  const box = document.getElementById("selftest-chart");
  if (!st.ok || !st.data.steps) {
    note.textContent = st.ok ? "No self-test has run on this node since it started " +
        "(pfsnet selftest …)." : "Not available: " + st.error;
    return;
  }
  const steps = st.data.steps;
  const spec = st.data.spec || {};
  const what = spec.test === "ping" ? "ping" : `brw ${spec.mode} of ${spec.size} B`;
  note.textContent = `${st.data.finished || ""}: ${what} from ${(spec.from || []).join(", ")} ` +
      `to ${(spec.to || []).join(", ")}; best ${Math.max(...steps.map((s) => s.mib_s))} MiB/s`;
  const data = [steps.map((s) => s.concurrency), steps.map((s) => s.mib_s),
                steps.map((s) => s.theory_mib_s)];
  if (selftestPlot) {
    selftestPlot.setData(data);
    return;
  }
  selftestPlot = new uPlot({
    width: 700, height: 260,
    scales: { x: { time: false } },
    axes: [{ label: "concurrency" }, { label: "MiB/s", size: 70 }],
    series: [{ label: "concurrency" }, { label: "measured", stroke: "#1f5fbf", points: { show: true } },
             { label: "theory", stroke: "#999", dash: [6, 4] }],
  }, data, box);
}

async function refresh() {
  const diagPath = "diag/rpc?what=all&interval=" + document.getElementById("ring").value;
  const [config, status, health, diag, mesh, nis, peers, st] = await Promise.all(
      ["config", "status", "health", diagPath, "mesh", "nis", "peers", "selftest/last"].map(api));
  if (config.ok) {
    const name = (config.data.config || []).find((c) => c.key === "node.name");
    if (name) {
      const n = JSON.parse(name.value);
      document.getElementById("node-name").textContent = n;
      document.title = "pfsnet " + n;
    }
  }
  renderCluster(status, health);
  renderLatency(diag);
  renderMesh(mesh);
  renderNets(nis, peers);
  renderSelftest(st);
  refreshes += 1;
  document.body.dataset.refreshes = refreshes;
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

function schedule() {
  if (timer) clearInterval(timer);
  const s = Number(document.getElementById("refresh").value);
  timer = s > 0 ? setInterval(refresh, s * 1000) : null;
}

for (const id of ["group", "ring"]) document.getElementById(id).addEventListener("change", refresh);
document.getElementById("refresh").addEventListener("change", schedule);
refresh();
schedule();
