// A job's configuration as text: JSON or YAML (a small writer for plain JSON values), copyable;
// and the flattened dotted keys the comparison page diffs between runs.

import { h } from "./ui.js";

const PLAIN = /^[A-Za-z_][\w.\-/]*$/;

function scalar(v) {
  if (v === null || v === undefined) return "null";
  if (typeof v === "string") {
    const reserved = /^(true|false|null|yes|no|on|off|~|[-+]?[\d.]+(e[-+]?\d+)?)$/i.test(v);
    return PLAIN.test(v) && !reserved ? v : JSON.stringify(v);
  }
  return String(v);
}

/** YAML for a JSON value (block style; empty collections inline). */
export function toYaml(value, indent = "") {
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return value.map((v) => {
      const inner = toYaml(v, `${indent}  `);
      return `${indent}- ${typeof v === "object" && v !== null && Object.keys(v).length ? inner.trimStart() : inner}`;
    }).join("\n");
  }
  if (value && typeof value === "object") {
    const keys = Object.keys(value);
    if (!keys.length) return "{}";
    return keys.map((k) => {
      const v = value[k];
      const key = PLAIN.test(k) ? k : JSON.stringify(k);
      if (v && typeof v === "object" && Object.keys(v).length) return `${indent}${key}:\n${toYaml(v, `${indent}  `)}`;
      return `${indent}${key}: ${typeof v === "object" && v !== null ? toYaml(v) : scalar(v)}`;
    }).join("\n");
  }
  return scalar(value);
}

/** {a: {b: 1}} -> {"a.b": 1}; arrays stay values (a list of stop strings is one setting). */
export function flatten(value, prefix = "", out = {}) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
    if (!Object.keys(value).length && prefix) out[prefix] = {};
  } else if (prefix) {
    out[prefix] = value;
  }
  return out;
}

/** A configuration viewer: JSON / YAML tabs and a copy button; `source` says where it came from. */
export function configView(config, source) {
  let format = "json";
  const pre = h("pre.code#config-text", { tabindex: "0", "aria-label": "Resolved configuration" });
  const status = h("span.muted.small", { role: "status" });
  const text = () => (format === "json" ? JSON.stringify(config, null, 2) : toYaml(config));
  const tabs = ["json", "yaml"].map((f) => h("button.small", { type: "button", dataset: { format: f },
    "aria-pressed": String(f === format), onclick: () => { format = f; render(); } }, f.toUpperCase()));
  function render() {
    pre.textContent = text();
    for (const t of tabs) t.setAttribute("aria-pressed", String(t.dataset.format === format));
  }
  async function copy() {
    try {
      await navigator.clipboard.writeText(text());
      status.textContent = "copied";
    } catch {  // no clipboard (an insecure origin): select the text for a manual copy
      getSelection().selectAllChildren(pre);
      status.textContent = "selected: press Ctrl+C";
    }
  }
  render();
  return h("div.config-view",
    h("div.section-head", h("p.muted.small", source), h("div.actions", tabs,
      h("button.small#copy-config", { type: "button", onclick: copy }, "Copy"), status)),
    pre);
}
