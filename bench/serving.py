"""The CPU serving engine (issue 31): continuous batching against one-after-another `generate`, time to
first token, and the memory of eight LoRA adapters on one replica.

    python -m bench.serving [--requests 16] [--max-tokens 64] [--repeats 3] [--models demo,wide] --json

Per model (the demo Llama and `bench.datasets`' wide one, float32, this process's torch threads):

- batched: `--requests` chat requests (the demo prompts, greedy, `--max-tokens` each) submitted at once
  to `engine.serving.engine.CpuEngine` (the code a Serve replica runs, without Ray's HTTP hop): aggregate
  completion tokens/s, and each request's time to first token (p50, p99);
- sequential: the same prompts one after another through transformers' `model.generate` (greedy, same
  max_new_tokens): tokens/s. The same run, the same machine, alternating with the batched run;
- ratio = batched / sequential tokens/s (target >= 3).

Memory (the wide model): eight random rank-8 adapters on every projection loaded into one engine.
Tensors: the base weights plus the eight adapters the engine holds, against budget = 1.25 x (base
safetensors + 8 x adapter safetensors). Resident: a fresh process's resident-set growth from before the
engine loaded to after the eight adapters each generated a few tokens (Linux `/proc/self/status`), against the same budget.

Reported: median, min and max over `--repeats` of the throughput figures.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from bench.common import demo_assets, emit, load_average, out_dir, percentile, set_threads, spread


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _prompts(engine, count: int) -> list[list[int]]:
    import pyarrow.parquet as pq

    from engine.serving.openai_shapes import prepare

    rows = pq.read_table(demo_assets()["prompts_val"]).column("prompt").to_pylist()
    return [prepare({"messages": [{"role": "user", "content": rows[i % len(rows)]}]}, True, engine.tokenizer,
                    engine.max_model_len).request.prompt_ids for i in range(count)]


def batched(engine, prompts: list[list[int]], max_tokens: int) -> tuple[float, list[float], int]:
    """(tokens/s, times to first token, tokens) of all prompts submitted at once."""
    from engine.serving.engine import GenerationRequest

    async def run():
        start = time.perf_counter()
        firsts: list[float] = []

        async def one(prompt):
            count = 0
            async for _ in engine.generate(GenerationRequest(prompt_ids=prompt, max_tokens=max_tokens, seeds=[0],
                                                             temperature=0)):
                if count == 0:
                    firsts.append(time.perf_counter() - start)
                count += 1
            return count

        counts = await asyncio.gather(*(one(p) for p in prompts))
        return sum(counts) / (time.perf_counter() - start), firsts, sum(counts)

    return asyncio.run(run())


def sequential(model, prompts: list[list[int]], max_tokens: int, eos: int) -> tuple[float, int]:
    import torch

    start, tokens = time.perf_counter(), 0
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                                 do_sample=False, eos_token_id=eos, pad_token_id=eos)
            tokens += out.shape[1] - len(prompt)
    return tokens / (time.perf_counter() - start), tokens


def _adapters(base: str, count: int, root: Path) -> list[str]:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    paths = []
    for i in range(count):
        path = root / f"adapter{i}"
        if not (path / "adapter_model.safetensors").is_file():
            torch.manual_seed(i)
            model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(
                r=8, lora_alpha=16, init_lora_weights=False,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
            model.save_pretrained(path)
        paths.append(str(path))
    return paths


def memory(base: str, count: int) -> dict:
    """Run in a fresh process (`_fresh`): what it grows by is the engine's, not earlier runs' leftovers."""
    import gc

    import transformers.models.llama.modeling_llama  # noqa: F401  (the library, loaded before the baseline)

    from engine.serving.engine import CpuEngine

    adapters = _adapters(base, count, out_dir() / "serving_adapters" / Path(base).name)
    gc.collect()
    before = _rss()
    engine = CpuEngine(base)
    for i, path in enumerate(adapters):
        engine.load_adapter(f"a{i}", path)
    # A few tokens per adapter: weights a loader maps from the file are resident only once read.
    from engine.serving.engine import GenerationRequest

    async def touch():
        for i in range(count):
            async for _ in engine.generate(GenerationRequest(prompt_ids=[1, 2, 3], max_tokens=4, seeds=[0],
                                                             temperature=0, adapter=f"a{i}")):
                pass

    asyncio.run(touch())
    time.sleep(0.2)  # the engine's thread drops its KV cache once idle
    gc.collect()
    grown = _rss() - before
    stats = engine.stats()
    files = sum(f.stat().st_size for f in Path(base).glob("*.safetensors"))
    adapter_files = sum((Path(p) / "adapter_model.safetensors").stat().st_size for p in adapters)
    budget = 1.25 * (files + adapter_files)
    mib = 1 / 2**20
    return {"base_mib": round(files * mib, 2), "adapter_mib_each": round(adapter_files / count * mib, 3),
            "tensors_mib": round((stats["weight_bytes"] + stats["adapter_bytes"]) * mib, 2),
            "resident_growth_mib": round(grown * mib, 2), "budget_mib": round(budget * mib, 2),
            "tensors_within_budget": stats["weight_bytes"] + stats["adapter_bytes"] <= budget,
            "resident_within_budget": grown <= budget}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--models", default="demo,wide")
    p.add_argument("--adapters", type=int, default=8)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: usable cores)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    set_threads(args.threads)
    import torch
    from transformers import AutoModelForCausalLM

    from bench.datasets import wide_model_path
    from engine.serving.engine import CpuEngine

    assets = demo_assets()
    paths = {"demo": assets["model"], "wide": wide_model_path(tokenizer_dir=assets["tokenizer"])}
    result: dict = {"requests": args.requests, "max_tokens": args.max_tokens, "threads": torch.get_num_threads(),
                    "load_average": load_average()}
    for name in filter(None, args.models.split(",")):
        engine = CpuEngine(paths[name], max_batch=max(args.requests, 1))
        model = AutoModelForCausalLM.from_pretrained(paths[name], dtype=torch.float32).eval()
        prompts = _prompts(engine, args.requests)
        batched(engine, prompts[:2], 4)  # warm-up: first-call costs out of the figures
        sequential(model, prompts[:1], 4, engine.tokenizer.eos_token_id)
        fast, slow, ratio, ttft50, ttft99 = [], [], [], [], []
        for _ in range(args.repeats):
            rate, firsts, tokens_b = batched(engine, prompts, args.max_tokens)
            base_rate, tokens_s = sequential(model, prompts, args.max_tokens, engine.tokenizer.eos_token_id)
            fast.append(rate)
            slow.append(base_rate)
            ratio.append(rate / base_rate)
            ttft50.append(percentile(firsts, 50))
            ttft99.append(percentile(firsts, 99))
        result[name] = {"batched_tokens_per_s": spread(fast), "sequential_tokens_per_s": spread(slow),
                        "ratio": spread(ratio), "ttft_p50_s": spread(ttft50), "ttft_p99_s": spread(ttft99),
                        "tokens": {"batched": tokens_b, "sequential": tokens_s}}
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result["memory_wide"] = pool.apply(memory, (paths["wide"], args.adapters))
    emit(result, args.json)


if __name__ == "__main__":
    main()
