// Files: drag-and-drop (or pick) uploads with a progress bar, the list, and one file's preview rows
// and column statistics (`#/files?id=file-...`).

import { api, download, upload } from "../api.js";
import { bytes, cell, clear, errorBox, h, num, table, when } from "../ui.js";

const PURPOSES = { preference: "columns prompt, chosen, rejected (+ margin)",
                   prompts: "columns prompt (+ ground_truth, data_source)", sft: "columns prompt, response" };

export async function filesPage(main, _params, page) {
  const selected = page.query.get("id");
  const hint = h("span.hint", PURPOSES.preference);
  const purpose = h("select#purpose", { onchange: () => { hint.textContent = PURPOSES[purpose.value]; } },
    Object.keys(PURPOSES).map((v) => h("option", { value: v }, v)));
  const picker = h("input#file-input", { type: "file", accept: ".parquet,.jsonl,.json", multiple: true, hidden: true,
                                         onchange: (e) => send([...e.target.files]) });
  const uploads = h("div.uploads");
  const drop = h("div.dropzone#dropzone", { tabindex: "0", role: "button",
    onclick: () => picker.click(),
    onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); picker.click(); } },
    ondragover: (e) => { e.preventDefault(); drop.classList.add("over"); },
    ondragleave: () => drop.classList.remove("over"),
    ondrop: (e) => { e.preventDefault(); drop.classList.remove("over"); send([...e.dataTransfer.files]); } },
  h("strong", "Drop parquet or JSON Lines files here"), h("span.muted", "or click to choose"), picker);
  const list = h("div#files-list");
  const detail = h("div#file-detail");
  main.append(h("div.page-head", h("h2", "Files")),
    h("section.card", h("label.inline", "Purpose", purpose), hint, drop, uploads), detail, h("section.card", h("h3", "All files"), list));

  async function send(files) {
    for (const file of files) {
      const bar = h("div.progress-fill", { style: "width:0%" });
      const text = h("span.progress-text", "0%");
      const row = h("div.upload-row", h("span.mono.clip", file.name), h("div.progress", bar, text));
      uploads.append(row);
      try {
        const f = await upload(file, purpose.value, (frac) => {
          bar.style.width = `${(frac * 100).toFixed(1)}%`;
          text.textContent = `${Math.round(frac * 100)}%`;
        });
        bar.style.width = "100%";
        text.textContent = "done";
        row.append(h("a", { href: `#/files?id=${f.id}` }, f.id));
        await load();
      } catch (err) {
        row.append(errorBox(err));
      }
    }
  }

  async function load() {
    try {
      const files = (await api("/v1/files", { query: { limit: 100 }, signal: page.signal })).data;
      clear(list, table([
        { title: "File", render: (f) => h("a", { href: `#/files?id=${f.id}` }, f.id) },
        { title: "Name", render: (f) => h("span.clip", { title: f.filename }, f.filename) },
        { title: "Purpose", render: (f) => f.purpose },
        { title: "Rows", render: (f) => num(f.rows) },
        { title: "Size", render: (f) => bytes(f.bytes) },
        { title: "Created", render: (f) => when(f.created_at) },
      ], files, { empty: "No files yet: drop one above." }));
    } catch (err) { if (!page.signal.aborted) clear(list, errorBox(err)); }
  }

  async function showFile(id) {
    try {
      const [file, preview] = await Promise.all([
        api(`/v1/files/${encodeURIComponent(id)}`, { signal: page.signal }),
        api(`/v1/files/${encodeURIComponent(id)}/preview`, { query: { limit: 20 }, signal: page.signal })]);
      const columns = file.columns.length ? file.columns : Object.keys(preview.data[0] || {});
      const stats = Object.entries(file.stats || {});
      clear(detail, h("section.card#file-preview",
        h("div.section-head", h("h3", h("span.mono", file.id), ` ${file.filename}`),
          h("button.small", { type: "button", onclick: () => download(`/v1/files/${file.id}/content`, file.filename)
            .catch((err) => detail.prepend(errorBox(err))) }, "Download")),
        h("p.muted", `${file.purpose} · ${file.format} · ${num(file.rows)} rows · ${bytes(file.bytes)} · sha256 ${file.sha256.slice(0, 12)}…`),
        h("h4", "Preview"),
        table(columns.map((c) => ({ title: c, render: (r) => h("span.cell", cell(r[c])) })), preview.data),
        h("h4", "Column statistics"),
        table([
          { title: "Column", render: ([c]) => c },
          { title: "Chars min / mean / p95 / max", render: ([, s]) => s.mean_chars === null || s.mean_chars === undefined ? "—"
            : `${num(s.min_chars)} / ${num(s.mean_chars)} / ${num(s.p95_chars)} / ${num(s.max_chars)}` },
          { title: "Value min / mean / max", render: ([, s]) => s.mean === null || s.mean === undefined ? "—"
            : `${num(s.min)} / ${num(s.mean)} / ${num(s.max)}` },
          { title: "Nulls", render: ([, s]) => num(s.nulls) },
        ], stats, { empty: "No statistics." })));
    } catch (err) { if (!page.signal.aborted) clear(detail, errorBox(err)); }
  }

  await load();
  if (selected) await showFile(selected);
}
