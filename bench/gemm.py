"""The machine's dense matmul peak (GFLOP/s) for fp32 and bf16: the reference for MFU figures.

    python -m bench.gemm [--size 2048] [--repeats 10] [--threads N] --json
"""

from __future__ import annotations

import argparse
import json
import time


def measure(dtype_name: str, size: int, repeats: int) -> float:
    """Best-of-`repeats` GFLOP/s of a square (size x size) @ (size x size) matmul."""
    import torch

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up: first call pays for allocation and kernel selection
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"bench": "gemm", "size": args.size, "threads": torch.get_num_threads(),
              "fp32_gflops": round(measure("float32", args.size, args.repeats), 1),
              "bf16_gflops": round(measure("bfloat16", args.size, args.repeats), 1)}
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return result


if __name__ == "__main__":
    main()
