"""GPU check: SFT, reward-model and PPO steps on a Qwen2-0.5B-shaped model; one JSON line of figures.

    bash scripts/gpu-check.sh                          # one NVIDIA GPU, a few minutes
    python -m bench.gpu_check --device cpu --tiny      # the same path on CPU, about a minute

Made for a bare GPU machine: it needs torch, transformers, peft, safetensors, numpy (and tokenizers,
which transformers brings) and nothing else: no Ray, no service, no network. Every asset is built
here from fixed seeds: a byte-level BPE tokenizer padded to Qwen2's 151,936 ids, a randomly
initialised Qwen2 model of Qwen2-0.5B's shape, and synthetic JSON Lines data with long-tailed
lengths. Each phase runs through the engine's entry point (`engine.runtime.jobs.run_job`) with
`resources.executor: local`, in this process, in bf16 with the knobs in `KNOBS`.

Figures (the JSON line):
- `phases.<sft|rm|ppo>`: `tokens_per_s` (real tokens; steps after the first, which pays for
  warm-up), `mfu` (model FLOPs per second over `gemm_peak_tflops`), `peak_memory_gib`;
- `gemm_peak_tflops`: the best of timed square bf16 matmuls on this device (the MFU reference);
- `weight_change`: share of trained weight elements that changed after the steps at lr 1e-6, in
  the trainer's master weights (the last checkpoint: `changed_fraction`) and rounded to bf16
  (`bf16_changed_fraction`);
- `packing`: max |log p| difference between packed (`model.use_remove_padding: true`) and padded
  reference log-probs of the same batch.

Model FLOPs are the usual `6 N` per trained token and `2 N` per forward-only token, where `N` counts
the matmul weights (no embedding lookup; the LM head counted in full); attention's `seq^2` term is
left out, so MFU is slightly understated.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KNOBS: dict[str, Any] = {
    "model.dtype": "bfloat16",
    "model.strategy": "fsdp2",
    "model.use_remove_padding": True,
    "actor.strategy": "fsdp2",
    "critic.strategy": "fsdp2",
}
"""What the check measures: bf16 compute (float32 masters), FSDP2 and packing. `model.strategy`
applies to SFT and the reward model, `actor.strategy` / `critic.strategy` to PPO."""

QWEN2_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
             "max_position_embeddings": 32768,
             "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True}
"""Qwen2-0.5B's architecture (its config.json), weights random."""
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 2048, "max_position_embeddings": 512,
        "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True}
"""The same architecture, small enough for CPU."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Batch and length settings of one run."""

    steps: int
    batch: int
    """Rows per supervised step; prompts per PPO step."""
    n: int
    """PPO samples per prompt."""
    max_prompt: int
    max_response: int
    token_budget: int
    """Tokens per micro-batch (`max_token_len_per_gpu`)."""
    prompt_words: tuple[int, int]
    response_words: tuple[int, int]


FULL = Sizes(steps=4, batch=16, n=4, max_prompt=256, max_response=256, token_budget=16384,
             prompt_words=(8, 160), response_words=(10, 220))
SMALL = Sizes(steps=2, batch=4, n=2, max_prompt=32, max_response=24, token_budget=512,
              prompt_words=(2, 12), response_words=(2, 16))

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}User: {{ m['content'] }}\n"
    "{% else %}Assistant:\n{{ m['content'] }}{{ eos_token }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant:\n{% endif %}")
LR = 1e-6


def log(message: str) -> None:
    print(f"[gpu_check] {message}", file=sys.stderr, flush=True)


# --- assets ----------------------------------------------------------------------------------------

def _words(rng: random.Random, count: int) -> list[str]:
    syllables = ["ka", "lo", "mi", "ten", "ra", "shu", "vo", "pe", "dri", "an", "os", "el", "qui", "bar"]
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(count)]


def _text(rng: random.Random, vocab: list[str], bounds: tuple[int, int]) -> str:
    # Long-tailed lengths (most short, a few near the cap): what makes padding and packing matter.
    lo, hi = bounds
    n = min(hi, lo + int(rng.expovariate(3.0 / (hi - lo))))
    return " ".join(rng.choice(vocab) for _ in range(n)).capitalize() + "."


def write_data(out: Path, sizes: Sizes, seed: int = 0) -> tuple[dict[str, str], list[str]]:
    """SFT, preference and prompt files (JSON Lines) with enough rows for `sizes.steps` steps; returns
    their paths by kind and every text in them (the tokenizer's training corpus)."""
    rng = random.Random(seed)
    vocab = _words(rng, 400)
    rows = sizes.batch * sizes.steps * 2  # the supervised loop holds 10% out for validation
    data = {
        "sft": [{"prompt": _text(rng, vocab, sizes.prompt_words),
                 "response": _text(rng, vocab, sizes.response_words)} for _ in range(rows)],
        "preference": [{"prompt": _text(rng, vocab, sizes.prompt_words),
                        "chosen": _text(rng, vocab, sizes.response_words),
                        "rejected": _text(rng, vocab, sizes.response_words)} for _ in range(rows)],
        "prompts": [{"prompt": _text(rng, vocab, sizes.prompt_words)}
                    for _ in range(sizes.batch * sizes.steps)],
    }
    paths = {}
    out.mkdir(parents=True, exist_ok=True)
    for name, items in data.items():
        path = out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in items))
        paths[name] = str(path)
    return paths, [r[k] for items in data.values() for r in items for k in r]


def build_tokenizer(corpus: list[str], vocab_size: int, out: Path):
    """A byte-level BPE learnt from `corpus`, its vocabulary padded to exactly `vocab_size` ids with
    filler tokens no merge produces (as a real checkpoint's embedding rows beyond its tokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(vocab_size, 2000), special_tokens=[PAD, BOS, EOS],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    spec = json.loads(tok.to_str())
    table = spec["model"]["vocab"]
    i = 0
    while len(table) < vocab_size:
        table.setdefault(f"<filler{i}>", len(table))
        i += 1
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                       special_tokens=[(BOS, 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   padding_side="right", model_max_length=32768)
    fast.chat_template = CHAT_TEMPLATE
    if len(fast) != vocab_size:
        raise RuntimeError(f"tokenizer has {len(fast)} ids, wanted {vocab_size}")
    fast.save_pretrained(out)
    return fast


def build_model(shape: dict[str, Any], tokenizer: Any, out: Path, device: str,
                seed: int = 0) -> dict[str, int]:
    """A random Qwen2 causal LM of `shape`, saved in bf16 to `out` (with the tokenizer); returns the
    parameter counts the FLOP estimates use."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **shape)
    torch.manual_seed(seed)
    with torch.device(device):  # initialising 0.5B weights on the GPU takes a second, on CPU much longer
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                                               eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    head = shape["hidden_size"] * shape["vocab_size"]
    body = total - embed - (0 if shape["tie_word_embeddings"] else head)
    del model
    return {"params": total, "body": body, "lm_head": head, "hidden": shape["hidden_size"]}


# --- device figures ----------------------------------------------------------------------------------

def gemm_peak_tflops(device: str, tiny: bool) -> float:
    """Best-of bf16 TFLOP/s of square matmuls on `device` (8192 on CUDA; smaller on CPU)."""
    import torch

    size = 8192 if device == "cuda" else (256 if tiny else 1024)
    repeats = 20 if device == "cuda" else 3
    a = torch.randn(size, size, dtype=torch.bfloat16, device=device)
    b = torch.randn(size, size, dtype=torch.bfloat16, device=device)
    out = torch.empty_like(a)
    for _ in range(3):  # warm-up: kernel selection, clocks
        torch.mm(a, b, out=out)
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        for _ in range(5):
            torch.mm(a, b, out=out)
        _sync(device)
        best = min(best, (time.perf_counter() - start) / 5)
    return 2 * size**3 / best / 1e12


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _reset_memory(device: str) -> None:
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_memory_gib(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    # CPU: the process's peak resident set so far (Linux reports KiB); it never resets between phases.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


# --- phases ------------------------------------------------------------------------------------------

def nested(flat: dict[str, Any]) -> dict[str, Any]:
    """`{"a.b": 1}` -> `{"a": {"b": 1}}`."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def knobs_for(method: str) -> dict[str, Any]:
    if method == "ppo":
        return {k: v for k, v in KNOBS.items() if k != "model.strategy"}
    return {k: v for k, v in KNOBS.items() if not k.startswith(("actor.", "critic."))}


def phase_config(method: str, sizes: Sizes) -> dict[str, Any]:
    """The job's hyperparameters (flat dotted keys)."""
    s = sizes
    common = {"data.max_prompt_length": s.max_prompt, "data.max_response_length": s.max_response,
              "data.truncation": "right", "trainer.total_training_steps": s.steps, "trainer.test_freq": -1,
              "trainer.save_freq": -1, **knobs_for(method)}
    if method in ("sft", "reward_model"):
        return {**common, "data.train_batch_size": s.batch, "optim.lr": LR, "use_dynamic_bsz": True,
                "max_token_len_per_gpu": s.token_budget}
    return {**common, "data.train_batch_size": s.batch, "rollout.n": s.n,
            "actor.ppo_mini_batch_size": s.batch, "actor.ppo_epochs": 1,
            "actor.ppo_max_token_len_per_gpu": s.token_budget, "actor.optim.lr": LR,
            "critic.ppo_max_token_len_per_gpu": s.token_budget, "algorithm.adv_estimator": "gae"}


def run_phase(method: str, sizes: Sizes, model_path: str, data_file: str, work: Path, device: str,
              reward: dict[str, Any] | None = None) -> tuple[list[dict[str, float]], str, str, float]:
    """Run one job in-process; returns (per-step metrics, output directory, last checkpoint directory,
    peak memory GiB)."""
    from engine.config import METHOD_CONFIGS, JobRequest, Resources, build_config
    from engine.runtime.jobs import run_job
    from engine.runtime.reporting import RecordingReporter

    config = build_config(METHOD_CONFIGS[method], nested(phase_config(method, sizes)))
    request = JobRequest(job_id=f"gpu-check-{method}", method=method, config=config, model_path=model_path,
                         training_file=data_file, output_dir=str(work / method / "out"),
                         checkpoint_dir=str(work / method / "ckpt"), seed=0, reward=reward or {},
                         resources=Resources(executor="local",
                                             gpus_per_worker=1.0 if device == "cuda" else 0.0))
    reporter = RecordingReporter()
    _reset_memory(device)
    start = time.perf_counter()
    run_job(request, reporter)
    _sync(device)
    peak = _peak_memory_gib(device)
    steps = [e["values"] for e in reporter.of("metrics")]
    log(f"{method}: {len(steps)} steps in {time.perf_counter() - start:.1f}s (with loading and saving)")
    return steps, request.output_dir, reporter.of("checkpoint")[-1]["path"], peak


def _timed(steps: list[dict[str, float]]) -> list[dict[str, float]]:
    """The steps that count: all but the first (warm-up), unless there is only one."""
    return steps[1:] if len(steps) > 1 else steps


def supervised_figures(steps: list[dict[str, float]], flops_per_token: float, peak_flops: float,
                       peak_memory: float) -> dict[str, float]:
    timed = _timed(steps)
    seconds = sum(m["timing_s/step"] for m in timed)
    tokens = sum(m["perf/tokens_per_s"] * m["timing_s/step"] for m in timed)
    rate = tokens / seconds
    return {"tokens_per_s": round(rate, 1), "mfu": round(rate * flops_per_token / peak_flops, 4),
            "peak_memory_gib": round(peak_memory, 3), "steps": len(steps), "timed_steps": len(timed),
            "step_s": round(statistics.median(m["timing_s/step"] for m in timed), 3)}


def ppo_figures(steps: list[dict[str, float]], counts: dict[str, int], sizes: Sizes, peak_flops: float,
                peak_memory: float) -> dict[str, float]:
    """Per step, with T the step's tokens (prompt + response, every sample): generation, old and
    reference log-probs and the actor's post-update log-probs are 2 N_lm T each, values and reward
    2 N_v T each, the updates 6 N T per epoch (one epoch here)."""
    n_lm = counts["body"] + counts["lm_head"]
    n_v = counts["body"] + counts["hidden"]
    timed = _timed(steps)
    seconds = sum(m["timing_s/step"] for m in timed)
    tokens = sum(m["perf/total_num_tokens"] for m in timed)
    flops = tokens * (4 * 2 * n_lm + 2 * 2 * n_v + 6 * n_lm + 6 * n_v)
    samples = sizes.batch * sizes.n
    gen_tokens = sum(m["response_length/mean"] * samples for m in timed)
    gen_seconds = sum(m["timing_s/gen"] for m in timed)
    return {"tokens_per_s": round(tokens / seconds, 1), "mfu": round(flops / seconds / peak_flops, 4),
            "gen_tokens_per_s": round(gen_tokens / gen_seconds, 1), "peak_memory_gib": round(peak_memory, 3),
            "steps": len(steps), "timed_steps": len(timed),
            "step_s": round(statistics.median(m["timing_s/step"] for m in timed), 3),
            "gen_s": round(statistics.median(m["timing_s/gen"] for m in timed), 3),
            "response_length_mean": round(statistics.mean(m["response_length/mean"] for m in timed), 1)}


# --- correctness figures -------------------------------------------------------------------------------

def _weights(directory: str) -> dict[str, Any]:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(directory).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def weight_change(before_dir: str, after_dir: str) -> dict[str, Any]:
    """Share of the weight elements in `after_dir` (a checkpoint: the trainer's master weights) that
    differ from `before_dir` (tensors present in both, matched by name): exactly, and both rounded
    to bf16 (what a bf16 copy of the model, e.g. an inference engine's, would see)."""
    import torch

    before, after = _weights(before_dir), _weights(after_dir)
    names = sorted(set(before) & set(after))
    changed = changed_bf16 = total = 0
    dtypes = set()
    for name in names:
        a, b = after[name], before[name]
        dtypes.add(str(a.dtype).removeprefix("torch."))
        changed += int((a != b.to(a.dtype)).sum())
        changed_bf16 += int((a.to(torch.bfloat16) != b.to(torch.bfloat16)).sum())
        total += a.numel()
    return {"changed_fraction": round(changed / max(total, 1), 6),
            "bf16_changed_fraction": round(changed_bf16 / max(total, 1), 6),
            "elements": total, "tensors": len(names), "master_dtype": ",".join(sorted(dtypes))}


def packing_agreement(model_path: str, prompts_file: str, sizes: Sizes, device: str) -> dict[str, Any]:
    """Reference log-probs of one batch of varied lengths, packed and padded (the engine's own
    log-prob path, `engine.roles.reference.Reference`, with `model.use_remove_padding` on and off)."""
    from engine.config import PPOConfig, build_config
    from engine.data import load_rows, tokenize_prompts
    from engine.models import load_tokenizer
    from engine.roles.batch import build_batch
    from engine.roles.reference import Reference

    tokenizer = load_tokenizer(model_path)
    rows = load_rows(prompts_file, "prompts")[: sizes.batch * sizes.n]
    prompts = [p.prompt_ids for p in tokenize_prompts(rows, tokenizer, sizes.max_prompt, "right")]
    rng = random.Random(1)
    vocab = len(tokenizer)
    responses = [[rng.randrange(3, vocab) for _ in range(rng.randint(1, sizes.max_response))]
                 for _ in prompts]
    batch = build_batch(prompts, responses, prompt_width=sizes.max_prompt, response_width=sizes.max_response,
                        pad_id=tokenizer.pad_token_id)
    out = {}
    for packed in (True, False):
        flat = {**phase_config("ppo", sizes), "model.use_remove_padding": packed}
        cfg = build_config(PPOConfig, nested(flat))
        ref = Reference(cfg, model_path, use_gpu=device == "cuda")
        out[packed] = ref.compute_ref_log_prob(batch)["log_probs"]
        del ref
        _reset_memory(device)
    mask = batch["response_mask"].bool()
    diff = (out[True] - out[False]).abs()[mask]
    return {"max_abs_logprob_diff": float(diff.max()), "mean_abs_logprob_diff": float(diff.mean()),
            "tokens": int(mask.sum()), "rows": len(prompts)}


# --- main ----------------------------------------------------------------------------------------------

def run(device: str, tiny: bool, work: Path, steps: int | None = None) -> dict[str, Any]:
    import torch
    import transformers

    wall = time.perf_counter()
    shape = TINY if tiny else QWEN2_05B
    sizes = SMALL if tiny else FULL
    if steps:
        sizes = dataclasses.replace(sizes, steps=steps)
    peak_tflops = gemm_peak_tflops(device, tiny)
    log(f"bf16 GEMM peak on {device}: {peak_tflops:.1f} TFLOP/s")
    data, corpus = write_data(work / "data", sizes)
    tokenizer = build_tokenizer(corpus, shape["vocab_size"], work / "tokenizer")
    base = work / "base"
    counts = build_model(shape, tokenizer, base, device)
    log(f"model: {counts['params'] / 1e6:.1f}M parameters, vocab {shape['vocab_size']}")
    peak_flops = peak_tflops * 1e12
    n_lm = counts["body"] + counts["lm_head"]
    n_v = counts["body"] + counts["hidden"]

    sft_steps, _, sft_ckpt, sft_mem = run_phase("sft", sizes, str(base), data["sft"], work, device)
    rm_steps, rm_out, _, rm_mem = run_phase("reward_model", sizes, str(base), data["preference"], work,
                                            device)
    ppo_steps, _, ppo_ckpt, ppo_mem = run_phase("ppo", sizes, str(base), data["prompts"], work, device,
                                                reward={"model_path": rm_out})
    result: dict[str, Any] = {
        "bench": "gpu_check",
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "tiny": tiny,
        "model": {"architecture": "Qwen2ForCausalLM", **{k: shape[k] for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "vocab_size")}, "params": counts["params"]},
        "knobs": KNOBS,
        "executor": "local",
        "gemm_peak_tflops": float(f"{peak_tflops:.3g}"),  # 3 significant digits: a loaded CPU gives a few GFLOP/s
        "phases": {
            "sft": supervised_figures(sft_steps, 6 * n_lm, peak_flops, sft_mem),
            "rm": supervised_figures(rm_steps, 6 * n_v, peak_flops, rm_mem),
            "ppo": ppo_figures(ppo_steps, counts, sizes, peak_flops, ppo_mem),
        },
        "peak_memory_kind": "cuda_max_allocated" if device == "cuda" else "cpu_max_rss",
        "weight_change": {"lr": LR, "sft": weight_change(str(base), sft_ckpt),
                          "ppo_actor": weight_change(str(base), os.path.join(ppo_ckpt, "actor"))},
        "packing": packing_agreement(str(base), data["prompts"], sizes, device),
        "ray_imported": "ray" in sys.modules,
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }
    result["wall_s"] = round(time.perf_counter() - wall, 1)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    p.add_argument("--tiny", action="store_true",
                   help="a tiny model of the same architecture (CPU smoke run)")
    p.add_argument("--steps", type=int, default=None, help="training steps per phase (default 4; tiny: 2)")
    p.add_argument("--work", default=None, help="scratch directory (default: a temporary one, removed after)")
    args = p.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda, but torch sees no CUDA device")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.work:
        result = run(device, args.tiny, Path(args.work), args.steps)
    else:
        with tempfile.TemporaryDirectory(prefix="keel-gpu-check-") as tmp:
            result = run(device, args.tiny, Path(tmp), args.steps)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
