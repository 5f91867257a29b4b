// The jobs list: status, method, model, progress and ETA; filter by status (the API's) and method
// (here: the list route has no method filter). Refreshes every few seconds. Ticked jobs open together
// in the comparison page (their metrics overlaid).

import { api } from "../api.js";
import { badge, clear, duration, errorBox, h, ident, progressBar, table, when } from "../ui.js";

const STATUSES = ["", "queued", "running", "cancelling", "pausing", "paused", "succeeded", "failed", "cancelled"];
const METHODS = ["", "sft", "reward_model", "rm_distill", "dpo", "ppo", "eval"];

export async function jobsPage(main, _params, page) {
  const status = page.query.get("status") || "";
  const method = page.query.get("method") || "";
  const setFilter = (key, value) => {
    const q = new URLSearchParams(page.query);
    if (value) q.set(key, value); else q.delete(key);
    location.hash = `#/jobs${q.toString() ? `?${q}` : ""}`;
  };
  const select = (label, key, options, value) => h("label.inline", label,
    h("select", { dataset: { filter: key }, onchange: (e) => setFilter(key, e.target.value) },
      options.map((o) => h("option", { value: o, selected: o === value }, o || "any"))));
  const list = h("div#jobs-list");
  const chosen = new Set();
  const compare = h("button#compare", { type: "button", disabled: true,
    onclick: () => { location.hash = `#/compare?jobs=${[...chosen].map(encodeURIComponent).join(",")}`; } }, "Compare");
  const syncCompare = () => {
    compare.disabled = chosen.size < 2;
    compare.textContent = chosen.size ? `Compare (${chosen.size})` : "Compare";
  };
  main.append(
    h("div.page-head", h("h2", "Jobs"), compare, h("a.button.primary", { href: "#/new" }, "New job")),
    h("div.filters", select("Status", "status", STATUSES, status), select("Method", "method", METHODS, method)),
    list);

  async function load() {
    try {
      const pageOf = await api("/v1/jobs", { query: { limit: 100, status }, signal: page.signal });
      const jobs = pageOf.data.filter((j) => !method || j.method.type === method);
      clear(list, table([
        { title: "Compare", render: (j) => h("input", { type: "checkbox", checked: chosen.has(j.id), dataset: { compare: j.id },
          "aria-label": `Compare ${j.id}`, onchange: (e) => { if (e.target.checked) chosen.add(j.id); else chosen.delete(j.id); syncCompare(); } }) },
        { title: "Job", render: (j) => h("a", { href: `#/jobs/${j.id}` }, j.suffix ? `${j.id} (${j.suffix})` : j.id) },
        { title: "Status", render: (j) => badge(j.status) },
        { title: "Method", render: (j) => j.method.type },
        { title: "Model", render: (j) => ident(j.model, 32) },
        { title: "Progress", render: (j) => progressBar(j.progress) },
        { title: "ETA", render: (j) => j.status === "running" ? duration(j.progress.seconds_remaining)
          : j.status === "queued" && j.queue_position ? `#${j.queue_position} in queue` : "—" },
        { title: "Created", render: (j) => when(j.created_at) },
      ], jobs, { empty: "No jobs match." }));
    } catch (err) {
      if (!page.signal.aborted) clear(list, errorBox(err));
    }
  }
  await load();
  page.every(4000, load);
}
