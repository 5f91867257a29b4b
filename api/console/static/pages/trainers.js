// Interactive trainers (`/v1/trainers`; a Tinker client's training clients are trainers too): the
// list with status, step and tokens; one trainer's summary, its loss per optimizer step (from its
// forward_backward operations) and its operations log; Delete ends one (its actor released, the
// models it saved kept).

import { api, listAll } from "../api.js";
import { MetricCharts } from "../charts.js";
import { badge, clear, duration, errorBox, h, ident, num, table, when } from "../ui.js";

export async function trainersPage(main, _params, page) {
  const id = page.query.get("id");
  if (id) { await trainerPage(main, id, page); return; }
  const list = h("div#trainers-list");
  main.append(h("div.page-head", h("h2", "Trainers")),
    h("p.muted.small", "Interactive trainers take forward/backward, optimizer-step and sample calls one at a time ",
      "(the native /v1/trainers routes, and Tinker clients' training clients)."), list);
  async function load() {
    try {
      const trainers = await listAll("/v1/trainers", {}, 200);
      clear(list, table([
        { title: "Trainer", render: (t) => h("a", { href: `#/trainers?id=${encodeURIComponent(t.id)}` }, ident(t.id)) },
        { title: "Status", render: (t) => badge(t.status) },
        { title: "Model", render: (t) => ident(t.model, 40) },
        { title: "LoRA rank", render: (t) => (t.lora ? String(t.lora.rank) : "full") },
        { title: "Step", render: (t) => String(t.step) },
        { title: "Tokens", render: (t) => String(t.tokens) },
        { title: "Last used", render: (t) => when(t.last_used_at) },
      ], trainers, { empty: "No trainers yet." }));
    } catch (err) { if (!page.signal.aborted) clear(list, errorBox(err)); }
  }
  await load();
  page.every(5000, load);
}

/** Loss per optimizer step: each forward_backward's loss, at the step its gradients went into. */
export function lossPerStep(operations) {
  const points = new Map();
  let step = 1;
  for (const op of [...operations].sort((a, b) => a.seq - b.seq)) {
    if (op.status !== "succeeded") continue;
    if (op.kind === "optim_step") { step = (op.result?.step ?? step) + 1; continue; }
    if (op.kind !== "forward_backward") continue;
    const loss = op.result?.metrics?.["loss:sum"];
    if (typeof loss === "number") points.set(step, (points.get(step) ?? 0) + loss);
  }
  return points;
}

async function trainerPage(main, id, page) {
  const head = h("div.page-head");
  const summary = h("div.card.summary");
  const chartsRoot = h("div#charts.charts");
  const ops = h("div#operations");
  const notice = h("div");
  main.append(head, notice, summary, h("section.card", h("h3", "Loss per step"), chartsRoot),
    h("section.card", h("h3", "Operations"), ops));
  const charts = new MetricCharts(chartsRoot);
  page.onLeave(() => charts.destroy());
  let trainer;

  async function del(e) {
    if (!confirm(`Delete ${id}? Its actor is released without a save; the models it saved stay.`)) return;
    e.target.disabled = true;
    try {
      trainer = await api(`/v1/trainers/${encodeURIComponent(id)}`, { method: "DELETE" });
      render();
    } catch (err) { clear(notice, errorBox(err)); e.target.disabled = false; }
  }

  function render() {
    const ended = ["deleted", "failed"].includes(trainer.status);
    clear(head, h("h2", h("a", { href: "#/trainers" }, "Trainers"), " / ", ident(trainer.id)), badge(trainer.status),
      ended ? null : h("button.danger#delete-trainer", { type: "button", onclick: del }, "Delete"));
    const rows = [["Model", ident(trainer.model)], ["LoRA", trainer.lora ? `rank ${trainer.lora.rank}` : "full fine-tuning"],
      ["Step", String(trainer.step)], ["Last full save", trainer.last_saved_step ?? "—"], ["Tokens", String(trainer.tokens)],
      ["Created", when(trainer.created_at)], ["Last used", when(trainer.last_used_at)],
      ["Idle timeout", duration(trainer.idle_timeout_s)]];
    if (trainer.error) rows.push(["Error", h("span.error-text", `${trainer.error.code}: ${trainer.error.message}`)]);
    clear(summary, h("dl.kv", rows.map(([k, v]) => [h("dt", k), h("dd", v)])));
  }

  async function load() {
    try {
      trainer = await api(`/v1/trainers/${encodeURIComponent(id)}`, { signal: page.signal });
      render();
      const operations = await listAll(`/v1/trainers/${encodeURIComponent(id)}/operations`, {}, 1000);
      for (const [step, loss] of lossPerStep(operations)) charts.addMetrics(step, { loss });
      clear(ops, table([
        { title: "#", render: (o) => String(o.seq) },
        { title: "Kind", render: (o) => o.kind },
        { title: "Status", render: (o) => badge(o.status) },
        { title: "Tokens", render: (o) => String(o.tokens) },
        { title: "Loss", render: (o) => num(o.result?.metrics?.["loss:sum"]) },
        { title: "Took", render: (o) => (o.started_at && o.finished_at ? duration(o.finished_at - o.started_at) : "—") },
        { title: "Created", render: (o) => when(o.created_at) },
        { title: "Error", render: (o) => (o.error ? `${o.error.code}: ${o.error.message}` : "") },
      ], operations.slice(0, 200), { empty: "No operations yet." }));
    } catch (err) { if (!page.signal.aborted) clear(notice, errorBox(err)); }
  }
  await load();
  page.every(5000, () => { if (!["deleted", "failed"].includes(trainer?.status)) load(); });
}
