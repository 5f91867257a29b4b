// A dry-run's memory plan (POST /v1/jobs?dry_run=true) as a table: GiB per worker and per role,
// what the worker must hold against its capacity, and the verdict.

import { h } from "./ui.js";

const COLUMNS = [["weights_bytes", "Weights"], ["gradients_bytes", "Gradients"], ["optimizer_bytes", "Optimizer"],
                 ["activations_bytes", "Activations"], ["total_bytes", "Device total"], ["host_bytes", "Host"]];

export function gib(n) { return n === null || n === undefined ? "—" : `${(n / 2 ** 30).toFixed(2)}`; }

export function memoryPlanView(plan) {
  const rows = Object.entries(plan.roles || {}).map(([role, m]) => [role, m]);
  if (plan.per_worker) rows.push(["per worker", plan.per_worker]);
  const w = plan.per_worker;
  const cap = plan.capacity || {};
  const verdict = plan.fits === true ? "fits" : plan.fits === false ? "does not fit" : "unknown capacity";
  return h("div#memory-plan",
    h("p", `${plan.method} on ${plan.num_workers} ${plan.device.toUpperCase()} worker${plan.num_workers === 1 ? "" : "s"}`,
      plan.colocated ? " (roles colocated)" : "", ": ", h("b", verdict), plan.param ? ` (change ${plan.param})` : ""),
    plan.detail ? h("p.muted.small", plan.detail) : null,
    h("div.table-wrap", h("table.mem-table",
      h("caption.muted.small", "GiB, estimated, on one worker"),
      h("thead", h("tr", h("th", { scope: "col" }, "Role"), COLUMNS.map(([, t]) => h("th.num", { scope: "col" }, t)))),
      h("tbody", rows.map(([role, m]) => h(`tr${role === "per worker" ? ".total" : ""}`, h("th", { scope: "row" }, role),
        COLUMNS.map(([k]) => h("td.num", gib(m[k])))))))),
    w ? h("p.small", `Required per worker: ${gib(w.required_bytes)} GiB (runtime ${gib(w.runtime_bytes)} GiB`,
      w.allocator_bytes ? `, allocator ${gib(w.allocator_bytes)} GiB` : "", `) against `,
      cap.gpu_bytes ? `${gib(cap.gpu_bytes)} GiB GPU` : cap.host_bytes ? `${gib(cap.host_bytes)} GiB host` : "an unknown capacity",
      ".") : h("p.muted.small", "The API could not read the model's config.json: no per-worker estimate."));
}
