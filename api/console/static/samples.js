// The rollout samples table: a few (prompt, response, reward) rows per step from `job.samples`
// events, with a step selector; the latest step is shown until the user picks another. A multi-turn
// episode's row (`messages`, `turn_rewards`) gets its collapsible transcript on a full-width row below
// it (episode.js); a row with a plain `transcript` list shows it in the response cell.

import { episodeTranscript, isEpisode } from "./episode.js";
import { clear, h, num } from "./ui.js";

export class SamplesTable {
  constructor(root) {
    this.root = root;
    this.steps = new Map();  // step -> rows
    this.chosen = null;      // null: follow the latest step
    this.select = h("select#samples-step", { "aria-label": "Step", onchange: (e) => {
      this.chosen = e.target.value === "" ? null : Number(e.target.value);
      this.render();
    } });
    this.body = h("div#samples-body");
    clear(root, h("label.inline", "Step", this.select), this.body);
    this.render();
  }

  /** A `job.samples` event's data: {step, rows}. */
  add(step, rows) {
    if (typeof step !== "number" || !Array.isArray(rows)) return;
    this.steps.set(step, rows);
    this.render();
  }

  render() {
    const steps = [...this.steps.keys()].sort((a, b) => a - b);
    const step = this.chosen ?? steps[steps.length - 1];
    clear(this.select, h("option", { value: "" }, steps.length ? `latest (${steps[steps.length - 1]})` : "none yet"),
      steps.map((s) => h("option", { value: String(s), selected: s === this.chosen }, String(s))));
    this.root.dataset.steps = String(steps.length);
    const rows = this.steps.get(step) || [];
    if (!rows.length) {
      clear(this.body, h("p.muted", "No samples yet: PPO logs a few of each step's rollouts."));
      return;
    }
    clear(this.body, h("div.table-wrap", h("table.samples", { dataset: { step: String(step) } },
      h("thead", h("tr", ["#", "Prompt", "Response", "Reward"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", rows.map((r, i) => [h(isEpisode(r) ? "tr.has-episode" : "tr",
        h("td", { "data-label": "#" }, String(i + 1)),
        h("td.sample-text", { "data-label": "Prompt" }, String(r.prompt ?? "")),
        h("td.sample-text", { "data-label": "Response" }, String(r.response ?? ""),
          Array.isArray(r.transcript) ? h("details", h("summary.small", "transcript"),
            r.transcript.map((m) => h("div.small", h("b", `${m.role ?? "?"}: `), String(m.content ?? "")))) : null),
        h("td.num", { "data-label": "Reward" }, num(r.reward))),
      isEpisode(r) ? h("tr.episode-row", h("td.episode-cell", { colspan: "4" }, episodeTranscript(r, i + 1))) : null])))));
  }
}
