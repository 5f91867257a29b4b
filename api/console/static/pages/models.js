// Models: the list with downloads, and one model's lineage (`#/models?id=model-...`) read from the job
// specs: each Keel model's job names its base model, and for distillation its teacher, for PPO its
// reward model. Drawn oldest first, so the pipeline reads SFT -> RM -> distilled RM -> PPO.

import { api, download, listAll } from "../api.js";
import { clear, errorBox, h, ident, table, when } from "../ui.js";

const METHOD_LABEL = { sft: "SFT", reward_model: "RM", rm_distill: "distilled RM", ppo: "PPO", dpo: "DPO", eval: "eval" };

export async function modelsPage(main, _params, page) {
  const models = await listAll("/v1/models");
  const byId = new Map(models.map((m) => [m.id, m]));
  const jobs = new Map();
  const selected = page.query.get("id") || models[0]?.id;
  const lineage = h("section.card#lineage");
  const notice = h("div");
  main.append(h("div.page-head", h("h2", "Models")), notice, lineage,
    h("section.card", h("h3", "All models"), table([
      { title: "Model", render: (m) => h("a", { href: `#/models?id=${m.id}` }, m.id) },
      { title: "Name", render: (m) => m.name },
      { title: "Kind", render: (m) => m.kind },
      { title: "Format", render: (m) => m.format },
      { title: "Job", render: (m) => m.job_id ? h("a", { href: `#/jobs/${m.job_id}` }, m.job_id) : "—" },
      { title: "Created", render: (m) => when(m.created_at) },
      { title: "", render: (m) => h("button.small", { type: "button", dataset: { model: m.id },
        onclick: () => download(`/v1/models/${m.id}/content`, `${m.id}.tar`).catch((err) => clear(notice, errorBox(err))) },
      "Download") },
    ], models, { empty: "No models yet: every successful job registers one." })));

  if (!selected) { lineage.remove(); return; }

  async function model(id) {
    if (!byId.has(id)) byId.set(id, await api(`/v1/models/${encodeURIComponent(id)}`, { signal: page.signal }));
    return byId.get(id);
  }
  async function jobOf(m) {
    if (!m.job_id) return null;
    if (!jobs.has(m.job_id)) jobs.set(m.job_id, await api(`/v1/jobs/${encodeURIComponent(m.job_id)}`, { signal: page.signal }));
    return jobs.get(m.job_id);
  }
  function inputs(job) {
    if (!job) return [];
    const out = [["base", job.model]];
    if (job.method.teacher) out.push(["teacher", job.method.teacher]);
    if (job.method.reward?.model) out.push(["reward", job.method.reward.model]);
    if (job.method.reward?.function) out.push(["reward fn", job.method.reward.function]);
    return out;
  }

  // Ancestors in dependency order (depth-first, inputs before the model they feed).
  const chain = [];
  const seen = new Set();
  async function visit(id) {
    if (seen.has(id) || chain.length > 50) return;
    seen.add(id);
    const m = await model(id);
    const job = await jobOf(m);
    const ins = inputs(job);
    for (const role of ["base", "teacher", "reward"]) {
      for (const [r, ref] of ins) if (r === role && ref.startsWith("model-")) await visit(ref);
    }
    chain.push({ m, job, ins });
  }
  try {
    await visit(selected);
  } catch (err) {
    lineage.append(errorBox(err));
    return;
  }
  const steps = chain.map(({ m, job, ins }, i) => [
    i ? h("div.arrow", { "aria-hidden": "true" }, "→") : null,
    h("div.lineage-node", { dataset: { model: m.id, method: job?.method.type || "" },
                            class: `lineage-node${m.id === selected ? " current" : ""}` },
      h("div.lineage-method", METHOD_LABEL[job?.method.type] || m.kind),
      h("a.mono", { href: `#/models?id=${m.id}` }, m.id),
      h("div.muted.small", `${m.kind} · ${m.format}`),
      job ? h("div.small", "job ", h("a.mono", { href: `#/jobs/${job.id}` }, job.id)) : null,
      h("ul.lineage-inputs", ins.map(([role, ref]) => h("li", h("span.muted", `${role}: `),
        ref.startsWith("model-") ? h("a.mono", { href: `#/models?id=${ref}` }, ref) : ident(ref, 32))))),
  ]);
  lineage.append(h("h3", "Lineage of ", h("span.mono", selected)), h("div.lineage#lineage-chain", steps));
}
