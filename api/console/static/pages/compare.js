// Several jobs side by side: their metrics overlaid on the same charts (a colour per run, a legend),
// the runs' summary, and a table of the settings that differ between them (model, files, and the
// configuration each ran with: the manifest's when recorded, else the hyperparameters requested).

import { api } from "../api.js";
import { MetricCharts, PALETTE } from "../charts.js";
import { flatten } from "../config.js";
import { viewControls, viewFromQuery } from "../metricview.js";
import { badge, cell, clear, duration, errorBox, h, ident, table } from "../ui.js";

const MAX_RUNS = 8;

export async function comparePage(main, _params, page) {
  const ids = [...new Set((page.query.get("jobs") || "").split(",").filter(Boolean))].slice(0, MAX_RUNS);
  main.append(h("div.page-head", h("h2", h("a", { href: "#/jobs" }, "Jobs"), " / compare")));
  if (ids.length < 2) {
    main.append(h("p.card", "Select two or more jobs in the ", h("a", { href: "#/jobs" }, "jobs list"), " to compare them."));
    return;
  }
  const get = (path, query) => api(path, { query, signal: page.signal });
  const jobs = await Promise.all(ids.map((id) => get(`/v1/jobs/${encodeURIComponent(id)}`)));
  const runs = jobs.map((j, i) => ({ id: j.id, label: j.suffix || `run ${i + 1}` }));
  const methods = new Set(jobs.map((j) => j.method.type));
  const keyRow = h("div#key-metrics.key-row");
  const chartsRoot = h("div#charts.charts");
  const charts = new MetricCharts(chartsRoot, { keyRoot: methods.size === 1 ? keyRow : null, method: [...methods][0],
                                                runs, view: viewFromQuery(page.query) });
  page.onLeave(() => charts.destroy());
  const diff = h("div#config-diff");

  main.append(...[
    h("section.card", h("h3", "Runs"), table([
      { title: "Run", render: (j) => h("span", h("span.run-swatch", { style: `background:${PALETTE[jobs.indexOf(j) % PALETTE.length]}` }),
        runs[jobs.indexOf(j)].label) },
      { title: "Job", render: (j) => h("a", { href: `#/jobs/${encodeURIComponent(j.id)}` }, ident(j.id)) },
      { title: "Status", render: (j) => badge(j.status) },
      { title: "Method", render: (j) => j.method.type },
      { title: "Steps", render: (j) => `${j.progress?.step ?? "—"}/${j.progress?.total_steps ?? "—"}` },
      { title: "Duration", render: (j) => (j.started_at ? duration((j.finished_at || Date.now() / 1000) - j.started_at) : "—") },
    ], jobs)),
    methods.size === 1 ? h("section.card.key-card", h("h3", "Key metrics"), keyRow) : null,
    h("section.card", h("h3", "Metrics"), viewControls(charts, { axes: ["step"] }), chartsRoot),
    h("section.card", h("h3", "Settings that differ"), diff)].filter(Boolean));

  const [series] = await Promise.all([
    Promise.all(jobs.map((j) => get(`/v1/jobs/${encodeURIComponent(j.id)}/metrics`, { max_points: 2000 }))),
    renderDiff(),
  ]);
  series.forEach((answer, run) => {
    for (const s of answer.data) charts.addSeries(run, s.name, s.steps, s.values);
  });

  async function renderDiff() {
    const configs = await Promise.all(jobs.map(async (j) => {
      let config = j.method.hyperparameters || {};
      if (j.started_at) {
        try { config = (await get(`/v1/jobs/${encodeURIComponent(j.id)}/manifest`)).config; } catch (err) {
          if (err.code !== "manifest_not_ready") throw err;
        }
      }
      return flatten({ model: j.model, method: j.method.type, training_file: j.training_file,
                       validation_file: j.validation_file, config });
    }));
    const keys = [...new Set(configs.flatMap((c) => Object.keys(c)))].sort();
    const differ = keys.filter((k) => new Set(configs.map((c) => JSON.stringify(c[k] ?? null))).size > 1);
    const columns = [{ title: "Setting", render: (k) => h("span.mono", k) },
      ...runs.map((r, i) => ({ title: r.label, render: (k) => (configs[i][k] === undefined ? "—" : cell(configs[i][k], 80)) }))];
    try {
      clear(diff, h("p.muted.small", `${differ.length} of ${keys.length} settings differ.`),
        h("div.diff-table", table(columns, differ, { empty: "The runs' settings are identical." })));
    } catch (err) { clear(diff, errorBox(err)); }
  }
}
