"""What the interactive-trainer session tests share: a session on the demo model, cross-entropy datums
of demo SFT rows, and weight comparisons (tests/engine/test_trainer_session.py, test_trainer_states.py)."""

from __future__ import annotations

import torch

from engine import data as data_lib
from engine.interactive.session import TrainingSession
from engine.interactive.spec import SessionSpec

SEED = 3
PROMPTS = ["What is 1 + 2?", "What is 7 - 3?", "What is 4 + 4?", "What is 9 - 5?"]


def make(assets, tmp, **spec) -> TrainingSession:
    spec.setdefault("seed", SEED)
    spec.setdefault("state_root", str(tmp / "state"))
    session = TrainingSession(SessionSpec(session_id="s", model_path=assets["model"], **spec))
    session.start()
    return session


def sft_datums_of(tokenizer, rows):
    """Cross-entropy datums of SFT rows, weight 0.1 per response token."""
    out = []
    for e in data_lib.tokenize_sft(rows, tokenizer, 64, 64, "error"):
        ids = e.input_ids
        weights = [0.1 if t + 1 >= e.prompt_len else 0.0 for t in range(len(ids) - 1)]
        out.append({"model_input": ids[:-1], "loss_fn_inputs": {"target_tokens": ids[1:], "weights": weights}})
    return out


def weights_of(session) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in session.model.named_parameters() if v.requires_grad}


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def prompt_ids(session):
    return [data_lib.prompt_token_ids(session.tokenizer, p) for p in PROMPTS]
