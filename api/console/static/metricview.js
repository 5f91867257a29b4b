// The metric charts' view controls: search, EMA smoothing (TensorBoard's slider), log scale, the x
// axis (step, wall time, tokens seen) and pins. Their state lives in the page's URL query, so a link
// or a reload shows the same view; it is written with replaceState, which does not re-route.

import { h } from "./ui.js";

/** The view options a URL query holds. */
export function viewFromQuery(query) {
  const smooth = Number(query.get("smooth"));
  return {
    smooth: Number.isFinite(smooth) && smooth > 0 && smooth < 1 ? smooth : 0,
    log: query.get("log") === "1",
    x: ["step", "time", "tokens"].includes(query.get("x")) ? query.get("x") : "step",
    query: query.get("q") || "",
    pins: (query.get("pin") || "").split(",").filter(Boolean),
  };
}

function writeQuery(view) {
  const [path, qs] = location.hash.replace(/^#/, "").split("?");
  const q = new URLSearchParams(qs || "");
  const set = (k, v) => (v ? q.set(k, v) : q.delete(k));
  set("smooth", view.smooth ? String(view.smooth) : "");
  set("log", view.log ? "1" : "");
  set("x", view.x === "step" ? "" : view.x);
  set("q", view.query);
  set("pin", view.pins.join(","));
  const text = q.toString();
  history.replaceState(history.state, "", `#${path}${text ? `?${text}` : ""}`);
}

/** The controls bar for `charts` (a MetricCharts); `axes`: which x axes this page offers. */
export function viewControls(charts, { axes = ["step", "time", "tokens"] } = {}) {
  const v = charts.view;
  const update = (patch) => { charts.setView(patch); writeQuery(charts.view); };
  charts.onPins = () => writeQuery(charts.view);
  const smoothOut = h("output#smooth-value", v.smooth.toFixed(2));
  const labels = { step: "step", time: "wall time", tokens: "tokens seen" };
  return h("div.chart-controls",
    h("label.inline", "Search",
      h("input#metric-search", { type: "search", value: v.query, placeholder: "metric name", "aria-label": "Search metrics",
        oninput: (e) => update({ query: e.target.value }) })),
    h("label.inline", "Smoothing",
      h("input#smoothing", { type: "range", min: "0", max: "0.99", step: "0.01", value: String(v.smooth),
        "aria-label": "Smoothing (exponential moving average weight)",
        oninput: (e) => { smoothOut.value = Number(e.target.value).toFixed(2); update({ smooth: Number(e.target.value) }); } }),
      smoothOut),
    h("label.inline", h("input#log-scale", { type: "checkbox", checked: v.log,
      onchange: (e) => update({ log: e.target.checked }) }), "Log scale"),
    axes.length > 1 ? h("label.inline", "X axis",
      h("select#x-axis", { onchange: (e) => update({ x: e.target.value }) },
        axes.map((a) => h("option", { value: a, selected: a === v.x }, labels[a])))) : null);
}
