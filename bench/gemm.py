"""The machine's dense matmul peak (GFLOP/s) for fp32 and bf16: the reference for MFU figures.

    python -m bench.gemm [--size 2048] [--repeats 10] [--threads N] [--dtypes float32,bfloat16] --json

`fp32_gflops` / `bf16_gflops` are the best of --repeats timed products (the peak: on a shared
machine a slower repeat means another process took the core, not a slower core); the `_median`
figures show how much the machine's other load moved it.
"""

from __future__ import annotations

import argparse
import json
import time


def measure(dtype_name: str, size: int, repeats: int) -> float:
    """Best-of-`repeats` GFLOP/s of a square (size x size) @ (size x size) matmul."""
    return measure_all(dtype_name, size, repeats)[0]


def measure_all(dtype_name: str, size: int, repeats: int) -> tuple[float, float]:
    """(best, median) GFLOP/s over `repeats` square (size x size) @ (size x size) matmuls."""
    import statistics

    import torch

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    out = a @ b  # warm-up: first call pays for allocation and kernel selection
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)  # into the same buffer: the product alone, no allocation
        times.append(time.perf_counter() - t0)
    flops = 2 * size**3 / 1e9
    return flops / min(times), flops / statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--dtypes", default="float32,bfloat16",
                   help="which to measure; a CPU without native bf16 (no AVX512-BF16/AMX) takes minutes for bf16")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"bench": "gemm", "size": args.size, "threads": torch.get_num_threads()}
    wanted = set(args.dtypes.split(","))
    for dtype, key in (("float32", "fp32"), ("bfloat16", "bf16")):
        if dtype not in wanted:
            continue
        best, median = measure_all(dtype, args.size, args.repeats)
        result[f"{key}_gflops"] = round(best, 1)
        result[f"{key}_gflops_median"] = round(median, 1)
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return result


if __name__ == "__main__":
    main()
