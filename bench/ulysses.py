"""Ulysses sequence parallelism: per-worker activation memory of one forward + backward over a
4096-token packed row of the demo Llama, one worker (SP=1) against each of two gloo workers (SP=2).

    python -m bench.ulysses [--tokens 4096] [--repeats 3] --json

Each run is a fresh process per worker: it loads the model, runs one small warm-up step, takes its
resident set size as the baseline and resets the kernel's high-water mark (`/proc/self/clear_refs`,
5), then runs the SFT loss (`engine.methods.sft.sft_loss_sum`) forward and backward over the row; growth =
`VmHWM` - baseline. Linux only. Reported: median, min and max over the repeats of the SP=2 workers'
growth over SP=1's.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from bench.common import demo_assets, emit, free_port


def _status(key: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024


def _run(rank: int, world: int, port: int, model: str, tokens: int, queue) -> None:
    import torch
    import torch.distributed as dist

    from engine import models
    from engine.config import ModelConfig
    from engine.methods.sft import sft_loss_sum
    from engine.runtime import ulysses

    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    lay = ulysses.layout(world, rank, world) if world > 1 else ulysses.Layout()
    policy = models.load_policy(model, ModelConfig(), trainable=True)
    ulysses.enable(policy, lay)
    g = torch.Generator().manual_seed(0)

    def step(n: int) -> None:
        ids = torch.randint(3, 200, (1, n), generator=g)
        loss, count, _ = sft_loss_sum(policy, ids, torch.ones_like(ids), torch.tensor([1]))
        (loss / count * lay.loss_scale).backward()
        policy.zero_grad(set_to_none=False)

    step(64)  # thread pools, autograd and the gradients' buffers set up
    base = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    step(tokens)
    queue.put((rank, _status("VmHWM") - base))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def measure(model: str, tokens: int, world: int) -> list[int]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_run, args=(r, world, port, model, tokens, queue)) for r in range(world)]
    for p in procs:
        p.start()
    out = dict(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    return [out[r] for r in range(world)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model = demo_assets()["model"]
    ratios, one, two = [], [], []
    for _ in range(args.repeats):
        single = measure(model, args.tokens, 1)[0]
        pair = measure(model, args.tokens, 2)
        one.append(single)
        two.extend(pair)
        ratios.extend(p / single for p in pair)
    mib = 2**20
    emit({"tokens": args.tokens, "sp1_growth_mib": [round(b / mib, 1) for b in one],
          "sp2_growth_mib": [round(b / mib, 1) for b in two],
          "ratio_median": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
          "ratio_max": round(max(ratios), 3)}, args.json)


if __name__ == "__main__":
    main()
