// The playground: chat with a model the project can use (its own models, by id, or a shared base
// model, by path) through the OpenAI route (POST /v1/chat/completions, streamed), optionally side by
// side with another model: a fine-tuned model's base is offered. Each side keeps its own conversation
// (the user's turns are shared, the replies are each model's own).

import { chatStream, listAll } from "../api.js";
import { clear, errorBox, h, ident } from "../ui.js";

export async function playgroundPage(main, _params, page) {
  const models = (await listAll("/v1/models", {}, 500)).filter((m) => m.kind === "policy" && !m.alias_of);
  const baseOf = new Map(models.map((m) => [m.id, m.base_model]));
  const input = (id, label, attrs) => [h("label", { for: id }, label), h(`input#${id}`, attrs)];
  const [modelLabel, model] = input("pg-model", "Model", { list: "pg-models", placeholder: "model-… or a base model path",
    value: page.query.get("model") || "", autocomplete: "off",
    onchange: () => { if (baseOf.get(model.value) && !other.value) other.value = baseOf.get(model.value); } });
  const [otherLabel, other] = input("pg-other", "Side by side with (optional; a fine-tuned model's base by default)",
    { list: "pg-models", placeholder: "none", autocomplete: "off" });
  const [tempLabel, temperature] = input("pg-temperature", "Temperature", { type: "number", min: "0", max: "2", step: "0.1", value: "0.7" });
  const [maxLabel, maxTokens] = input("pg-max-tokens", "Max tokens", { type: "number", min: "1", max: "4096", step: "1", value: "128" });
  const message = h("textarea#pg-message", { rows: 3, placeholder: "Say something", "aria-label": "Message" });
  const panes = h("div.two-col#pg-panes");
  const notice = h("div");
  const sides = [];
  let running = null;

  const form = h("form.card#pg-form", { onsubmit: (e) => { e.preventDefault(); send(); } },
    h("div.pg-settings", h("div", modelLabel, model), h("div", otherLabel, other),
      h("div", tempLabel, temperature), h("div", maxLabel, maxTokens)),
    h("datalist#pg-models", models.map((m) => h("option", { value: m.id }, m.name || m.id)),
      [...new Set(models.map((m) => m.base_model))].map((b) => h("option", { value: b }, "base model"))),
    message,
    h("div.actions", h("button.primary#pg-send", { type: "submit" }, "Send"),
      h("button#pg-stop", { type: "button", onclick: () => running?.abort() }, "Stop"),
      h("button#pg-clear", { type: "button", onclick: () => { sides.length = 0; clear(panes); } }, "New chat")));
  main.append(h("div.page-head", h("h2", "Playground")), notice, form, panes);
  page.onLeave(() => running?.abort());

  function side(name) {
    let s = sides.find((x) => x.model === name);
    if (!s) {
      s = { model: name, messages: [], log: h("div.pg-log", { "aria-live": "polite" }) };
      panes.append(h("section.card.pg-pane", { dataset: { model: name } }, h("h3", ident(name, 60)), s.log));
      sides.push(s);
    }
    return s;
  }

  async function send() {
    const text = message.value.trim();
    const names = [model.value.trim(), other.value.trim()].filter(Boolean);
    if (!text || !names.length) { clear(notice, errorBox(new Error("Choose a model and write a message."))); return; }
    clear(notice);
    message.value = "";
    running?.abort();
    running = new AbortController();
    const settings = { temperature: Number(temperature.value), max_tokens: Number(maxTokens.value) };
    await Promise.all([...new Set(names)].map((name) => ask(side(name), text, settings, running.signal)));
  }

  async function ask(s, text, settings, signal) {
    s.messages.push({ role: "user", content: text });
    s.log.append(h("div.pg-msg.pg-user", text));
    const out = h("div.pg-msg.pg-assistant", { dataset: { state: "streaming" } });
    s.log.append(out);
    try {
      const reply = await chatStream({ model: s.model, messages: s.messages, ...settings },
        { signal, onDelta: (piece) => out.append(piece) });
      s.messages.push({ role: "assistant", content: reply });
      out.dataset.state = "done";
    } catch (err) {
      out.dataset.state = "error";
      if (signal.aborted) { out.append(" [stopped]"); return; }
      s.messages.pop();
      out.replaceWith(errorBox(err));
    }
  }
}
