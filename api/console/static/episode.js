// An agentic rollout's transcript in the samples table: a multi-turn episode's `job.samples` row carries
// `messages` (role, content, tool_calls), `turn_rewards` (one per assistant turn), `turns` and `tool_calls`.
// Collapsed by default (a step logs a few episodes; each can be long); opened, every message shows its
// role, an assistant turn its tool calls (name + JSON arguments) and its reward, a tool message its result.

import { h, num } from "./ui.js";

/** True for a samples row that is a multi-turn episode. */
export function isEpisode(row) {
  return Array.isArray(row?.messages) && row.messages.length > 0;
}

/** A tool call as {name, args}: OpenAI's `{function: {name, arguments: "json"}}` or Hermes' `{name, arguments: {}}`. */
function toolCall(call) {
  const fn = call && typeof call.function === "object" && call.function !== null ? call.function : call || {};
  let args = fn.arguments ?? {};
  if (typeof args === "string") {
    try { args = JSON.parse(args); } catch { /* shown as written */ }
  }
  return { name: String(fn.name ?? "?"), args: typeof args === "string" ? args : JSON.stringify(args, null, 2) };
}

/** A reward as short as it is exact to 4 digits (0.25, not num()'s 0.2500). */
function reward(value) {
  return typeof value === "number" && Number.isFinite(value) ? String(Number(value.toPrecision(4))) : num(value);
}

function rewardBadge(value, label) {
  if (typeof value !== "number") return null;
  const sign = value > 0 ? "pos" : value < 0 ? "neg" : "zero";
  return h(`span.reward-badge.r-${sign}`, { title: label }, `${label} ${reward(value)}`);
}

function content(message) {
  const c = message.content;
  if (Array.isArray(c)) return c.map((p) => (typeof p === "string" ? p : p?.text ?? "")).join("");
  return c === null || c === undefined ? "" : String(c);
}

/** One message of the transcript; `reward` is its assistant turn's reward (undefined for other roles). */
function messageView(message, turn, reward) {
  const role = String(message.role ?? "?");
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.map(toolCall) : [];
  const text = content(message);
  const title = role === "assistant" ? `assistant · turn ${turn}` : role === "tool" && message.name
    ? `tool · ${message.name}` : role;
  return h(`li.msg.msg-${role.replace(/[^\w-]/g, "")}`, { dataset: { role } },
    h("div.msg-head", h("span.msg-role", title), role === "assistant" ? rewardBadge(reward, "reward") : null),
    text ? h("div.msg-text", text) : null,
    calls.map((c) => h("div.tool-call", { dataset: { tool: c.name } },
      h("span.tool-name", "call ", h("code", c.name)),
      h("pre.tool-args", c.args))));
}

/** The collapsible transcript of an episode row; `index` numbers it in the step's table. */
export function episodeTranscript(row, index) {
  const rewards = Array.isArray(row.turn_rewards) ? row.turn_rewards : [];
  let turn = 0;
  const items = row.messages.map((m) => {
    if (m?.role !== "assistant") return messageView(m || {}, turn, undefined);
    turn += 1;
    return messageView(m, turn, rewards[turn - 1]);
  });
  const turns = typeof row.turns === "number" ? row.turns : turn;
  const calls = typeof row.tool_calls === "number" ? row.tool_calls
    : row.messages.reduce((n, m) => n + (Array.isArray(m?.tool_calls) ? m.tool_calls.length : 0), 0);
  return h("details.episode", { dataset: { sample: String(index) } },
    h("summary", h("span", `Episode ${index}: ${turns} turn${turns === 1 ? "" : "s"}, `
      + `${calls} tool call${calls === 1 ? "" : "s"}`), " ", rewardBadge(row.reward, "score")),
    h("ol.transcript", { "aria-label": `Episode ${index} transcript` }, items),
    h("p.episode-foot", "Final score ", h("b", reward(row.reward)),
      rewards.length ? ` · turn rewards ${rewards.map(reward).join(", ")}` : ""));
}
