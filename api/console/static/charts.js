// Metric charts (uPlot, vendored). The data (per run, per metric: steps and values) is kept apart
// from the layout, which is recomputed whenever a new name arrives: a method's key metrics first,
// then one chart per quantity in sections by the name's prefix before "/" (VERL's logger groups),
// a validation series drawn on its training quantity's chart. View options (EMA smoothing, log
// scale, the x axis, search, pins) re-plot from the data. Several runs overlay with a colour each.
// Checkpoints and guardrail warnings are vertical markers; drag zooms, double-click zooms out.

import { h, num } from "./ui.js";
import { drawMarkers, ema, rangeOf, tick } from "./plotting.js";

const GROUP_ORDER = ["critic", "actor", "train", "rewards", "rm", "response_length", "val", "distill", "eval", "timing_s", "perf"];
export const PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#4d7c0f", "#9333ea"];  // no red: warnings are red
const VAL_COLOR = "#d97706";
const HEIGHT = 170;
const KEY_HEIGHT = 110;

/** Per method: [title, candidate names (the first one logged is shown)]. GRPO is a PPO job. */
export const KEY_METRICS = {
  ppo: [["Reward mean", ["critic/score/mean", "train/reward/mean"]],
        ["KL", ["guardrails/kl", "actor/reward_kl_penalty", "actor/kl_loss", "actor/ppo_kl"]],
        ["Entropy", ["actor/entropy"]], ["Response length", ["response_length/mean"]],
        ["Throughput (tok/s)", ["perf/throughput"]]],
  sft: [["Loss", ["train/loss"]], ["Token accuracy", ["train/token_accuracy"]], ["Learning rate", ["train/lr"]],
        ["Throughput (tok/s)", ["perf/tokens_per_s"]]],
  dpo: [["Loss", ["train/loss"]], ["Accuracy", ["rewards/accuracies"]], ["Margin", ["rewards/margins"]],
        ["Throughput (tok/s)", ["perf/tokens_per_s"]]],
  reward_model: [["Accuracy", ["rm/accuracy"]], ["Margin", ["rm/margin_mean"]], ["Loss", ["rm/loss"]]],
  rm_distill: [["Loss", ["distill/loss"]], ["Agreement", ["distill/agreement"]], ["KL", ["distill/kl"]]],
  eval: [["Reward mean", ["eval/reward/mean"]], ["Win rate", ["eval/win_rate"]],
         ["Response length", ["eval/response_length/mean"]]],
};

const TOKEN_METRICS = ["perf/total_num_tokens", "train/response_tokens"];

function groupOf(name) {
  const i = name.indexOf("/");
  return i > 0 ? name.slice(0, i) : "general";
}

function groupRank(g) {
  const i = GROUP_ORDER.indexOf(g);
  return i < 0 ? GROUP_ORDER.length : i;
}

/** The training quantity a validation metric belongs with: val/loss -> train/loss, val/rm/x -> rm/x. */
function trainOf(name, names) {
  let rest = null;
  if (name.startsWith("val/")) rest = name.slice(4);
  else if (/^distill\/val_/.test(name)) return names.has(name.replace("val_", "")) ? name.replace("val_", "") : null;
  if (rest === null) return null;
  // PPO's training reward is the critic's score (VERL's name); its validation reward is val/reward/mean.
  const cands = [rest, `train/${rest}`, ...(rest === "reward/mean" ? ["critic/score/mean"] : [])];
  for (const c of cands) if (names.has(c)) return c;
  return null;
}

export class MetricCharts {
  /**
   * `root`: where the grouped sections go (its data-points counts every point); `keyRoot`: the key
   * metrics row (optional); `method`: the job's method type; `runs`: [{id, label}] when overlaying.
   */
  constructor(root, { keyRoot = null, method = null, runs = null, view = {} } = {}) {
    this.root = root;
    this.keyRoot = keyRoot;
    this.keys = KEY_METRICS[method] || [];
    this.runs = runs || [{ id: "", label: "" }];
    this.view = { smooth: 0, log: false, x: "step", query: "", pins: [], ...view };
    this.data = new Map();   // name -> [{steps, values}] per run
    this.info = this.runs.map(() => new Map());  // step -> {time, tokens}
    this.views = new Map();  // chart key -> {el, plot, members, zoomed}
    this.markers = [];
    this.lastStep = null;
    this.points = 0;
    this.layoutDirty = false;
    this.dirty = new Set();
    this.frame = 0;
    root.dataset.points = "0";
    root.dataset.charts = "0";
    this.onResize = () => { clearTimeout(this.resizeTimer); this.resizeTimer = setTimeout(() => this.resize(), 100); };
    window.addEventListener("resize", this.onResize);
  }

  destroy() {
    window.removeEventListener("resize", this.onResize);
    cancelAnimationFrame(this.frame);
    for (const v of this.views.values()) v.plot?.destroy();
    this.views.clear();
  }

  /** A `job.metrics` event's data: {step, values}; `time`: the event's unix seconds; `run`: its index. */
  addMetrics(step, values, time = null, run = 0) {
    if (typeof step !== "number") return;
    this.lastStep = Math.max(this.lastStep ?? step, step);
    const info = this.info[run];
    const prev = [...info.keys()].filter((s) => s < step).pop();
    const tokens = TOKEN_METRICS.map((n) => values?.[n]).find((v) => typeof v === "number");
    if (!info.has(step)) info.set(step, { time, tokens: (info.get(prev)?.tokens ?? 0) + (tokens ?? 0) });
    for (const [name, value] of Object.entries(values || {})) {
      if (typeof value !== "number" || !Number.isFinite(value)) continue;
      let per = this.data.get(name);
      if (!per) {
        per = this.runs.map(() => ({ steps: [], values: [] }));
        this.data.set(name, per);
        this.layoutDirty = true;
      }
      this.points += insert(per[run], step, value);
      this.dirty.add(name);
    }
    this.schedule();
  }

  /** A whole series at once (GET /v1/jobs/{id}/metrics), for an overlay. */
  addSeries(run, name, steps, values) {
    steps.forEach((s, i) => this.addMetrics(s, { [name]: values[i] }, null, run));
  }

  /** kind: "checkpoint" or "warning"; step null = the latest step seen. */
  addMarker(kind, step, label) {
    step = typeof step === "number" ? step : this.lastStep;
    if (step === null || step === undefined) return;
    this.markers.push({ kind, step, label });
    for (const name of this.data.keys()) this.dirty.add(name);
    this.schedule();
  }

  /** Change view options ({smooth, log, x, query, pins}) and re-plot. */
  setView(patch) {
    this.view = { ...this.view, ...patch };
    this.layoutDirty = true;
    for (const v of this.views.values()) { v.plot?.destroy(); v.plot = null; }
    for (const name of this.data.keys()) this.dirty.add(name);
    this.schedule();
  }

  togglePin(key) {
    const pins = this.view.pins.includes(key) ? this.view.pins.filter((p) => p !== key) : [...this.view.pins, key];
    this.setView({ pins });
    this.onPins?.(pins);
  }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => { this.frame = 0; this.flush(); });
  }

  /** chart key -> member names, and where each chart goes (key row, pinned, or its group). */
  layout() {
    const names = new Set(this.data.keys());
    const charts = new Map();
    for (const name of [...names].sort()) {
      const key = trainOf(name, names) || name;
      if (!charts.has(key)) charts.set(key, []);
      charts.get(key).push(name);
    }
    for (const members of charts.values()) members.sort((a, b) => (trainOf(a, names) ? 1 : 0) - (trainOf(b, names) ? 1 : 0));
    const keyCharts = this.keys.map(([title, cands]) => [title, cands.find((c) => charts.has(c))]).filter(([, c]) => c);
    return { charts, keyCharts };
  }

  flush() {
    if (this.layoutDirty) this.relayout();
    for (const [key, v] of this.views) {
      if (!v.members.some((m) => this.dirty.has(m)) && v.plot) continue;
      const data = this.series(v.members);
      if (!v.plot) v.plot = this.plot(v, data);
      else if (v.zoomed) { v.plot.setData(data, false); v.plot.redraw(false, true); }
      else v.plot.setData(data);
      v.el.dataset.points = String(v.members.reduce((n, m) => n + this.data.get(m).reduce((k, r) => k + r.steps.length, 0), 0));
      if (v.latest) v.latest.textContent = num(this.latest(v.members[0]));
      v.el.hidden = !this.matches(key, v.members);
    }
    this.dirty.clear();
    this.root.dataset.points = String(this.points);
  }

  matches(key, members) {
    const q = this.view.query.trim().toLowerCase();
    return !q || members.some((m) => m.toLowerCase().includes(q)) || key.toLowerCase().includes(q);
  }

  latest(name) {
    const r = this.data.get(name)?.[0];
    return r && r.values.length ? r.values[r.values.length - 1] : null;
  }

  relayout() {
    this.layoutDirty = false;
    const { charts, keyCharts } = this.layout();
    const keyOf = new Map(keyCharts.map(([title, c]) => [c, title]));
    const want = new Map();
    for (const [key, members] of charts) {
      const where = keyOf.has(key) && this.keyRoot ? "key" : this.view.pins.includes(key) ? "pinned" : groupOf(key);
      want.set(key, { members, where, title: keyOf.get(key) });
    }
    for (const [key, v] of this.views) {  // a chart whose members or place changed is drawn again
      const w = want.get(key);
      if (w && w.where === v.where && w.members.join() === v.members.join()) continue;
      v.plot?.destroy();
      v.el.remove();
      this.views.delete(key);
    }
    if (this.keyRoot) {
      this.keyRoot.hidden = keyCharts.length === 0;
      this.keyRoot.dataset.keys = keyCharts.map(([, c]) => c).join(",");
    }
    for (const [key, w] of want) {
      if (this.views.has(key)) continue;
      const v = { ...w, key, zoomed: false, plot: null };
      v.el = h("div.chart", { dataset: { metric: key, points: "0" } });
      const pin = h("button.pin", { type: "button", title: "Pin to the top", "aria-label": `Pin ${key}`,
        "aria-pressed": String(this.view.pins.includes(key)), onclick: () => this.togglePin(key) },
        this.view.pins.includes(key) ? "★" : "☆");
      if (w.where === "key") {
        v.latest = h("span.key-value");
        v.el.classList.add("key-chart");
        v.el.append(h("div.chart-title", h("span", w.title), v.latest), h("div.chart-name.muted", key));
      } else {
        v.el.append(h("div.chart-title", h("span", w.members.join(" · ")), pin));
      }
      this.place(v);
      this.views.set(key, v);
      for (const m of w.members) this.dirty.add(m);
    }
    for (const section of [...this.root.querySelectorAll(".chart-group")]) {
      if (!section.querySelector(".chart")) section.remove();
    }
    this.root.dataset.charts = String(this.views.size);
  }

  place(v) {
    if (v.where === "key") {
      const order = this.keys.map(([t]) => t);
      const after = [...this.keyRoot.children].find((el) => order.indexOf(el.dataset.title) > order.indexOf(v.title));
      v.el.dataset.title = v.title;
      this.keyRoot.insertBefore(v.el, after || null);
      return;
    }
    const group = v.where;
    let section = this.root.querySelector(`.chart-group[data-group="${CSS.escape(group)}"]`);
    if (!section) {
      const rank = group === "pinned" ? -1 : groupRank(group);
      section = h("section.chart-group", { dataset: { group, rank: String(rank) } },
        h("h3", group === "pinned" ? "★ pinned" : group), h("div.chart-grid"));
      const after = [...this.root.children].find((el) => Number(el.dataset.rank) > rank ||
        (Number(el.dataset.rank) === rank && el.dataset.group > group));
      this.root.insertBefore(section, after || null);
    }
    const grid = section.querySelector(".chart-grid");
    grid.insertBefore(v.el, [...grid.children].find((c) => c.dataset.metric > v.key) || null);
  }

  /** uPlot data: [x, raw and smoothed y per (member, run)], x by the chosen axis. */
  series(members) {
    const steps = [...new Set(members.flatMap((m) => this.data.get(m).flatMap((r) => r.steps)))].sort((a, b) => a - b);
    const t0 = Math.min(...[...this.info[0].values()].map((i) => i.time ?? Infinity));
    const x = steps.map((s) => this.xOf(s, t0));
    const out = [x];
    for (const m of members) {
      this.data.get(m).forEach((r) => {
        const at = new Map(r.steps.map((s, i) => [s, r.values[i]]));
        const raw = steps.map((s) => (at.has(s) ? at.get(s) : null));
        out.push(raw);
        if (this.view.smooth > 0) out.push(ema(raw, this.view.smooth));
      });
    }
    return out;
  }

  xOf(step, t0) {
    if (this.view.x === "step") return step;
    const info = this.info[0].get(step);
    if (this.view.x === "time") return info?.time != null ? info.time - t0 : step;
    return info?.tokens ?? step;
  }

  width(v) { return Math.max(160, Math.floor(v.el.clientWidth - 2)); }

  plot(v, data) {
    const markers = () => (this.view.x === "step" ? this.markers : []);
    const overlay = this.runs.length > 1;
    const series = [{ label: { step: "step", time: "seconds", tokens: "tokens" }[this.view.x] }];
    const smoothing = this.view.smooth > 0;
    const legend = [];
    v.members.forEach((m, mi) => this.runs.forEach((run, ri) => {
      // Overlaid runs: a colour per run (validation dashed); one run: training blue, validation orange.
      const color = overlay ? PALETTE[ri % PALETTE.length] : mi ? VAL_COLOR : PALETTE[0];
      const dash = overlay && mi ? [5, 3] : undefined;
      const label = overlay ? `${run.label}${v.members.length > 1 ? ` ${m}` : ""}` : m;
      legend.push([color, label]);
      // Smoothed: the raw line stays, faint, under the average (as TensorBoard draws it).
      series.push({ label: smoothing ? `${label} (raw)` : label, stroke: smoothing ? `${color}40` : color,
                    width: smoothing ? 1 : 1.5, dash, spanGaps: true, points: { show: !smoothing && data[0].length < 40, size: 4 } });
      if (smoothing) series.push({ label, stroke: color, width: 1.75, dash, spanGaps: true, points: { show: false } });
    }));
    const logY = this.view.log && data.slice(1).every((ys) => ys.every((y) => y === null || y > 0));
    const opts = {
      width: this.width(v), height: v.where === "key" ? KEY_HEIGHT : HEIGHT,
      legend: { show: false },
      scales: { x: { time: false, range: (u, lo, hi) => rangeOf(lo, hi) },
                y: logY ? { distr: 3 } : { range: (u, lo, hi) => rangeOf(lo, hi) } },
      cursor: { sync: { key: "keel-steps" }, drag: { x: true, y: false }, points: { size: 6 } },
      series,
      axes: [{ size: 30, font: "11px system-ui, sans-serif", values: (u, vals) => vals.map(tick) },
             { size: 56, font: "11px system-ui, sans-serif", values: (u, vals) => vals.map(tick) }],
      hooks: {
        setSelect: [(u) => { if (u.select.width > 0) { v.zoomed = true; v.el.dataset.zoomed = "true"; } }],
        draw: [(u) => drawMarkers(u, markers())],
        setCursor: [(u) => this.showValue(u, v)],
      },
    };
    v.el.dataset.log = String(logY);
    const plot = new uPlot(opts, data, v.el);
    v.el.plot = plot;  // the tests read the plotted values from here
    plot.over.addEventListener("dblclick", () => { v.zoomed = false; v.el.dataset.zoomed = "false"; });
    v.readout = h("div.chart-readout");
    v.el.querySelector(".chart-legend")?.remove();
    if (legend.length > 1) {
      v.el.append(h("div.chart-legend", legend.map(([color, label]) =>
        h("span.legend-item", h("span.run-swatch", { style: `background:${color}` }), label))));
    }
    v.el.append(v.readout);
    return plot;
  }

  showValue(u, v) {
    const i = u.cursor.idx;
    if (i === null || i === undefined) { v.readout.textContent = ""; return; }
    const parts = [];
    const stride = this.view.smooth > 0 ? 2 : 1;  // the smoothed value when smoothing, else the raw one
    for (let s = stride; s < u.data.length; s += stride) {
      const y = u.data[s][i];
      if (y !== null && y !== undefined) parts.push(num(y));
    }
    v.readout.textContent = `${u.series[0].label} ${num(u.data[0][i])}: ${parts.join(" / ")}`;
  }

  resize() {
    for (const v of this.views.values()) {
      if (v.plot) v.plot.setSize({ width: this.width(v), height: v.where === "key" ? KEY_HEIGHT : HEIGHT });
    }
  }
}

/** Put (step, value) in a run's sorted series; returns 1 for a new point, 0 for a replaced one. */
function insert(r, step, value) {
  const n = r.steps.length;
  if (!n || r.steps[n - 1] < step) { r.steps.push(step); r.values.push(value); return 1; }
  const i = r.steps.findIndex((x) => x >= step);
  if (r.steps[i] === step) { r.values[i] = value; return 0; }
  r.steps.splice(i, 0, step);
  r.values.splice(i, 0, value);
  return 1;
}
