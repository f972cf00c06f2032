// cann-train dashboard: polls the agent's JSON API and draws SVG charts. No libraries, nothing
// fetched from outside the agent.
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"];
const series = {};  // rank -> points
let lastStep = 0;

function svgEl(tag, attrs, text) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  if (text !== undefined) el.textContent = text;
  return el;
}

function fmt(v) {
  // null: a NaN or infinite figure (a diverged loss), which JSON cannot carry as a number.
  if (v === null) return "NaN";
  if (typeof v !== "number" || !isFinite(v)) return "-";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
  if (a >= 1) return v.toFixed(3);
  return v.toPrecision(3);
}

// lines: [{name, color, points: [[x, y], ...]}]
function lineChart(id, lines) {
  const svg = document.getElementById(id);
  const w = svg.clientWidth || 460, h = svg.clientHeight || 190, pad = 40;
  svg.replaceChildren();
  // A non-finite value (null in JSON) has no place on the axis: the line skips it.
  lines = lines.map(l => ({...l, points: l.points.filter(p => typeof p[1] === "number" && isFinite(p[1]))}));
  const all = lines.flatMap(l => l.points);
  if (all.length === 0) {
    svg.appendChild(svgEl("text", {x: pad, y: h / 2, class: "label"}, "no data yet"));
    return;
  }
  let x0 = Math.min(...all.map(p => p[0])), x1 = Math.max(...all.map(p => p[0]));
  let y0 = Math.min(...all.map(p => p[1])), y1 = Math.max(...all.map(p => p[1]));
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y1 += 1; y0 -= 1; }
  const sx = x => pad + (x - x0) / (x1 - x0) * (w - pad - 10);
  const sy = y => h - 20 - (y - y0) / (y1 - y0) * (h - 30);
  svg.appendChild(svgEl("line", {x1: pad, y1: h - 20, x2: w - 10, y2: h - 20, class: "axis"}));
  svg.appendChild(svgEl("line", {x1: pad, y1: 10, x2: pad, y2: h - 20, class: "axis"}));
  svg.appendChild(svgEl("text", {x: 2, y: 14, class: "label"}, fmt(y1)));
  svg.appendChild(svgEl("text", {x: 2, y: h - 22, class: "label"}, fmt(y0)));
  svg.appendChild(svgEl("text", {x: w - 60, y: h - 4, class: "label"}, "step " + x1));
  lines.forEach((l, i) => {
    if (l.points.length === 0) return;
    const d = l.points.map((p, j) => (j ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join("");
    svg.appendChild(svgEl("path", {d, class: "line", stroke: l.color}));
    svg.appendChild(svgEl("text", {x: pad + 8 + 90 * i, y: 12, class: "label", fill: l.color}, l.name));
  });
}

// bars: [{name, parts: [[value, color, label], ...]}]
function barChart(id, bars, unit) {
  const svg = document.getElementById(id);
  const w = svg.clientWidth || 460, h = svg.clientHeight || 190;
  svg.replaceChildren();
  if (bars.length === 0) {
    svg.appendChild(svgEl("text", {x: 40, y: h / 2, class: "label"}, "no data yet"));
    return;
  }
  const max = Math.max(...bars.map(b => b.parts.reduce((s, p) => s + p[0], 0)), 1e-12);
  const bw = Math.min(60, (w - 60) / bars.length - 8);
  bars.forEach((b, i) => {
    let y = h - 20;
    const x = 50 + i * (bw + 8);
    b.parts.forEach(p => {
      const ph = p[0] / max * (h - 40);
      svg.appendChild(svgEl("rect", {x, y: y - ph, width: bw, height: ph, fill: p[1]}));
      y -= ph;
    });
    svg.appendChild(svgEl("text", {x, y: h - 6, class: "label"}, b.name));
  });
  svg.appendChild(svgEl("text", {x: 2, y: 14, class: "label"}, fmt(max) + unit));
}

function heatmap(id, ranks) {
  const svg = document.getElementById(id);
  const w = svg.clientWidth || 460, h = svg.clientHeight || 190;
  svg.replaceChildren();
  const rows = ranks.filter(r => r.expert_tokens && r.expert_tokens.length > 0);
  if (rows.length === 0) {
    svg.appendChild(svgEl("text", {x: 40, y: h / 2, class: "label"}, "no MoE layers in this model"));
    return;
  }
  const E = rows[0].expert_tokens.length;
  const max = Math.max(...rows.flatMap(r => r.expert_tokens), 1);
  const cw = (w - 60) / E, ch = Math.min(24, (h - 30) / rows.length);
  rows.forEach((r, i) => {
    svg.appendChild(svgEl("text", {x: 2, y: 20 + i * ch + ch / 2, class: "label"}, "rank " + r.rank));
    r.expert_tokens.forEach((v, e) => {
      const t = v / max;
      const color = `rgb(${Math.round(255 - 200 * t)},${Math.round(255 - 120 * t)},255)`;
      svg.appendChild(svgEl("rect", {x: 55 + e * cw, y: 10 + i * ch, width: cw - 1, height: ch - 1, fill: color}));
    });
  });
}

// The figures docs/monitoring.md defines ("Efficiency"), measured and, under run --plan, the
// plan's prediction of each.
const EFFICIENCY = [["tei", "TEI", 3], ["mfu", "MFU", 3], ["scaling_efficiency", "scaling efficiency", 3],
                    ["comm_ratio", "exposed comm / step", 3], ["goodput", "goodput", 3],
                    ["cost_usd_per_hour", "cost $/h", 2], ["energy_kwh_per_step", "energy kWh/step", 3]];

function efficiencyTable(r0) {
  const table = document.getElementById("efficiency");
  const e = (r0 && r0.efficiency) || {}, plan = (r0 && r0.predicted) || {};
  const show = (v, d) => (v === undefined || v === null || v < 0) ? "-" : Number(v).toPrecision(d);
  table.innerHTML = "<tr><th>figure</th><th>measured</th><th>planned</th></tr>" +
    EFFICIENCY.map(([k, name, d]) => `<tr><td>${name}</td><td>${show(e[k], d)}</td>` +
      `<td>${show(plan[k], d)}</td></tr>`).join("") +
    (plan.step_time_s ? `<tr><td>step s</td><td>${show(r0.step_time_s, 3)}</td><td>${show(plan.step_time_s, 3)}</td></tr>` : "");
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

async function getJson(path) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

async function refresh() {
  try {
    const [status, s, events] = await Promise.all([
      getJson("api/status"), getJson("api/series?since=" + lastStep), getJson("api/events?last=100")]);
    for (const r of s.ranks) {
      series[r.rank] = (series[r.rank] || []).concat(r.points);
      if (series[r.rank].length > 5000) series[r.rank] = series[r.rank].slice(-5000);
      for (const p of r.points) lastStep = Math.max(lastStep, p.step);
    }
    const ranks = status.ranks;
    const r0 = ranks.find(r => r.rank === 0) || ranks[0];
    document.getElementById("summary").textContent = r0
      ? `job ${status.job} | ${status.world_size} ranks | step ${r0.step}/${r0.total_steps} | ` +
        `loss ${fmt(r0.loss)} | ${fmt(r0.tokens_per_s)} tok/s | restarts ${status.restarts}`
      : `job ${status.job} | waiting for the first step`;
    const p0 = series[0] || [];
    lineChart("loss", [
      {name: "train", color: COLORS[0], points: p0.map(p => [p.step, p.loss])},
      {name: "validation", color: COLORS[1], points: p0.filter(p => p.val_loss >= 0).map(p => [p.step, p.val_loss])}]);
    lineChart("tokens", [{name: "tokens/s", color: COLORS[2], points: p0.map(p => [p.step, p.tokens_per_s])}]);
    lineChart("steptime", Object.keys(series).map((r, i) => (
      {name: "rank " + r, color: COLORS[i % COLORS.length], points: series[r].map(p => [p.step, p.step_time_s])})));
    barChart("breakdown", ranks.map(r => ({name: "rank " + r.rank, parts: [
      [Math.max(0, r.step_time_s - r.comm_exposed_s), COLORS[0]], [r.comm_exposed_s, COLORS[1]]]})), " s");
    barChart("memory", ranks.map(r => ({name: "rank " + r.rank, parts: [[r.memory_bytes, COLORS[4]]]})), " B");
    heatmap("experts", ranks);
    efficiencyTable(r0);
    lineChart("tei", [
      {name: "TEI", color: COLORS[3], points: p0.filter(p => p.tei >= 0).map(p => [p.step, p.tei])},
      {name: "MFU", color: COLORS[4], points: p0.filter(p => p.mfu >= 0).map(p => [p.step, p.mfu])}]);
    const list = document.getElementById("events");
    list.replaceChildren(...events.slice().reverse().map(e => {
      const li = document.createElement("li");
      if (e.event === "alert") li.className = "alert";
      li.textContent = new Date(e.time * 1000).toLocaleTimeString() + "  " + e.event +
        (e.rank >= 0 ? " (rank " + e.rank + ")" : "") + ": " + e.detail;
      return li;
    }));
    if (events.length === 0) {
      const li = document.createElement("li");
      li.textContent = "no events";
      list.replaceChildren(li);
    }
    const table = document.getElementById("ranks");
    const head = "<tr><th>rank</th><th>host</th><th>step</th><th>step s</th><th>compute s</th>" +
      "<th>exposed comm s</th><th>tok/s</th><th>TFLOP/s</th><th>memory</th></tr>";
    table.innerHTML = head + ranks.map(r => `<tr><td>${r.rank}</td><td>${esc(r.host)}</td><td>${r.step}</td>` +
      `<td>${fmt(r.step_time_s)}</td><td>${fmt(r.forward_backward_s)}</td><td>${fmt(r.comm_exposed_s)}</td>` +
      `<td>${fmt(r.tokens_per_s)}</td><td>${fmt(r.tflops_per_device)}</td><td>${fmt(r.memory_bytes)}B</td></tr>`).join("");
  } catch (e) {
    document.getElementById("summary").textContent = "agent unreachable: " + e.message;
  }
}

refresh();
setInterval(refresh, 1000);
