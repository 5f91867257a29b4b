// The console's only way to the API: fetch with the Bearer key, problem+json errors, the SSE stream
// read with fetch (EventSource cannot send an Authorization header), downloads and uploads.

const KEY = "keel.apiKey";

export function apiKey() { return sessionStorage.getItem(KEY) || ""; }
export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY, key.trim()); else sessionStorage.removeItem(KEY);
}

/** An API error: the problem+json body's `code`, `param`, `detail` and `errors`. */
export class ApiProblem extends Error {
  constructor(status, body) {
    super(body.detail || body.title || `HTTP ${status}`);
    this.status = status;
    this.code = body.code || "http_error";
    this.param = body.param || null;
    this.errors = Array.isArray(body.errors) ? body.errors : [];
    this.body = body;
  }
}

function headers(extra) { return { Authorization: `Bearer ${apiKey()}`, ...extra }; }

async function problemOf(resp) {
  let body = {};
  try { body = await resp.json(); } catch { body = { detail: `${resp.status} ${resp.statusText}` }; }
  return new ApiProblem(resp.status, body);
}

/** A JSON request; throws ApiProblem on any non-2xx answer. */
export async function api(path, { method = "GET", body, query, idempotent = false, signal } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  const extra = {};
  if (body !== undefined) extra["Content-Type"] = "application/json";
  if (idempotent) extra["Idempotency-Key"] = uuid();
  const resp = await fetch(url, { method, headers: headers(extra), signal,
                                   body: body === undefined ? undefined : JSON.stringify(body) });
  if (!resp.ok) throw await problemOf(resp);
  return resp.status === 204 ? null : resp.json();
}

/** Every page of a cursor-paginated list (up to `max` items). */
export async function listAll(path, query = {}, max = 500) {
  const out = [];
  let after;
  for (;;) {
    const page = await api(path, { query: { ...query, limit: 100, after } });
    out.push(...page.data);
    if (!page.has_more || out.length >= max) return out;
    after = page.last_id;
  }
}

export function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();  // secure contexts only
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** Fetch with the key and save the body as a file (a link cannot carry the Authorization header). */
export async function download(path, fallbackName) {
  const resp = await fetch(path, { headers: headers() });
  if (!resp.ok) throw await problemOf(resp);
  const disposition = resp.headers.get("Content-Disposition") || "";
  const m = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(disposition);
  const blob = await resp.blob();
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = m ? decodeURIComponent(m[1]) : fallbackName;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

/** Multipart upload through XMLHttpRequest, for its upload progress events. */
export function upload(file, purpose, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/files");
    xhr.setRequestHeader("Authorization", `Bearer ${apiKey()}`);
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onload = () => {
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch { body = { detail: xhr.statusText }; }
      if (xhr.status >= 200 && xhr.status < 300) resolve(body); else reject(new ApiProblem(xhr.status, body));
    };
    xhr.onerror = () => reject(new ApiProblem(0, { detail: "network error", code: "network_error" }));
    const form = new FormData();
    form.append("purpose", purpose);
    form.append("file", file, file.name);
    xhr.send(form);
  });
}

/**
 * Follow a job's server-sent events: `onEvent(event)` for each (JobEventPublic), until `job.done` or
 * `signal` aborts. A dropped connection is resumed with `Last-Event-ID` (the last seq seen), so no
 * event is lost or repeated. `onState("live" | "reconnecting" | "done")` reports the connection.
 */
export async function followEvents(jobId, { onEvent, onState = () => {}, signal }) {
  let last = null;
  let delay = 500;
  while (!signal.aborted) {
    try {
      const extra = { Accept: "text/event-stream" };
      if (last !== null) extra["Last-Event-ID"] = String(last);
      const resp = await fetch(`/v1/jobs/${encodeURIComponent(jobId)}/events/stream`, { headers: headers(extra), signal });
      if (!resp.ok) {
        const problem = await problemOf(resp);
        if (resp.status !== 429 && resp.status < 500) throw problem;  // 401/404: retrying cannot help
      } else {
        onState("live");
        delay = 500;
        for await (const ev of sseEvents(resp.body)) {
          if (ev.id) last = Number(ev.id);
          if (!ev.data) continue;
          const event = JSON.parse(ev.data);
          onEvent(event);
          if (event.type === "job.done") { onState("done"); return; }
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiProblem) throw err;
    }
    onState("reconnecting");
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 10_000);
  }
}

/** Parse a text/event-stream body into {id, event, data} messages (comments and retry ignored). */
export async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let msg = { id: "", event: "", data: [] };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {  // a blank line ends a message
          if (msg.data.length || msg.id) yield { id: msg.id, event: msg.event, data: msg.data.join("\n") };
          msg = { id: "", event: "", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") msg.data.push(value);
        else if (field === "id") msg.id = value;
        else if (field === "event") msg.event = value;
      }
    }
  } finally {
    reader.releaseLock();
  }
}

export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

/**
 * A streamed OpenAI chat completion (POST /v1/chat/completions, `stream: true`): `onDelta(text)` for
 * each piece of the first choice's content; resolves with the whole text. An error answer (OpenAI's
 * `{error: {message, code, param}}`) or an error event mid-stream throws ApiProblem.
 */
export async function chatStream(body, { onDelta, signal }) {
  const resp = await fetch("/v1/chat/completions", { method: "POST", signal,
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify({ ...body, stream: true }) });
  if (!resp.ok) {
    let err = {};
    try { err = (await resp.json()).error || {}; } catch { err = { message: `${resp.status} ${resp.statusText}` }; }
    throw new ApiProblem(resp.status, { detail: err.message, code: err.code || err.type, param: err.param });
  }
  let text = "";
  for await (const ev of sseEvents(resp.body)) {
    if (!ev.data || ev.data === "[DONE]") continue;
    const chunk = JSON.parse(ev.data);
    if (chunk.error) throw new ApiProblem(500, { detail: chunk.error.message, code: chunk.error.code || chunk.error.type });
    const piece = chunk.choices?.[0]?.delta?.content;
    if (piece) { text += piece; onDelta(piece); }
  }
  return text;
}
