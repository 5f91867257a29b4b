// Create a job: the references as fields, the hyperparameters as JSON pre-filled with the method's
// defaults (read from the API's own OpenAPI document, so they never drift), less the sequence lengths:
// left out, the API fits them to the chosen model's context window (a fixed 1024 + 2048 would be a
// 422 context_too_long on a small model). A problem answer (4xx) is shown next to the field its
// `param` names; inside the hyperparameters the key is selected.

import { api, listAll } from "../api.js";
import { memoryPlanView } from "../memplan.js";
import { clear, errorBox, h } from "../ui.js";

const METHODS = ["sft", "reward_model", "rm_distill", "dpo", "ppo", "eval"];
const PURPOSE = { sft: "sft", reward_model: "preference", rm_distill: "preference", dpo: "preference", ppo: "prompts", eval: "prompts" };
const HP = "method.hyperparameters";
const LENGTHS = ["max_prompt_length", "max_response_length", "max_length"];  // data.*: from the model

let openapi = null;

function resolveRef(schema) {
  while (schema?.$ref) schema = openapi.components.schemas[schema.$ref.split("/").pop()];
  return schema;
}

/** The default value of a schema: its `default`, else an object of its properties' defaults. */
function defaults(schema) {
  if (schema && "default" in schema) return structuredClone(schema.default);
  schema = resolveRef(schema);
  if (!schema) return undefined;
  if ("default" in schema) return structuredClone(schema.default);
  if (schema.type !== "object" || !schema.properties) return undefined;
  const out = {};
  for (const [k, v] of Object.entries(schema.properties)) {
    const d = defaults(v);
    if (d !== undefined) out[k] = d;
  }
  return out;
}

/** The method's defaults as the form pre-fills them: without the lengths the API derives. */
function prefilled(type) {
  const hp = defaults(methodSchema(type).properties.hyperparameters) ?? {};
  for (const key of LENGTHS) delete hp.data?.[key];
  return hp;
}

function methodSchema(type) {
  const mapping = openapi.components.schemas.JobCreate.properties.method.discriminator.mapping;
  return resolveRef({ $ref: mapping[type] });
}

export async function newJobPage(main, _params, page) {
  openapi ??= await (await fetch("/openapi.json", { signal: page.signal })).json();
  const [models, files] = await Promise.all([listAll("/v1/models"), listAll("/v1/files")]);
  let method = page.query.get("method") || "sft";
  if (!METHODS.includes(method)) method = "sft";

  const fields = new Map();  // param -> {input, error}
  function field(param, label, input, hint) {
    const error = h("div.field-error", { dataset: { paramError: param }, role: "alert" });
    input.dataset.param = param;
    input.id = `f-${param.replaceAll(".", "-")}`;
    fields.set(param, { input, error });
    return h("div.field", { dataset: { field: param } }, h("label", { for: input.id }, label), input,
      hint ? h("div.hint", hint) : null, error);
  }
  const options = (id, values) => h("datalist", { id }, values.map(([v, label]) => h("option", { value: v }, label)));
  const modelOpts = models.map((m) => [m.id, `${m.name} (${m.kind})`]);
  const rewardOpts = models.filter((m) => m.kind === "reward_model").map((m) => [m.id, m.name]);
  const fileOpts = files.filter((f) => f.purpose === PURPOSE[method]).map((f) => [f.id, `${f.filename} (${f.rows} rows)`]);

  const methodSel = h("select#f-method", { onchange: (e) => { location.hash = `#/new?method=${e.target.value}`; } },
    METHODS.map((m) => h("option", { value: m, selected: m === method }, m)));
  const input = (list, extra = {}) => h("input", { type: "text", list, autocomplete: "off", ...extra });
  const hp = h("textarea.code", { rows: 18, spellcheck: false });
  hp.value = JSON.stringify(prefilled(method), null, 2);
  const result = h("div#create-result");

  const form = h("form.card.job-form#job-form", { onsubmit: (e) => { e.preventDefault(); submit(false); } },
    h("div.field", h("label", { for: "f-method" }, "Method"), methodSel),
    field("model", "Base model", input("dl-models", { required: true }), "A model id, a hub id, or a directory under a model root."),
    field("training_file", "Training file", input("dl-files", { required: true }), `Purpose ${PURPOSE[method]}.`),
    field("validation_file", "Validation file (optional)", input("dl-files")),
    method === "rm_distill" ? field("method.teacher", "Teacher reward model", input("dl-rewards", { required: true })) : null,
    ["ppo", "eval"].includes(method) ? field("method.reward.model", "Reward model", input("dl-rewards"),
      "A reward model, or leave empty and name a reward function.") : null,
    ["ppo", "eval"].includes(method) ? field("method.reward.function", "Reward function", input(null, { placeholder: "e.g. gsm8k" })) : null,
    field("suffix", "Suffix (optional)", input(null)),
    field(HP, "Hyperparameters (JSON; the method's defaults)", hp,
      "Sequence lengths (data.max_prompt_length, max_response_length, max_length) follow the model's context window unless set here."),
    options("dl-models", modelOpts), options("dl-rewards", rewardOpts), options("dl-files", fileOpts),
    h("div.actions",
      h("button.primary#submit-job", { type: "submit" }, "Create job"),
      h("button#dry-run", { type: "button", onclick: () => submit(true) }, "Check memory plan")),
    result);
  main.append(h("div.page-head", h("h2", "New job")), form);

  function body() {
    const v = (p) => fields.get(p)?.input.value.trim() || undefined;
    let hyper;
    try { hyper = JSON.parse(hp.value || "{}"); } catch (err) {
      throw Object.assign(new Error(`not valid JSON: ${err.message}`), { param: HP, code: "invalid_json" });
    }
    const m = { type: method, hyperparameters: hyper };
    if (method === "rm_distill") m.teacher = v("method.teacher");
    if (["ppo", "eval"].includes(method)) m.reward = { model: v("method.reward.model"), function: v("method.reward.function") };
    return { model: v("model"), training_file: v("training_file"), validation_file: v("validation_file"),
             suffix: v("suffix"), method: m };
  }

  async function submit(dryRun) {
    for (const { input: el, error } of fields.values()) { clear(error); el.removeAttribute("aria-invalid"); }
    clear(result);
    try {
      const spec = body();
      const out = await api("/v1/jobs", { method: "POST", body: spec, query: dryRun ? { dry_run: "true" } : {}, idempotent: !dryRun });
      if (dryRun) { result.append(memoryPlanView(out)); return; }
      location.hash = `#/jobs/${out.id}`;
    } catch (err) {
      showProblem(err);
    }
  }

  function showProblem(err) {
    const problems = err.errors?.length ? err.errors : [{ param: err.param, msg: err.message }];
    let placed = false;
    for (const p of problems) placed = place(p.param, p.msg || err.message) || placed;
    if (!placed || !err.param) result.append(errorBox(err));
    else result.append(h("div.error", `${err.code}: ${err.message}`));
  }

  /** Show `msg` under the field `param` names (or its nearest enclosing field); true if one took it. */
  function place(param, msg) {
    if (!param) return false;
    const parts = param.split(".");
    for (let n = parts.length; n > 0; n--) {
      const f = fields.get(parts.slice(0, n).join("."));
      if (!f) continue;
      f.input.setAttribute("aria-invalid", "true");
      f.error.append(h("div", h("code", param), ` ${msg}`));
      if (f.input === hp && n < parts.length) selectKey(parts.slice(n));
      return true;
    }
    return false;
  }

  function selectKey(path) {
    let from = 0;
    let at = -1;
    for (const key of path) {
      at = hp.value.indexOf(`"${key}"`, from);
      if (at < 0) return;
      from = at + key.length + 2;
    }
    hp.setSelectionRange(at, from);
  }
}
