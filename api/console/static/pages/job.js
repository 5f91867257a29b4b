// One job: its method's key metrics first, then the summary (timestamps to the second, duration), cancel,
// pause / resume, every metric chart with its view controls, the rollout samples, the resolved
// configuration, checkpoints and the output model with download buttons, the event log, and the
// manifest (collapsed; read when opened). Everything live comes from the SSE stream (replayed from the
// start, so history and live updates take the same path).

import { api, download, followEvents } from "../api.js";
import { MetricCharts } from "../charts.js";
import { configView } from "../config.js";
import { viewControls, viewFromQuery } from "../metricview.js";
import { SamplesTable } from "../samples.js";
import { badge, bytes, clear, duration, errorBox, h, ident, progressBar, table, when } from "../ui.js";

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const LOG_LIMIT = 500;

export async function jobPage(main, [jobId], page) {
  let job = await api(`/v1/jobs/${encodeURIComponent(jobId)}`, { signal: page.signal });
  const head = h("div.page-head");
  const summary = h("div.card.summary");
  const chartsRoot = h("div#charts.charts", { "aria-live": "off" });
  const keyRow = h("div#key-metrics.key-row", { "aria-live": "off" });
  const samplesRoot = h("div#samples");
  const configBody = h("div#config-body", h("p.muted", "Loading…"));
  const logList = h("ol#events.events");
  const checkpoints = h("div#checkpoints");
  const manifestBody = h("div#manifest-body");
  const manifest = h("details.card#manifest", { ontoggle: () => { if (manifest.open) loadManifest(); } },
    h("summary", h("h3", "Manifest")), manifestBody);
  const streamState = h("span.stream-state", { dataset: { state: "connecting" } }, "connecting…");
  const notice = h("div");
  let metricEvents = 0;
  const metricCount = h("span.muted");

  const charts = new MetricCharts(chartsRoot, { keyRoot: keyRow, method: job.method.type, view: viewFromQuery(page.query) });
  page.onLeave(() => charts.destroy());
  const samples = new SamplesTable(samplesRoot);

  main.append(head, notice,
    h("section.card.key-card", h("div.section-head", h("h3", "Key metrics"), streamState), keyRow),
    summary,
    h("section.card",
      h("div.section-head", h("h3", "Metrics")),
      viewControls(charts),
      h("p.muted.small", "Drag across a chart to zoom into steps; double-click to zoom out; ☆ pins a chart. ",
        "Validation is drawn on its training quantity's chart, in orange. ",
        h("span.key-ckpt", "◆ checkpoint"), " ", h("span.key-warn", "⚠ warning")),
      chartsRoot),
    h("section.card", h("h3", "Rollout samples"), samplesRoot),
    h("section.card#config", h("h3", "Configuration"), configBody),
    h("div.two-col",
      h("section.card", h("h3", "Checkpoints"), checkpoints),
      h("section.card", h("div.section-head", h("h3", "Events"), metricCount), h("div.events-wrap", logList))),
    manifest);


  function renderHead() {
    const cancel = TERMINAL.has(job.status) || job.status === "cancelling" ? null
      : h("button.danger#cancel", { type: "button", onclick: cancelJob }, "Cancel job");
    const pause = job.status === "queued" || job.status === "running"
      ? h("button#pause", { type: "button", onclick: (e) => act(e, "pause") }, "Pause")
      : job.status === "paused" ? h("button#resume", { type: "button", onclick: (e) => act(e, "resume") }, "Resume")
        : null;
    clear(head, h("h2", h("a", { href: "#/jobs" }, "Jobs"), " / ", ident(job.id)), badge(job.status), pause,
      cancel);
  }

  function renderSummary() {
    const m = job.method;
    const refs = [];
    if (m.teacher) refs.push(["Teacher", m.teacher]);
    if (m.reward?.model) refs.push(["Reward model", m.reward.model]);
    if (m.reward?.function) refs.push(["Reward function", m.reward.function]);
    const output = job.output_model ? h("span", ident(job.output_model), " ",
      h("button.small#download-model", { type: "button",
        onclick: () => download(`/v1/models/${job.output_model}/content`, `${job.output_model}.tar`).catch(show) },
      "Download")) : "—";
    const rows = [
      ["Method", m.type], ["Base model", ident(job.model)], ...refs.map(([k, v]) => [k, ident(v)]),
      ["Training file", ident(job.training_file)], ["Validation file", ident(job.validation_file)],
      ["Progress", progressBar(job.progress)],
      ["ETA", job.status === "running" ? duration(job.progress.seconds_remaining) : "—"],
      ["Created", when(job.created_at)], ["Started", when(job.started_at)], ["Finished", when(job.finished_at)],
      ["Duration", h("span#duration", job.started_at ? duration((job.finished_at || Date.now() / 1000) - job.started_at) : "—")],
      ["Output model", output],
    ];
    if (job.queue_position) rows.push(["Queue position", String(job.queue_position)]);
    if (job.forked_from) {
      const f = job.forked_from;
      rows.push(["Forked from", h("span", h("a.mono", { href: `#/jobs/${encodeURIComponent(f.job)}` }, f.job),
        ` at step ${f.step} (`, ident(f.checkpoint), ")")]);
    }
    if (job.error) rows.push(["Error", h("span.error-text", `${job.error.code}: ${job.error.message}`)]);
    clear(summary, h("dl.kv", rows.map(([k, v]) => [h("dt", k), h("dd", v)])));
  }

  function show(err) { clear(notice, errorBox(err)); }

  async function cancelJob(e) { await act(e, "cancel"); }

  // cancel, pause or resume: POST /v1/jobs/{id}/<action>, then show the job as it answered.
  async function act(e, action) {
    e.target.disabled = true;
    try {
      job = await api(`/v1/jobs/${encodeURIComponent(job.id)}/${action}`, { method: "POST", idempotent: true });
      renderHead();
      renderSummary();
    } catch (err) { show(err); e.target.disabled = false; }
  }

  async function refresh() {
    try {
      job = await api(`/v1/jobs/${encodeURIComponent(job.id)}`, { signal: page.signal });
      renderHead();
      renderSummary();
    } catch (err) { if (!page.signal.aborted) show(err); }
  }

  async function loadCheckpoints() {
    try {
      const page_ = await api(`/v1/jobs/${encodeURIComponent(job.id)}/checkpoints`, { query: { limit: 100 }, signal: page.signal });
      clear(checkpoints, table([
        { title: "Step", render: (c) => String(c.step) },
        { title: "Checkpoint", render: (c) => ident(c.id) },
        { title: "Size", render: (c) => bytes(c.bytes) },
        { title: "", render: (c) => h("button.small", { type: "button", dataset: { checkpoint: c.id },
          onclick: () => download(`/v1/checkpoints/${c.id}/content`, `${c.id}.tar`).catch(show) }, "Download") },
      ], page_.data, { empty: "No checkpoints yet." }));
    } catch (err) { if (!page.signal.aborted) clear(checkpoints, errorBox(err)); }
  }

  // GET /v1/jobs/{id}/manifest: what the latest attempt ran with (404 manifest_not_ready until it starts).
  let manifestAnswer = null;
  function fetchManifest(again = false) {
    if (!manifestAnswer || again) manifestAnswer = api(`/v1/jobs/${encodeURIComponent(job.id)}/manifest`, { signal: page.signal });
    return manifestAnswer;
  }

  // The configuration as the engine ran it (the manifest's), else the hyperparameters as requested.
  async function loadConfig(again = false) {
    try {
      // Not started: no manifest yet (asking would only log a 404).
      if (!job.started_at) throw Object.assign(new Error("not started"), { code: "manifest_not_ready" });
      const m = await fetchManifest(again);
      clear(configBody, configView(m.config, `Resolved by the engine for attempt ${m.attempt ?? "—"} (the manifest's config).`));
    } catch (err) {
      if (page.signal.aborted) return;
      if (err.code !== "manifest_not_ready") { clear(configBody, errorBox(err)); return; }
      clear(configBody, configView(job.method.hyperparameters || {},
        "The hyperparameters as requested: the resolved configuration is recorded when a worker starts the job."));
    }
  }

  async function loadManifest(again = false) {
    try {
      const m = await fetchManifest(again);
      const hw = m.hardware || {};
      const gpus = (hw.gpus || []).map((g) => g.name).join(", ") || "none";
      const files = Object.entries(m.datasets || {}).filter(([, f]) => f)
        .map(([k, f]) => h("div", `${k}: `, h("span.mono", f.id), " sha256 ", h("span.mono", (f.sha256 || "—").slice(0, 16))));
      const rows = [
        ["Attempt", `${m.attempt ?? "—"}, recorded ${new Date(m.recorded_at * 1000).toLocaleString()}`],
        ["Packages", Object.entries(m.packages).map(([k, v]) => `${k} ${v ?? "—"}`).join(" · ")],
        ["Seeds", Object.entries(m.seeds).map(([k, v]) => `${k}=${v}`).join(", ")],
        ["Datasets", files],
        ["Base model", h("span", ident(m.base_model.ref), " ", h("span.mono.muted", (m.base_model.sha256 || "").slice(0, 16)))],
        ["Hardware", `${hw.cpu_model || "CPU"} × ${hw.cpu_count ?? "?"}, ${bytes(hw.memory_bytes)}, GPUs: ${gpus}` +
          (hw.ray_nodes ? `, ${hw.ray_nodes} Ray node${hw.ray_nodes === 1 ? "" : "s"}` : "")],
        ["Image", m.image_digest ? h("span.mono", m.image_digest) : "—"],
      ];
      if (m.forked_from) rows.push(["Forked from", `${m.forked_from.job} at step ${m.forked_from.step}`]);
      clear(manifestBody, h("dl.kv", rows.map(([k, v]) => [h("dt", k), h("dd", v)])),
        h("details", h("summary.small", "Whole manifest (JSON)"), h("pre.small", JSON.stringify(m, null, 2))));
    } catch (err) {
      if (page.signal.aborted) return;
      clear(manifestBody, err.code === "manifest_not_ready"
        ? h("p.muted", "Recorded when a worker starts the job.") : errorBox(err));
    }
  }

  function log(event, text, kind = "") {
    const time = new Date(event.created_at * 1000).toLocaleTimeString();
    logList.append(h(`li.${kind || "ev"}`, { dataset: { seq: String(event.seq), type: event.type } },
      h("span.muted", `#${event.seq} ${time} `), h("b", event.type.replace(/^job\./, "")), " ", text));
    while (logList.childElementCount > LOG_LIMIT) logList.firstElementChild.remove();
    const wrap = logList.parentElement;
    if (wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < 80) wrap.scrollTop = wrap.scrollHeight;
  }

  function onEvent(event) {
    const d = event.data || {};
    switch (event.type) {
      case "job.metrics":
        charts.addMetrics(d.step, d.values, event.created_at);
        metricEvents++;
        metricCount.textContent = `${metricEvents} metrics events (charted, not listed)`;
        if (typeof d.step === "number") {
          job.progress = { ...job.progress, step: d.step, total_steps: d.total_steps ?? job.progress.total_steps };
          summary.querySelector(".progress")?.replaceWith(progressBar(job.progress));
        }
        return;
      case "job.samples":
        samples.add(d.step, d.rows);
        return;
      case "job.checkpoint":
        charts.addMarker("checkpoint", d.step, d.checkpoint_id);
        log(event, `step ${d.step}: ${d.checkpoint_id}`);
        loadCheckpoints();
        return;
      case "job.warning": {
        const step = typeof d.data?.step === "number" ? d.data.step : null;
        charts.addMarker("warning", step, d.code);
        log(event, `${d.code}: ${d.message}`, "warn");
        return;
      }
      case "job.status":
        log(event, d.status + (d.reason ? ` (${d.reason})` : ""));
        refresh();
        if (d.status === "running") {  // a new attempt records its own manifest
          manifestAnswer = null;
          loadConfig();
          if (manifest.open) loadManifest();
        }
        return;
      case "job.error":
        log(event, `${d.code || "error"}: ${d.message || ""}`, "err");
        return;
      case "job.log":
        log(event, d.message || "");
        return;
      case "job.placement": {
        // One entry per role and rank: colocated roles share a process, so count processes, not entries.
        const w = d.workers || [];
        const procs = new Set(w.map((x) => `${x.node_id}/${x.pid}`)).size;
        const nodes = new Set(w.map((x) => x.node_id)).size;
        log(event, `placed ${[...new Set(w.map((x) => x.role))].join(", ")}: ${procs} process${procs === 1 ? "" : "es"} on ${nodes} node${nodes === 1 ? "" : "s"}`);
        return;
      }
      case "job.done":
        log(event, d.status || "");
        refresh();
        loadCheckpoints();
        return;
      default:
        log(event, JSON.stringify(d).slice(0, 200));
    }
  }

  renderHead();
  renderSummary();
  loadCheckpoints();
  loadConfig();
  page.every(5000, () => { if (!TERMINAL.has(job.status)) refresh(); });
  const states = { live: "live", reconnecting: "reconnecting…", done: "finished" };
  followEvents(job.id, {
    signal: page.signal, onEvent,
    onState: (s) => { streamState.dataset.state = s; streamState.textContent = states[s] || s; },
  }).catch((err) => { if (!page.signal.aborted) { streamState.textContent = "stream failed"; show(err); } });
}
