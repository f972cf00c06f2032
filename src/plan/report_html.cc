// HTML report writer (see report_html.h). The page's data is a JSON block the inline script
// draws from: candidates as compact arrays, the winner's stages as objects.
#include "plan/report_html.h"

#include <algorithm>
#include <cstdio>

#include "plan/baseline.h"
#include "plan/report_text.h"

namespace cann::plan {
namespace {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v, int digits = 4) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

// [step_s, memory_GB, goodput, tokens_per_s, pareto, dp, tp, pp, ep, cp, sp, mbs, zero,
//  recompute, vpp, tei, usd_per_million_tokens, joules_per_token]; recompute is the enum's
//  value, or for full recomputation of every k-th layer (k > 1) 100 + k.
std::string point(const Candidate& c) {
  const Strategy& s = c.strategy;
  char buf[320];
  std::snprintf(
      buf, sizeof(buf), "[%.5g,%.4g,%.4g,%.5g,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.4g,%.4g,%.4g]",
      c.step_time_s, c.memory_peak_bytes / 1073741824.0, c.goodput, c.tokens_per_s,
      c.pareto ? 1 : 0, s.dp, s.tp, s.pp, s.ep, s.cp, s.sp ? 1 : 0, s.mbs, s.zero,
      s.recompute == Recompute::kFull && s.recompute_every > 1 ? 100 + s.recompute_every
                                                               : static_cast<int>(s.recompute),
      s.vpp, c.tei, c.usd_per_million_tokens, c.joules_per_token);
  return buf;
}

// The best strategies' bars: {"label", tei, usd_per_million_tokens, joules_per_token,
// speed-up (0: no baseline)}.
std::string top_json(const PlanInput& in, const std::vector<Prediction>& top,
                     const Prediction* baseline) {
  std::string out = "[";
  for (size_t i = 0; i < top.size(); ++i) {
    const ObjectiveFigures f = figures_of(in, top[i]);
    out += (i ? ",[\"#" : "[\"#") + std::to_string(i + 1) + "\"," + num(f.tei) + "," +
           num(f.usd_per_million_tokens) + "," + num(f.joules_per_token) + "," +
           num(baseline ? estimated_speedup(*baseline, top[i]) : 0) + "]";
  }
  return out + "]";
}

std::string stage_json(const StageReport& st, int index) {
  std::string layers;
  for (const auto& [a, b] : st.layers) {
    if (!layers.empty()) layers += ',';
    layers += std::to_string(a);
    layers += '-';
    layers += std::to_string(b);
  }
  const double gb = 1073741824.0;
  return "{\"stage\":" + std::to_string(index) + ",\"layers\":\"" + layers +
         (st.embedding ? " +embedding" : "") + (st.head ? " +head" : "") +
         "\",\"fwd_ms\":" + num(st.fwd_s * 1e3) + ",\"bwd_ms\":" + num(st.bwd_s * 1e3) +
         ",\"comm_ms\":" + num((st.fwd_comm_s + st.bwd_comm_s) * 1e3) +
         ",\"dp_ms\":" + num(st.dp_comm_s * 1e3) + ",\"opt_ms\":" + num(st.optimizer_s * 1e3) +
         ",\"mem\":[" + num(st.weights_bytes / gb) + "," + num(st.grads_bytes / gb) + "," +
         num(st.optimizer_bytes / gb) + "," + num(st.activation_bytes / gb) + "," +
         num(st.transient_bytes / gb) + "," + num(st.reserved_bytes / gb) + "]}";
}

const char kStyle[] = R"(<style>
body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px} h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:12px} td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child{text-align:left} pre{background:#f6f6f6;padding:10px;overflow-x:auto;font-size:12px}
#tip{position:absolute;display:none;background:#fff;border:1px solid #888;padding:6px;font:12px monospace;pointer-events:none;white-space:pre}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px;border-radius:5px}
</style>)";

const char kScript[] = R"(<script>
const D = JSON.parse(document.getElementById('data').textContent);
const NS = 'http://www.w3.org/2000/svg';
const RC = ['none', 'selective', 'full', 'op'];
const rc = (v) => v > 100 ? `full:${v - 100}` : RC[v];
function strat(p) {
  return `dp=${p[5]},tp=${p[6]},pp=${p[7]},ep=${p[8]},cp=${p[9]},sp=${p[10] ? 'on' : 'off'},` +
         `mbs=${p[11]},gbs=${D.gbs},zero=${p[12]},recompute=${rc(p[13])},vpp=${p[14]}`;
}
function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function scatter() {
  const W = 900, H = 480, L = 70, R = 20, T = 20, B = 50;
  const svg = el('svg', {width: W, height: H}, document.getElementById('scatter'));
  let xmin = Infinity, xmax = 0, ymax = D.limit_gb;
  for (const p of D.points) { xmin = Math.min(xmin, p[0]); xmax = Math.max(xmax, p[0]); ymax = Math.max(ymax, p[1]); }
  const x0 = Math.log10(xmin) - 0.05, x1 = Math.log10(xmax) + 0.05, y1 = ymax * 1.05;
  const X = v => L + (Math.log10(v) - x0) / (x1 - x0) * (W - L - R);
  const Y = v => H - B - v / y1 * (H - T - B);
  el('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#444'}, svg);
  el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#444'}, svg);
  for (let d = Math.floor(x0); d <= Math.ceil(x1); d++) for (const m of [1, 2, 5]) {
    const v = m * Math.pow(10, d), lx = Math.log10(v);
    if (lx < x0 || lx > x1) continue;
    el('line', {x1: X(v), y1: H - B, x2: X(v), y2: H - B + 5, stroke: '#444'}, svg);
    el('text', {x: X(v), y: H - B + 18, 'text-anchor': 'middle', 'font-size': 11}, svg).textContent = v;
  }
  const step = Math.pow(10, Math.floor(Math.log10(y1 / 5)));
  for (let v = 0; v <= y1; v += step * (y1 / step > 10 ? 2 : 1)) {
    el('text', {x: L - 6, y: Y(v) + 4, 'text-anchor': 'end', 'font-size': 11}, svg).textContent = Math.round(v);
  }
  el('text', {x: (W + L) / 2, y: H - 10, 'text-anchor': 'middle'}, svg).textContent = 'step time (s, log scale)';
  el('text', {x: 16, y: (H - B) / 2, transform: `rotate(-90 16 ${(H - B) / 2})`, 'text-anchor': 'middle'}, svg).textContent = 'memory peak per device (GB)';
  el('line', {x1: L, y1: Y(D.limit_gb), x2: W - R, y2: Y(D.limit_gb), stroke: '#c33', 'stroke-dasharray': '4 3'}, svg);
  const order = D.points.map((p, i) => i).sort((a, b) => D.points[a][4] - D.points[b][4]);
  for (const i of order) {
    const p = D.points[i];
    el('circle', {cx: X(p[0]), cy: Y(p[1]), r: p[4] ? 4 : 2, fill: p[4] ? '#e66100' : '#5e81ac',
                  'fill-opacity': p[4] ? 0.95 : 0.35}, svg);
  }
  const w = D.points[0];
  el('circle', {cx: X(w[0]), cy: Y(w[1]), r: 8, fill: 'none', stroke: '#000', 'stroke-width': 2}, svg);
  const tip = document.getElementById('tip');
  svg.addEventListener('mousemove', ev => {
    const r = svg.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top;
    let best = -1, bd = 100;
    D.points.forEach((p, i) => { const d = (X(p[0]) - mx) ** 2 + (Y(p[1]) - my) ** 2; if (d < bd) { bd = d; best = i; } });
    if (best < 0) { tip.style.display = 'none'; return; }
    const p = D.points[best];
    tip.textContent = `${strat(p)}\nstep ${p[0].toPrecision(4)} s   memory ${p[1].toFixed(1)} GB\n` +
      `tokens/s ${Math.round(p[3]).toLocaleString()}   goodput ${(100 * p[2]).toFixed(1)}%` +
      (p[4] ? '\nPareto front' : '') + (best === 0 ? '\nwinner' : '');
    tip.style.display = 'block';
    tip.style.left = (ev.pageX + 14) + 'px';
    tip.style.top = (ev.pageY + 14) + 'px';
  });
  svg.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
}
function stages() {
  const names = ['weights', 'gradients', 'optimizer', 'activations', 'transient', 'reserved'];
  const colors = ['#4c72b0', '#55a868', '#c44e52', '#8172b2', '#ccb974', '#999999'];
  const tb = document.getElementById('stages');
  const max = Math.max(D.limit_gb, ...D.stages.map(s => s.mem.reduce((a, b) => a + b, 0)));
  for (const s of D.stages) {
    const tr = document.createElement('tr');
    const total = s.mem.reduce((a, b) => a + b, 0);
    tr.innerHTML = `<td>${s.stage}</td><td>${s.layers}</td><td>${s.fwd_ms}</td><td>${s.bwd_ms}</td>` +
      `<td>${s.comm_ms}</td><td>${s.dp_ms}</td><td>${s.opt_ms}</td>` +
      s.mem.map(v => `<td>${v.toFixed(2)}</td>`).join('') + `<td>${total.toFixed(1)}</td><td></td>`;
    const svg = el('svg', {width: 240, height: 14}, tr.lastChild);
    let x = 0;
    s.mem.forEach((v, k) => { const w = v / max * 240; el('rect', {x: x, y: 2, width: w, height: 10, fill: colors[k]}, svg).appendChild(document.createElementNS(NS, 'title')).textContent = `${names[k]} ${v.toFixed(2)} GB`; x += w; });
    el('line', {x1: D.limit_gb / max * 240, y1: 0, x2: D.limit_gb / max * 240, y2: 14, stroke: '#c33'}, svg);
    tb.appendChild(tr);
  }
}
// Pareto front: tokens/s against the objective's other figures (linear axes).
function xy(id, pts, fx, fy, xl, yl) {
  const W = 440, H = 300, L = 70, R = 16, T = 14, B = 44;
  const svg = el('svg', {width: W, height: H}, document.getElementById(id));
  const xs = pts.map(fx), ys = pts.map(fy);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const dx = (x1 - x0) || Math.abs(x1) || 1, dy = (y1 - y0) || Math.abs(y1) || 1;
  const X = v => L + (v - x0 + dx * 0.05) / (dx * 1.1) * (W - L - R);
  const Y = v => H - B - (v - y0 + dy * 0.05) / (dy * 1.1) * (H - T - B);
  el('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#444'}, svg);
  el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#444'}, svg);
  for (const [v, anchor] of [[x0, 'start'], [x1, 'end']])
    el('text', {x: X(v), y: H - B + 16, 'text-anchor': anchor, 'font-size': 11}, svg).textContent = v.toPrecision(3);
  for (const v of [y0, y1])
    el('text', {x: L - 6, y: Y(v) + 4, 'text-anchor': 'end', 'font-size': 11}, svg).textContent = v.toPrecision(3);
  el('text', {x: (W + L) / 2, y: H - 8, 'text-anchor': 'middle'}, svg).textContent = xl;
  el('text', {x: 14, y: (H - B) / 2, transform: `rotate(-90 14 ${(H - B) / 2})`, 'text-anchor': 'middle'}, svg).textContent = yl;
  pts.forEach((p, i) => el('circle', {cx: X(xs[i]), cy: Y(ys[i]), r: 4, fill: '#e66100', 'fill-opacity': 0.9}, svg)
    .appendChild(document.createElementNS(NS, 'title')).textContent = strat(p));
}
// The best strategies' figures as horizontal bars, one chart per figure.
function bars(id, k, label, scale) {
  const rows = D.top, W = 300, h = 18, L = 40;
  const svg = el('svg', {width: W, height: rows.length * h + 24}, document.getElementById(id));
  el('text', {x: 0, y: 12, 'font-size': 12}, svg).textContent = label;
  const max = Math.max(...rows.map(r => r[k])) || 1;
  rows.forEach((r, i) => {
    const y = 20 + i * h, w = r[k] / max * (W - L - 60);
    el('text', {x: 0, y: y + 11, 'font-size': 11}, svg).textContent = r[0];
    el('rect', {x: L, y: y, width: w, height: h - 6, fill: '#4c72b0'}, svg);
    el('text', {x: L + w + 4, y: y + 11, 'font-size': 11}, svg).textContent = (r[k] * scale).toPrecision(3);
  });
}
function objectives() {
  const front = D.points.filter(p => p[4]);
  if (D.priced) xy('front_cost', front, p => p[3], p => p[16], 'tokens/s', '$ per million tokens');
  if (D.powered) xy('front_energy', front, p => p[3], p => p[17], 'tokens/s', 'joules per token');
  xy('front_tei', front, p => p[3], p => p[15], 'tokens/s', 'TEI');
  bars('bars_tei', 1, 'TEI (%)', 100);
  if (D.priced) bars('bars_cost', 2, '$ per million tokens', 1);
  if (D.powered) bars('bars_energy', 3, 'joules per token', 1);
  if (D.top.length && D.top[0][4] > 0) bars('bars_speedup', 4, 'speed-up vs baseline (x)', 1);
}
scatter();
stages();
objectives();
</script>)";

}  // namespace

std::string html_report(const PlanInput& in, const SearchResult& r, const std::string& explanation,
                        const std::string& launch, const Prediction* baseline) {
  // Points: every Pareto candidate, then the best of the rest on the objective.
  std::vector<const Candidate*> pts;
  for (const Candidate& c : r.feasible)
    if (c.pareto) pts.push_back(&c);
  for (const Candidate& c : r.feasible) {
    if (pts.size() >= kMaxPoints) break;
    if (!c.pareto) pts.push_back(&c);
  }
  // Best on the objective first: the first point is drawn as the winner.
  std::sort(pts.begin(), pts.end(), [&r](const Candidate* a, const Candidate* b) {
    return objective_score(r.objective, a->figures()) > objective_score(r.objective, b->figures());
  });
  std::string data = "{\"gbs\":" + std::to_string(r.global_batch) +
                     ",\"limit_gb\":" + num(in.memory_limit_bytes / 1073741824.0) + ",\"points\":[";
  for (size_t i = 0; i < pts.size(); ++i) {
    if (i) data += ',';
    data += point(*pts[i]);
  }
  data += "],\"stages\":[";
  if (!r.top.empty())
    for (size_t i = 0; i < r.top[0].stages.size(); ++i) {
      if (i) data += ',';
      data += stage_json(r.top[0].stages[i], static_cast<int>(i));
    }
  data += "],\"top\":" + top_json(in, r.top, baseline);
  data += std::string(",\"priced\":") + (in.cluster.device.hourly_cost_usd > 0 ? "true" : "false");
  data += std::string(",\"powered\":") + (in.cluster.device.tdp_watts > 0 ? "true" : "false");
  data += "}";

  const std::string title = "cann-train search: " + in.model.name + " on " + in.cluster.name;
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" +
                  html_escape(title) + "</title>" + kStyle + "</head><body>\n";
  h += "<h1>" + html_escape(title) + "</h1>\n";
  char summary[512];
  std::snprintf(summary, sizeof(summary),
                "<p>%d devices, global batch %d sequences. %lld strategies in the space, %lld "
                "priced, %lld cut by the memory bound; %zu feasible, %d on the Pareto front over "
                "the objective, memory and goodput. Search time %.3f s.</p>\n",
                in.cluster.num_devices(), r.global_batch, r.space, r.evaluated, r.pruned,
                r.feasible.size(), r.pareto_count, r.search_time_s);
  h += summary;
  h += "<h2>Feasible candidates</h2><p class=\"legend\">showing " + std::to_string(pts.size()) +
       " of " + std::to_string(r.feasible.size()) +
       "<span style=\"background:#5e81ac\"></span>candidate<span "
       "style=\"background:#e66100\"></span>Pareto front<span style=\"border:2px solid "
       "#000;width:8px;height:8px\"></span>winner; dashed: memory limit. Hover for the "
       "strategy.</p>\n<div id=\"scatter\"></div><div id=\"tip\"></div>\n";
  h += "<h2>Best strategies</h2><pre>" +
       html_escape(strategy_table(in, r.top, r.objective, baseline)) + "</pre>\n";
  h += "<h2>Objectives: throughput, cost, energy, TEI</h2><p>Ranked by " +
       std::string(objective_name(r.objective)) + " (" +
       std::string(objective_quantity(r.objective)) +
       "). The Pareto front's tokens/s against its cost per million tokens, energy per token and "
       "TEI" +
       (in.cluster.device.hourly_cost_usd > 0 ? "" : " (no cost plot: the cluster has no price)") +
       (in.cluster.device.tdp_watts > 0 ? "" : " (no energy plot: the cluster has no TDP)") +
       "; then the best strategies' figures as bars. Hover a point for its strategy.</p>\n"
       "<div style=\"display:flex;flex-wrap:wrap\"><div id=\"front_cost\"></div>"
       "<div id=\"front_energy\"></div><div id=\"front_tei\"></div></div>\n"
       "<div style=\"display:flex;flex-wrap:wrap;gap:24px\"><div id=\"bars_tei\"></div>"
       "<div id=\"bars_cost\"></div><div id=\"bars_energy\"></div>"
       "<div id=\"bars_speedup\"></div></div>\n";
  h += "<h2>Winner: per-stage allocation</h2>\n<table><thead><tr><th>stage</th><th>layers</th>"
       "<th>fwd ms/mb</th><th>bwd ms/mb</th><th>comm ms/mb</th><th>dp tail ms</th>"
       "<th>optimizer ms</th><th>weights GB</th><th>grads GB</th><th>optimizer GB</th>"
       "<th>activations GB</th><th>transient GB</th><th>reserved GB</th><th>total GB</th>"
       "<th>memory</th></tr></thead><tbody id=\"stages\"></tbody></table>\n";
  h += "<h2>Explanation</h2><pre>" + html_escape(explanation) + "</pre>\n";
  h += "<h2>Launch</h2><pre>" + html_escape(launch) + "</pre>\n";
  h += "<script type=\"application/json\" id=\"data\">" + data + "</script>\n";
  h += kScript;
  h += "\n</body></html>\n";
  return h;
}

}  // namespace cann::plan
