// The console's shell: the API-key gate, the navigation bar and a hash router. Each page is a
// function (main, params, page) that renders into `main`; `page.signal` aborts when the user leaves
// it, `page.every(ms, fn)` polls until then.

import { api, apiKey, ApiProblem, setApiKey } from "./api.js";
import { clear, errorBox, h } from "./ui.js";
import { comparePage } from "./pages/compare.js";
import { filesPage } from "./pages/files.js";
import { jobPage } from "./pages/job.js";
import { jobsPage } from "./pages/jobs.js";
import { modelsPage } from "./pages/models.js";
import { newJobPage } from "./pages/newjob.js";
import { playgroundPage } from "./pages/playground.js";
import { trainersPage } from "./pages/trainers.js";

const ROUTES = [
  [/^\/jobs\/([^/]+)$/, jobPage, "jobs"],
  [/^\/jobs$/, jobsPage, "jobs"],
  [/^\/compare$/, comparePage, "jobs"],
  [/^\/new$/, newJobPage, "new"],
  [/^\/files$/, filesPage, "files"],
  [/^\/models$/, modelsPage, "models"],
  [/^\/trainers$/, trainersPage, "trainers"],
  [/^\/playground$/, playgroundPage, "playground"],
];
const NAV = [["jobs", "Jobs"], ["new", "New job"], ["files", "Files"], ["models", "Models"], ["trainers", "Trainers"],
             ["playground", "Playground"]];

const main = document.getElementById("main");
const nav = document.getElementById("nav");
let current = null;

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/jobs";
  const [path, qs] = raw.split("?");
  return { path, query: new URLSearchParams(qs || "") };
}

function renderNav(active) {
  clear(nav,
    NAV.map(([id, label]) => h("a", { href: `#/${id}`, class: id === active ? "active" : "", dataset: { nav: id } }, label)),
    h("button.link.key-button", { type: "button", onclick: () => { setApiKey(""); route(); } },
      apiKey() ? "Forget key" : ""));
}

function keyGate(message) {
  renderNav(null);
  const input = h("input#api-key", { type: "password", autocomplete: "off", placeholder: "keel_…", required: true,
                                     "aria-label": "API key" });
  const status = h("div");
  const form = h("form.card.key-form", {
    onsubmit: async (e) => {
      e.preventDefault();
      setApiKey(input.value);
      try {
        await api("/v1/jobs", { query: { limit: 1 } });
        route();
      } catch (err) {
        setApiKey("");
        clear(status, errorBox(err));
      }
    },
  },
  h("h2", "Keel console"),
  h("p", "Paste a project API key (`keel up` prints the first one; it is also in .keel/api_key). ",
    "It stays in this tab's session storage and is sent only to this server."),
  message ? h("div.error", message) : null,
  h("label", { for: "api-key" }, "API key"), input,
  h("button.primary", { type: "submit" }, "Open console"), status);
  clear(main, form);
  input.focus();
}

async function route() {
  current?.abort();
  current = null;
  if (!apiKey()) { keyGate(); return; }
  const { path, query } = parseHash();
  const match = ROUTES.map(([re, fn, id]) => [re.exec(path), fn, id]).find(([m]) => m);
  if (!match) { location.hash = "#/jobs"; return; }
  const [m, page, id] = match;
  renderNav(id);
  const ctl = new AbortController();
  current = ctl;
  const ctx = {
    signal: ctl.signal,
    query,
    every(ms, fn) {
      const t = setInterval(() => { if (!document.hidden) fn(); }, ms);
      ctl.signal.addEventListener("abort", () => clearInterval(t));
    },
    onLeave(fn) { ctl.signal.addEventListener("abort", fn); },
  };
  clear(main);
  main.scrollTop = 0;
  try {
    await page(main, m.slice(1).map(decodeURIComponent), ctx);
  } catch (err) {
    if (ctl.signal.aborted) return;
    if (err instanceof ApiProblem && err.status === 401) { setApiKey(""); keyGate("The API key was refused (401)."); return; }
    main.append(errorBox(err));
  }
}

window.addEventListener("hashchange", route);
route();
