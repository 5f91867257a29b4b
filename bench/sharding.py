"""Model state held per data-parallel worker, ddp vs fsdp2 (`engine.runtime.sharding`).

    python -m bench.sharding [--workers 1 2] [--models demo wide] --json

For each model, strategy and worker count it starts that many local processes joined by gloo, loads
the policy as a full fine-tune (float32 masters), shards it under fsdp2 (with more than one
worker), runs one AdamW step on a small batch and prints `perf/model_state_bytes_per_worker`
(parameters + gradients + Adam state of rank 0; local shards of DTensors), the figure the
trainer reports. With one worker fsdp2 has nothing to shard and equals ddp. Nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _worker(rank: int, world: int, port: int, model_dir: str, strategy: str, queue) -> None:
    import torch
    import torch.distributed as dist

    from engine import models
    from engine.config import FSDPConfig, ModelConfig, OptimConfig
    from engine.runtime import sharding
    from engine.schedule import build_optimizer

    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = models.load_policy(model_dir, ModelConfig(use_remove_padding=False), trainable=True)
        if strategy == "fsdp2" and world > 1:
            sharding.shard_model(model, FSDPConfig(), dtype=torch.float32, device=torch.device("cpu"))
        optimizer = build_optimizer(model, OptimConfig())
        ids = torch.randint(3, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(rank))
        model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
        optimizer.step()
        if rank == 0:
            queue.put({"params": sum(p.numel() for p in models.load_policy(
                model_dir, ModelConfig(use_remove_padding=False), trainable=False).parameters()),
                "bytes": sharding.state_bytes(model, optimizer)})
        if world > 1:
            dist.barrier()
    finally:
        if world > 1:
            dist.destroy_process_group()


def measure(model_dir: str, strategy: str, workers: int) -> dict:
    import torch.multiprocessing as mp

    from bench.common import free_port

    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, workers, port, model_dir, strategy, queue)) for r in range(workers)]
    for p in procs:
        p.start()
    out = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=120)
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--models", nargs="+", default=["demo", "wide"], choices=["demo", "wide"])
    p.add_argument("--json", action="store_true", help="print one JSON line per measurement")
    args = p.parse_args(argv)
    from bench.common import demo_assets
    from bench.datasets import wide_model_path

    assets = demo_assets()
    paths = {"demo": assets["model"], "wide": None}
    rows = []
    for name in args.models:
        path = paths[name] or wide_model_path(tokenizer_dir=assets["tokenizer"])
        baseline = None
        for workers in args.workers:
            for strategy in ("ddp", "fsdp2"):
                got = measure(path, strategy, workers)
                baseline = got["bytes"] if strategy == "ddp" and workers == args.workers[0] else baseline
                row = {"model": name, "params": got["params"], "workers": workers, "strategy": strategy,
                       "perf/model_state_bytes_per_worker": got["bytes"],
                       "ratio_to_ddp": round(got["bytes"] / baseline, 3) if baseline else None}
                rows.append(row)
                print(json.dumps(row) if args.json else row, flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main() and 0)
