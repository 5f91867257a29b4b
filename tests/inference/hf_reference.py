"""What `transformers` answers for a model directory, for the inference tests to compare Keel's serving
with: greedy `generate` and the log-probs of given tokens (a named module: `conftest` is ambiguous)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx
import torch
from transformers import AutoModelForCausalLM


def load(path: str | Path):
    return AutoModelForCausalLM.from_pretrained(str(path), torch_dtype=torch.float32).eval()


def greedy(model, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """`generate` without sampling, up to and without the end-of-sequence token."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                             max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, top_k=None, top_p=None,
                             temperature=None)
    new = out[0, len(prompt_ids):].tolist()
    eos = eos_ids(model)
    cut = next((i for i, t in enumerate(new) if t in eos), len(new))
    return new[:cut]


def eos_ids(model) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set(eos if isinstance(eos, list) else [eos] if eos is not None else [])


def logprobs(model, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """Each completion token's log-prob under the model at temperature 1."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + completion_ids])).logits[0].float()
    steps = logits[len(prompt_ids) - 1:-1].log_softmax(-1)
    return steps.gather(1, torch.tensor(completion_ids)[:, None])[:, 0].tolist()


def download(base_url: str, key: str, model: str, into: Path) -> Path:
    """A Keel model's merged weights as `GET /v1/models/{id}/content?merged=true` gives them; the directory."""
    r = httpx.get(f"{base_url}/v1/models/{model}/content", params={"merged": "true"},
                  headers={"Authorization": f"Bearer {key}"}, timeout=120, trust_env=False)
    r.raise_for_status()
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        tar.extractall(into, filter="data")
    return next(into.rglob("config.json")).parent
