"""Many LoRA clients on one base model (issue 30): the shared LoRA host's memory against separate
trainers, and the throughput of clients taking turns in it.

    python -m bench.tinker_lora [--clients 8] [--interleaved 4] [--rounds 4] [--repeats 3] --json

The model is a Llama built here from the demo tokenizer (about 11M parameters, float32: large enough
that weights, not the allocator, decide the figures); every client is a rank-8 adapter on all linear
layers, every operation 4 rows of 32 tokens, torch on one thread (a trainer's default `num_cpus: 1`).
Each measurement runs in a fresh process (Linux only: it reads `/proc/self/status`).

- memory: one process runs `engine.interactive.lora_host.LoraHost` (the code of the Ray actor, without
  Ray) with `--clients` trainers; each takes a forward_backward and an optim_step (so its AdamW state
  exists). Baseline: the resident set once a warm-up trainer on the tiny demo model has loaded every
  library and freed its tensors. Peak = high-water mark (`VmHWM`, reset at the baseline) - baseline,
  which includes loading's transients (the safetensors file mapped while its tensors are copied);
  resident = resident set after the work, garbage collected and freed heap returned - baseline. Against it: `--clients` separate
  processes, each one `TrainingSession` with a model of its own doing the same, their growths summed.
  Budget = 1.25 x (base weights + clients x (adapter + AdamW moments)), from the tensors' own sizes.
- throughput: in one host, one client runs `--rounds` rounds of forward_backward + optim_step alone
  (tokens/s), then `--interleaved` clients run as many each at once, then the one client again (its
  two runs averaged); each client calls from a thread of its own, as the actor's threads do. Reported:
  total tokens/s of the interleaved clients over the one client's (target >= 0.8).

Reported: median, min and max over `--repeats` of each ratio, and the MiB figures of the last repeat.
"""

from __future__ import annotations

import argparse
import re
import statistics
import threading
import time
from pathlib import Path

from bench.common import demo_assets, emit, load_average, out_dir

SHAPE = {"hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 6}
RANK = 8
ROWS, LENGTH = 4, 32
THREADS = 1
"""torch threads per process, as a trainer's default `num_cpus: 1` gives its actor."""
ADAM = {"adam_params": {"learning_rate": 1e-3, "grad_clip_norm": 1.0}}
MIB = 2**20


def _status(key: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024


def build_model() -> str:
    """The benchmark's model under `bench/out/tinker_lora` (built once)."""
    out = out_dir() / "tinker_lora" / "model"
    if not (out / "config.json").is_file():
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        from engine.models import load_tokenizer

        tokenizer = load_tokenizer(demo_assets()["tokenizer"])
        torch.manual_seed(7)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=512,
                                             tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id,
                                             eos_token_id=tokenizer.eos_token_id, **SHAPE))
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return str(out)


def _spec(model: str, i: int):
    from engine.interactive.spec import SessionSpec

    return SessionSpec(session_id=f"bench-{i}", model_path=model, lora_rank=RANK, seed=i,
                       state_root=str(out_dir() / "tinker_lora" / "states"))


def _batch(i: int) -> dict:
    first = 3 + (i % 7)
    data = []
    for r in range(ROWS):
        ids = [(first + r + 5 * t) % 1000 + 3 for t in range(LENGTH + 1)]
        data.append({"model_input": ids[:-1], "loss_fn_inputs": {"target_tokens": ids[1:],
                                                                 "weights": [1.0] * LENGTH}})
    return {"data": data, "loss_fn": "cross_entropy"}


def _work(run, i: int) -> None:
    run(i, "forward_backward", _batch(i))
    run(i, "optim_step", ADAM)


def _grown(base: int) -> dict[str, int]:
    """Peak growth, and what stays resident once garbage is collected and freed heap returned (glibc)."""
    import ctypes
    import gc

    peak = _status("VmHWM") - base
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return {"peak": peak, "resident": _status("VmRSS") - base}


def _reset_peak() -> int:
    """Load every library a trainer needs (a throwaway trainer of the tiny demo model), then take the
    resident set as the baseline and reset the high-water mark."""
    import gc

    import torch

    from engine.interactive.session import TrainingSession
    from engine.interactive.spec import SessionSpec

    torch.set_num_threads(THREADS)
    warm = TrainingSession(SessionSpec(session_id="warm-up", model_path=demo_assets()["model"], lora_rank=RANK))
    warm.run("forward_backward", _batch(0))
    warm.run("optim_step", ADAM)
    del warm
    gc.collect()
    base = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    return base


def _host_memory(model: str, clients: int, queue) -> None:
    from engine.interactive.lora_host import LoraHost

    base = _reset_peak()
    host = LoraHost(_spec(model, 0))
    host.start()
    for i in range(clients):
        _work(lambda i, op, p: host.run(_spec(model, i), op, p), i)
    grown = _grown(base)
    stats = host.stats()
    adapter = sum(p.numel() * p.element_size() for p in host.sessions["bench-0"].model.parameters()
                  if p.requires_grad)
    queue.put({"growth": grown, "base": stats["base"], "adapter": adapter, "shared": stats["shared"],
               "tensors": stats["unique"]})


def _separate_memory(model: str, i: int, queue) -> None:
    from engine.interactive.session import TrainingSession

    base = _reset_peak()
    session = TrainingSession(_spec(model, i))
    _work(lambda _i, op, p: session.run(op, p), i)
    queue.put({"growth": _grown(base)})


def _throughput(model: str, clients: int, rounds: int, queue) -> None:
    import torch

    from engine.interactive.lora_host import LoraHost

    torch.set_num_threads(THREADS)
    host = LoraHost(_spec(model, 0))
    host.start()
    tokens = 0

    def client(i: int) -> None:
        nonlocal tokens
        for _ in range(rounds):
            out = host.run(_spec(model, i), "forward_backward", _batch(i))
            host.run(_spec(model, i), "optim_step", ADAM)
            tokens += out["tokens"]

    for i in range(clients):  # everyone joined and warmed up (first AdamW step) before timing
        client_spec = _spec(model, i)
        host.run(client_spec, "forward_backward", _batch(i))
        host.run(client_spec, "optim_step", ADAM)
    def rate(n: int) -> float:
        nonlocal tokens
        tokens = 0
        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return tokens / (time.perf_counter() - start)

    before, many, after = rate(1), rate(clients), rate(1)
    queue.put({"one": (before + after) / 2, "many": many})


def _in_process(target, *args) -> dict:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    out = queue.get(timeout=1800)
    proc.join(timeout=60)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--interleaved", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", help="a model directory instead of the benchmark's (smoke tests: the demo model)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model = args.model or build_model()
    ratios: dict[str, list[float]] = {}
    speed = []
    for _ in range(args.repeats):
        host = _in_process(_host_memory, model, args.clients)
        apart = [_in_process(_separate_memory, model, i)["growth"] for i in range(args.clients)]
        separate = {k: sum(g[k] for g in apart) for k in ("peak", "resident")}
        budget = 1.25 * (host["base"] + args.clients * 3 * host["adapter"])  # adapter + AdamW's two moments
        for k in ("peak", "resident"):
            ratios.setdefault(f"host_{k}_over_budget", []).append(host["growth"][k] / budget)
            ratios.setdefault(f"separate_{k}_over_budget", []).append(separate[k] / budget)
        rates = _in_process(_throughput, model, args.interleaved, args.rounds)
        speed.append(rates["many"] / rates["one"])

    def summary(values: list[float]) -> dict[str, float]:
        return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
                "max": round(max(values), 3)}

    emit({"clients": args.clients, "base_mib": round(host["base"] / MIB, 1),
          "adapter_mib": round(host["adapter"] / MIB, 2), "budget_mib": round(budget / MIB, 1),
          **{f"host_{k}_mib": round(v / MIB, 1) for k, v in host["growth"].items()},
          **{f"separate_{k}_mib": round(v / MIB, 1) for k, v in separate.items()},
          "host_tensors_mib": round(host["tensors"] / MIB, 1), "shared": host["shared"],
          **{k: summary(v) for k, v in ratios.items()},
          "interleaved": args.interleaved, "one_client_tokens_per_s": round(rates["one"], 1),
          "interleaved_tokens_per_s": round(rates["many"], 1), "interleaved_over_one": summary(speed),
          "load_average": load_average()}, args.json)


if __name__ == "__main__":
    main()
