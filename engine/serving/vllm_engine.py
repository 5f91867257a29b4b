"""The GPU serving engine: vLLM's async engine with LoRA, behind `engine.serving.engine.CpuEngine`'s
interface (`tokenizer`, `max_model_len`, `load_adapter`, `drop_adapter`, `generate` -> `Delta`s).

GPU-only (the optional `gpu` extra, vLLM 0.8.5 - 0.11) and not exercised by the CPU test suite. vLLM
batches continuously and pages its KV cache itself; each choice of a request is its own vLLM request
with that choice's seed, so `n` seeded choices reproduce as on CPU. Log-probs are vLLM's defaults (the
model's distribution before temperature and top-p), the same definition the CPU engine returns.
`vllm` is imported when the engine is built, never at module import.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from typing import Any

from engine.errors import EngineError
from engine.serving.engine import Delta, GenerationRequest


class VllmEngine:
    """A base model on this replica's GPU(s), with up to `max_adapters` LoRA adapters resident."""

    def __init__(self, path: str, *, max_adapters: int = 8, max_lora_rank: int = 64,
                 max_model_len: int | None = None) -> None:
        from vllm import AsyncEngineArgs
        from vllm.engine.async_llm_engine import AsyncLLMEngine

        args = AsyncEngineArgs(model=path, enable_lora=True, max_loras=max_adapters, max_lora_rank=max_lora_rank,
                               max_model_len=max_model_len, enable_prefix_caching=True)
        self.llm = AsyncLLMEngine.from_engine_args(args)
        from engine.models import load_tokenizer

        self.tokenizer = load_tokenizer(path)
        # V1's AsyncLLM holds the model config itself, V0's engine under `.engine`.
        config = getattr(self.llm, "model_config", None) or getattr(getattr(self.llm, "engine", None),
                                                                    "model_config", None)
        self.max_model_len = int(config.max_model_len) if config is not None \
            else int(max_model_len or self.tokenizer.model_max_length)
        self.adapters: dict[str, Any] = {}
        self._ids = itertools.count(1)

    def load_adapter(self, name: str, path: str) -> Any:
        from vllm.lora.request import LoRARequest

        request = LoRARequest(lora_name=name, lora_int_id=next(self._ids), lora_path=path)
        self.adapters[name] = request  # vLLM loads it onto the GPU with its first request
        return request

    def drop_adapter(self, name: str) -> None:
        self.adapters.pop(name, None)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        import asyncio

        from vllm import SamplingParams

        lora = None
        if request.adapter is not None:
            lora = self.adapters.get(request.adapter)
            if lora is None:
                raise EngineError(f"adapter {request.adapter} is not loaded", code="model_not_found")
        queue: asyncio.Queue[Delta | None] = asyncio.Queue()

        async def choice(index: int, seed: int) -> None:
            params = SamplingParams(n=1, temperature=request.temperature, top_p=request.top_p, seed=seed,
                                    max_tokens=request.max_tokens, stop=request.stop or None,
                                    logprobs=max(request.top_logprobs, 0))
            seen, text = 0, ""
            async for out in self.llm.generate({"prompt_token_ids": request.prompt_ids}, params,
                                               request_id=uuid.uuid4().hex, lora_request=lora):
                o = out.outputs[0]
                for j in range(seen, len(o.token_ids)):
                    last = j == len(o.token_ids) - 1
                    token = o.token_ids[j]
                    ranked = (o.logprobs or [{}] * len(o.token_ids))[j] or {}
                    lp = ranked[token].logprob if token in ranked else 0.0
                    top = sorted(((t, v.logprob) for t, v in ranked.items()), key=lambda x: -x[1])
                    delta_text = o.text[len(text):] if last else ""
                    finished = out.finished and last
                    await queue.put(Delta(index=index, token_id=token, text=delta_text, logprob=lp,
                                          top=top[:request.top_logprobs],
                                          finish_reason=(o.finish_reason or "stop") if finished else None))
                    if last:
                        text = o.text
                seen = len(o.token_ids)

        tasks = [asyncio.create_task(choice(k, s)) for k, s in enumerate(request.seeds)]
        done = asyncio.gather(*tasks)
        done.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                yield item
            await done  # re-raises a choice's failure
        finally:
            for t in tasks:
                t.cancel()

    def stats(self) -> dict[str, Any]:
        return {"adapters": len(self.adapters)}
