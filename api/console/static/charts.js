// Live metric charts (uPlot, vendored): one chart per metric, grouped into sections by the name's
// prefix before "/" the way VERL's logger groups them (actor/, critic/, val/, timing_s/, ...).
// Drag on a chart to zoom into steps, double-click to zoom back out. Checkpoints and guardrail
// warnings are vertical markers on every chart.

import { h, num } from "./ui.js";

const GROUP_ORDER = ["critic", "actor", "train", "response_length", "val", "distill", "rm", "timing_s", "perf"];
const PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#4d7c0f", "#9333ea"];  // no red: warnings are red
const CHART_HEIGHT = 170;

function groupOf(name) {
  const i = name.indexOf("/");
  return i > 0 ? name.slice(0, i) : "general";
}

function groupRank(g) {
  const i = GROUP_ORDER.indexOf(g);
  return i < 0 ? GROUP_ORDER.length : i;
}

export class MetricCharts {
  /** `root`: the element the sections go in; its `data-points` counts every plotted point. */
  constructor(root) {
    this.root = root;
    this.series = new Map();  // name -> {steps, values, chart, el, group}
    this.groups = new Map();  // group -> grid element
    this.markers = [];        // {step, label, kind}
    this.lastStep = null;
    this.dirty = new Set();
    this.frame = 0;
    this.points = 0;
    root.dataset.points = "0";
    root.dataset.charts = "0";
    this.onResize = () => { clearTimeout(this.resizeTimer); this.resizeTimer = setTimeout(() => this.resize(), 100); };
    window.addEventListener("resize", this.onResize);
  }

  destroy() {
    window.removeEventListener("resize", this.onResize);
    cancelAnimationFrame(this.frame);
    for (const s of this.series.values()) s.chart?.destroy();
    this.series.clear();
  }

  /** A `job.metrics` event's data: {step, values: {name: number}}. */
  addMetrics(step, values) {
    if (typeof step !== "number") return;
    this.lastStep = Math.max(this.lastStep ?? step, step);
    for (const [name, value] of Object.entries(values || {})) {
      if (typeof value !== "number" || !Number.isFinite(value)) continue;
      const s = this.series.get(name) || this.create(name);
      const n = s.steps.length;
      if (n && s.steps[n - 1] >= step) {  // an out-of-order or repeated step: keep steps sorted
        const i = s.steps.findIndex((x) => x >= step);
        if (s.steps[i] === step) { s.values[i] = value; } else { s.steps.splice(i, 0, step); s.values.splice(i, 0, value); this.points++; }
      } else {
        s.steps.push(step);
        s.values.push(value);
        this.points++;
      }
      this.dirty.add(name);
    }
    this.schedule();
  }

  /** kind: "checkpoint" or "warning"; step null = the latest step seen. */
  addMarker(kind, step, label) {
    step = typeof step === "number" ? step : this.lastStep;
    if (step === null || step === undefined) return;
    this.markers.push({ kind, step, label });
    for (const name of this.series.keys()) this.dirty.add(name);
    this.schedule();
  }

  create(name) {
    const group = groupOf(name);
    let grid = this.groups.get(group);
    if (!grid) {
      grid = h("div.chart-grid");
      const section = h("section.chart-group", { dataset: { group, rank: String(groupRank(group)) } },
        h("h3", group), grid);
      const after = [...this.root.children].find((el) =>
        Number(el.dataset.rank) > groupRank(group) ||
        (Number(el.dataset.rank) === groupRank(group) && el.dataset.group > group));
      this.root.insertBefore(section, after || null);
      this.groups.set(group, grid);
    }
    const el = h("div.chart", { dataset: { metric: name, points: "0" } }, h("div.chart-title", name));
    const siblings = [...grid.children];
    grid.insertBefore(el, siblings.find((c) => c.dataset.metric > name) || null);
    const s = { steps: [], values: [], chart: null, el, group, zoomed: false,
                color: PALETTE[this.groups.size % PALETTE.length] };
    this.series.set(name, s);
    this.root.dataset.charts = String(this.series.size);
    return s;
  }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => { this.frame = 0; this.flush(); });
  }

  flush() {
    for (const name of this.dirty) {
      const s = this.series.get(name);
      if (!s) continue;
      const data = [s.steps.slice(), s.values.slice()];
      if (!s.chart) s.chart = this.plot(name, s, data);
      else if (s.zoomed) { s.chart.setData(data, false); s.chart.redraw(false, true); }
      else s.chart.setData(data);
      s.el.dataset.points = String(s.steps.length);
    }
    this.dirty.clear();
    this.root.dataset.points = String(this.points);
  }

  width(s) { return Math.max(200, Math.floor(s.el.clientWidth - 2)); }

  plot(name, s, data) {
    const markers = () => this.markers;
    const opts = {
      width: this.width(s), height: CHART_HEIGHT,
      legend: { show: false },
      scales: { x: { time: false } },
      cursor: { sync: { key: "keel-steps" }, drag: { x: true, y: false }, points: { size: 6 } },
      series: [{ label: "step" },
               { label: name, stroke: s.color, width: 1.5, points: { show: data[0].length < 40, size: 4 } }],
      axes: [{ size: 30, font: "11px system-ui, sans-serif", values: (u, vals) => vals.map((v) => String(v)) },
             { size: 60, font: "11px system-ui, sans-serif", values: (u, vals) => vals.map(tick) }],
      hooks: {
        setSelect: [(u) => { if (u.select.width > 0) { s.zoomed = true; s.el.dataset.zoomed = "true"; } }],
        draw: [(u) => drawMarkers(u, markers())],
        setCursor: [(u) => showValue(u, s)],
      },
    };
    const chart = new uPlot(opts, data, s.el);
    chart.over.addEventListener("dblclick", () => { s.zoomed = false; s.el.dataset.zoomed = "false"; });
    s.readout = h("div.chart-readout");
    s.el.append(s.readout);
    return chart;
  }

  resize() {
    for (const s of this.series.values()) if (s.chart) s.chart.setSize({ width: this.width(s), height: CHART_HEIGHT });
  }
}

/** Axis labels: short, no trailing zeros (uPlot's defaults print 0.8000). */
function tick(v) {
  if (v === null) return "";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(1);
  return String(Number(v.toPrecision(4)));
}

function showValue(u, s) {
  const i = u.cursor.idx;
  s.readout.textContent = i === null || i === undefined ? "" : `step ${s.steps[i]}: ${num(s.values[i])}`;
}

function drawMarkers(u, markers) {
  const { ctx } = u;
  const { left, top, width, height } = u.bbox;
  const dpr = devicePixelRatio || 1;
  ctx.save();
  ctx.font = `${10 * dpr}px system-ui, sans-serif`;
  ctx.textAlign = "left";  // uPlot leaves the axes' alignment set
  ctx.textBaseline = "alphabetic";
  let warnings = 0;
  for (const m of markers) {
    const row = m.kind === "checkpoint" ? 0 : 1 + (warnings++ % 2);  // stagger labels of close warnings
    const x = Math.round(u.valToPos(m.step, "x", true));
    if (!(x >= left && x <= left + width)) continue;
    const color = m.kind === "checkpoint" ? "#0f766e" : "#dc2626";
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = dpr;
    ctx.setLineDash(m.kind === "checkpoint" ? [4 * dpr, 3 * dpr] : []);
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, top + height);
    ctx.stroke();
    const text = m.kind === "checkpoint" ? "◆" : `⚠ ${m.label}`;
    const flip = x + 3 * dpr + ctx.measureText(text).width > left + width;  // near the right edge: label on the left
    ctx.textAlign = flip ? "right" : "left";
    ctx.fillText(text, flip ? x - 3 * dpr : x + 3 * dpr, top + (11 + 12 * row) * dpr);
  }
  ctx.restore();
}
