// DOM building and formatting shared by the pages. Text always goes in as text nodes (never HTML):
// everything shown comes from the API, and file previews are user data.

/** h("div.card#id", {onclick}, child, "text", [children]) */
export function h(tag, attrs, ...children) {
  const id = /#([\w-]+)/.exec(tag)?.[1];
  const [name, ...classes] = tag.replace(/#[\w-]+/, "").split(".");
  const el = document.createElement(name || "div");
  if (id) el.id = id;
  if (classes.length) el.className = classes.join(" ");
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el, ...children) { el.replaceChildren(); append(el, children); return el; }

export function when(unix) {
  if (!unix) return "—";
  const d = new Date(unix * 1000);
  return d.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
                                      second: "2-digit" });
}

/** Long text cut in the middle ("/models/…/checkpoint-40"): both ends of a path say the most. */
export function middle(text, max = 48) {
  const s = String(text ?? "");
  if (s.length <= max) return s;
  const head = Math.ceil((max - 1) / 2);
  return `${s.slice(0, head)}…${s.slice(s.length - (max - 1 - head))}`;
}

/** An id or a path in the one style the console uses: monospace, cut in the middle, whole in the tooltip. */
export function ident(text, max = 48) {
  if (text === null || text === undefined || text === "") return "—";
  return h("span.mono.ident", { title: String(text) }, middle(text, max));
}

export function duration(s) {
  if (s === null || s === undefined) return "—";
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m ${s % 60}s`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function num(v) {
  if (typeof v !== "number") return v === null || v === undefined ? "—" : String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(3) : v.toPrecision(4);
}

export function badge(status) { return h(`span.badge.s-${status}`, status); }

export function progressBar(progress) {
  const { step, total_steps: total } = progress || {};
  const known = typeof step === "number" && total > 0;
  const frac = known ? Math.min(1, step / total) : 0;
  return h("div.progress", { title: known ? `${step} / ${total}` : "no steps yet",
                             role: "progressbar", "aria-valuenow": String(Math.round(frac * 100)) },
    h("div.progress-fill", { style: `width:${(frac * 100).toFixed(1)}%` }),
    h("span.progress-text", known ? `${step}/${total}` : "—"));
}

export function errorBox(err) {
  const lines = [err.message || String(err)];
  if (err.code) lines.unshift(err.code);
  return h("div.error", { role: "alert" }, lines.join(": "));
}

export function table(columns, rows, { empty = "Nothing yet." } = {}) {
  if (!rows.length) return h("p.muted", empty);
  return h("div.table-wrap", h("table",
    h("thead", h("tr", columns.map((c) => h("th", c.title)))),
    h("tbody", rows.map((r) => h("tr", columns.map((c) => h("td", { "data-label": c.title }, c.render(r))))))));
}

/** Short text for any JSON value in a table cell. */
export function cell(value, max = 160) {
  const s = typeof value === "string" ? value : JSON.stringify(value);
  return s && s.length > max ? `${s.slice(0, max)}…` : s ?? "";
}
