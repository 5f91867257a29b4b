"""The trainer's actor on a real local Ray: `run_operation` starts the named detached actor and gives
the session's results and errors; `release_session` saves and ends it; the next operation restores
it from the saved state and continues as if it had never stopped."""

from __future__ import annotations

import pytest
import torch

from engine import data as data_lib
from engine.errors import ConfigError, DataError
from engine.interactive import release_session, run_operation, session_alive
from engine.interactive.session import TrainingSession
from engine.interactive.spec import SessionSpec, host_name

ADAM = {"adam_params": {"learning_rate": 1e-2, "grad_clip_norm": 1.0}}


def datums(model_path, rows):
    from engine.models import load_tokenizer

    out = []
    for e in data_lib.tokenize_sft(rows, load_tokenizer(model_path), 64, 64, "error"):
        ids = e.input_ids
        weights = [0.05 if t + 1 >= e.prompt_len else 0.0 for t in range(len(ids) - 1)]
        out.append({"model_input": ids[:-1], "loss_fn_inputs": {"target_tokens": ids[1:], "weights": weights}})
    return out


@pytest.mark.slow  # starts two actor processes, each importing torch and transformers
def test_run_operation_release_and_restore_through_the_actor(demo_assets, ray_local, tmp_path):
    rows = data_lib.load_rows(demo_assets["sft_train"], "sft")
    first, second = datums(demo_assets["model"], rows[:4]), datums(demo_assets["model"], rows[4:8])
    spec = SessionSpec(session_id="host-test", model_path=demo_assets["model"], lora_rank=4, seed=2,
                       state_root=str(tmp_path / "state"))
    fb = {"data": first, "loss_fn": "cross_entropy"}

    # What the same calls give in this process, for comparison.
    torch.set_num_threads(1)
    local = TrainingSession(spec)
    expected = [local.run("forward_backward", fb), local.run("optim_step", ADAM),
                local.run("forward_backward", {"data": second, "loss_fn": "cross_entropy"})]

    with pytest.raises(ConfigError):  # refused before any actor starts
        run_operation(spec, "fly", {})
    assert not session_alive(spec.session_id)

    out = run_operation(spec, "forward_backward", fb)
    assert session_alive(spec.session_id)
    # A LoRA trainer is an adapter in its base model's shared host, not an actor of its own.
    assert ray_local.get_actor(host_name(spec), namespace="keel") is not None
    assert session_alive(spec.session_id) and session_alive(spec)
    assert out["metrics"]["loss:sum"] == pytest.approx(expected[0]["metrics"]["loss:sum"], abs=1e-6)
    assert out["tokens"] == sum(len(d["model_input"]) for d in first)
    assert run_operation(spec, "optim_step", ADAM)["step"] == 1

    # The session's own error, with its param, through Ray; the trainer lives on.
    bad = {"data": first[:1] + [{"model_input": [10**6], "loss_fn_inputs": {"target_tokens": [1], "weights": [1.0]}}],
           "loss_fn": "cross_entropy"}
    with pytest.raises(DataError) as info:
        run_operation(spec, "forward_backward", bad)
    assert info.value.param == "data[1].model_input" and info.value.code == "invalid_data"
    assert session_alive(spec.session_id)

    saved = str(tmp_path / "state" / "released")
    assert release_session(spec, save_to=saved) == saved
    assert not session_alive(spec.session_id)
    assert release_session(spec, save_to=saved) is None  # idempotent

    # The next operation starts a new actor from the saved state: step 1, the same weights.
    out = run_operation(spec, "forward_backward", {"data": second, "loss_fn": "cross_entropy"}, restore_from=saved)
    assert out["metrics"]["loss:sum"] == pytest.approx(expected[2]["metrics"]["loss:sum"], abs=1e-6)
    assert run_operation(spec, "optim_step", ADAM)["step"] == 2
    assert release_session(spec, save_to=None) is None
    assert not session_alive(spec.session_id)

    # A restore that fails leaves no actor behind.
    with pytest.raises(ConfigError) as info:
        run_operation(spec, "forward", fb, restore_from=str(tmp_path / "elsewhere"))
    assert info.value.param == "restore_from"
    assert not session_alive(spec.session_id)
