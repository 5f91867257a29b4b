"""The CPU serving engine: continuous batching on `engine.serving.batch.BatchModel` in one thread.

Requests wait in an inbox; between two decode steps the loop admits those the batch has room for
(prefill into free slots, the n choices of a prompt sharing one prefill) and drops the rows that
finished (EOS, a stop string, max tokens) or whose caller went away. Every step samples each row with
its own parameters (`engine.serving.sampler`), so a request answers the same tokens alone or in a
crowd. Text is detokenized here, because stop strings end generation: text that could still grow into
a stop string, or ends inside a UTF-8 character, is held back until it cannot.

Interface shared with `engine.serving.vllm_engine.VllmEngine` (what `engine.serving.deployment` uses):
`tokenizer`, `max_model_len`, `load_adapter(name, path)`, `drop_adapter(name)`, and
`generate(GenerationRequest)`, an async iterator of `Delta`s (each choice's last one has a
`finish_reason`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.errors import EngineError
from engine.serving.batch import BatchModel, LoraAdapter, load_adapter
from engine.serving.sampler import sample

log = logging.getLogger(__name__)


@dataclass
class GenerationRequest:
    """One completion request as token ids; `seeds` has one seed per choice."""

    prompt_ids: list[int]
    max_tokens: int
    seeds: list[int]
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    top_logprobs: int = 0
    adapter: str | None = None

    @property
    def n(self) -> int:
        return len(self.seeds)


@dataclass
class Delta:
    """One generated token of choice `index` (None on an error), the text it releases, its log-prob
    (temperature 1) and the `top_logprobs` most likely tokens `[(id, logprob)]`."""

    index: int
    token_id: int | None
    text: str = ""
    logprob: float = 0.0
    top: list[tuple[int, float]] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None


class _Job:
    def __init__(self, request: GenerationRequest, adapter: LoraAdapter | None, emit) -> None:
        self.request, self.adapter, self.emit = request, adapter, emit
        self.cancelled = False


class _Row:
    """One choice in the running batch."""

    def __init__(self, job: _Job, index: int, length: int) -> None:
        self.job, self.index, self.length = job, index, length
        self.tokens: list[int] = []
        self.text = ""
        self.sent = 0
        self.prefix = 0  # tokens[prefix:read] were decoded into text's tail; decoding restarts at prefix
        self.read = 0
        self.last = 0
        self.done = False


class CpuEngine:
    """A base model (plain Hugging Face directory) served with continuous batching and LoRA adapters.

    Args:
        path: local directory of the base weights (and tokenizer).
        max_batch: rows decoded together; more requests wait in the inbox.
    """

    def __init__(self, path: str, *, max_batch: int = 32, max_model_len: int | None = None) -> None:
        from transformers import AutoModelForCausalLM

        from engine.models import load_tokenizer

        self.tokenizer = load_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, dtype=torch.float32)
        model.eval()
        self.model = BatchModel(model)
        self.eos = {int(self.tokenizer.eos_token_id)} if self.tokenizer.eos_token_id is not None else set()
        extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        self.eos |= {int(e) for e in ([extra] if isinstance(extra, int) else (extra or []))}
        limit = int(getattr(model.config, "max_position_embeddings", 0) or 0) or 2048
        self.max_model_len = min(max_model_len or limit, limit)
        self.max_batch = max_batch
        self.adapters: dict[str, LoraAdapter] = {}
        self._inbox: queue.Queue[_Job] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.steps = 0
        self.running = 0

    # --- adapters ----------------------------------------------------------------------------------

    def load_adapter(self, name: str, path: str) -> LoraAdapter:
        adapter = load_adapter(path, name, self.model.dtype)
        self.adapters[name] = adapter
        return adapter

    def drop_adapter(self, name: str) -> None:
        """Forget an adapter; rows already running with it keep their reference and finish."""
        self.adapters.pop(name, None)

    # --- requests ----------------------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        adapter = None
        if request.adapter is not None:
            adapter = self.adapters.get(request.adapter)
            if adapter is None:
                raise EngineError(f"adapter {request.adapter} is not loaded", code="model_not_found")
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[Delta] = asyncio.Queue()
        job = _Job(request, adapter, lambda d: loop.call_soon_threadsafe(out.put_nowait, d))
        self._start()
        self._inbox.put(job)
        finished = 0
        try:
            while finished < request.n:
                delta = await out.get()
                if delta.error is not None:
                    raise EngineError(delta.error, code="engine_failed")
                if delta.finish_reason is not None:
                    finished += 1
                yield delta
        finally:
            job.cancelled = True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="keel-serving", daemon=True)
                self._thread.start()

    # --- the loop ----------------------------------------------------------------------------------

    def _loop(self) -> None:
        rows: list[_Row] = []
        pending: list[_Job] = []
        while True:
            try:
                if not rows and not pending:
                    self.model.release()
                    pending.append(self._inbox.get())
                while True:
                    pending.append(self._inbox.get_nowait())
            except queue.Empty:
                pass
            try:
                pending = self._admit(pending, rows)
                rows = self._compact(rows)
                self.running = len(rows)
                if rows:
                    self._step(rows)
                    rows = self._compact(rows)
            except Exception as e:  # a failed step fails its requests, never the loop
                log.exception("serving step failed")
                for job in {id(r.job): r.job for r in rows}.values():
                    job.emit(Delta(index=0, token_id=None, error=f"generation failed: {type(e).__name__}"))
                rows = []

    def _admit(self, pending: list[_Job], rows: list[_Row]) -> list[_Job]:
        waiting = []
        for job in pending:
            if job.cancelled:
                continue
            req = job.request
            if waiting or len(rows) + req.n > max(self.max_batch, req.n if not rows else 0):
                waiting.append(job)  # first come, first served: nobody overtakes a waiting request
                continue
            prompt = len(req.prompt_ids)
            first = len(rows)
            self.model.reserve(first + req.n, prompt + req.max_tokens)
            logits = self.model.prefill(first, req.prompt_ids, job.adapter)
            for k in range(1, req.n):
                self.model.copy_slot(first, first + k, prompt)
            new = [_Row(job, k, prompt) for k in range(req.n)]
            rows.extend(new)
            self._advance(new, logits.expand(req.n, -1))
        return waiting

    def _step(self, rows: list[_Row]) -> None:
        logits = self.model.step([r.last for r in rows], [r.length for r in rows], [r.job.adapter for r in rows])
        for r in rows:
            r.length += 1
        self.steps += 1
        self._advance(rows, logits)

    def _advance(self, rows: list[_Row], logits: torch.Tensor) -> None:
        """Sample each row's next token from `logits` `(rows, vocab)` and release what it finishes."""
        reqs = [r.job.request for r in rows]
        tokens = sample(logits, torch.tensor([q.temperature for q in reqs], dtype=torch.float32),
                        torch.tensor([q.top_p for q in reqs], dtype=torch.float64),
                        torch.tensor([q.seeds[r.index] & 0xFFFFFFFF for q, r in zip(reqs, rows)], dtype=torch.int64),
                        torch.tensor([len(r.tokens) for r in rows], dtype=torch.int64))
        logp = torch.log_softmax(logits.float(), dim=-1)
        chosen = logp.gather(-1, tokens[:, None])[:, 0].tolist()
        most = max(q.top_logprobs for q in reqs)
        top = torch.topk(logp, most, dim=-1) if most else None
        for i, (r, token) in enumerate(zip(rows, tokens.tolist())):
            req = r.job.request
            if r.job.cancelled:
                r.done = True
                continue
            r.tokens.append(token)
            r.last = token
            best = [] if top is None else list(zip(top.indices[i, :req.top_logprobs].tolist(),
                                                   top.values[i, :req.top_logprobs].tolist()))
            text, reason = self._release(r, token)
            r.job.emit(Delta(index=r.index, token_id=token, text=text, logprob=chosen[i], top=best,
                             finish_reason=reason))
            r.done = reason is not None

    def _release(self, r: _Row, token: int) -> tuple[str, str | None]:
        """The text `token` lets choice `r` release, and why it finished (None: it goes on)."""
        req = r.job.request
        ended = token in self.eos
        if not ended:
            self._detokenize(r, final=len(r.tokens) >= req.max_tokens)
        elif r.read < len(r.tokens) - 1:  # a character still open when EOS came: what there is of it
            self._detokenize(r, final=True)
        if req.stop:
            start = max(0, r.sent - max(len(s) for s in req.stop))
            hits = [i for i in (r.text.find(s, start) for s in req.stop) if i >= 0]
            if hits:
                cut = max(min(hits), r.sent)
                r.text = r.text[:cut]
                return self._flush(r), "stop"
        if ended:
            return self._flush(r), "stop"
        if len(r.tokens) >= req.max_tokens:
            return self._flush(r), "length"
        end = len(r.text)
        # Hold back a tail that may be the start of a stop string.
        end -= max((n for s in req.stop for n in range(min(len(s) - 1, end - r.sent), 0, -1)
                    if r.text[end - n:end] == s[:n]), default=0)
        text, r.sent = r.text[r.sent:max(end, r.sent)], max(end, r.sent)
        return text, None

    def _detokenize(self, r: _Row, final: bool) -> None:
        """Extend `r.text` with the new token's text, decoding a short window (not the whole
        completion): the text of tokens[prefix:] past that of tokens[prefix:read]. Decoding from a few
        tokens back keeps what a tokenizer makes of a word's start (SentencePiece's spaces) right; a
        window ending inside a UTF-8 character waits for its other bytes unless `final`."""
        end = len(r.tokens) - (1 if r.tokens and r.tokens[-1] in self.eos else 0)
        before = self.tokenizer.decode(r.tokens[r.prefix:r.read], skip_special_tokens=True)
        after = self.tokenizer.decode(r.tokens[r.prefix:end], skip_special_tokens=True)
        if final or (len(after) > len(before) and not after.endswith("\ufffd")):
            r.text += after[len(before):]
            r.prefix, r.read = r.read, end

    def _flush(self, r: _Row) -> str:
        text, r.sent = r.text[r.sent:], len(r.text)
        return text

    def _compact(self, rows: list[_Row]) -> list[_Row]:
        """Drop finished rows, moving survivors into the freed slots (front-packed)."""
        if not any(r.done or r.job.cancelled for r in rows):
            return rows
        kept: list[_Row] = []
        for slot, r in enumerate(rows):
            if r.done or r.job.cancelled:
                continue
            self.model.move_slot(slot, len(kept), r.length)
            kept.append(r)
        return kept

    def stats(self) -> dict[str, Any]:
        return {"running": self.running, "waiting": self._inbox.qsize(), "steps": self.steps,
                "adapters": len(self.adapters), "weight_bytes": self.model.weight_bytes,
                "adapter_bytes": sum(a.nbytes for a in self.adapters.values())}
