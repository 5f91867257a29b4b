"""The shared LoRA host: LoRA trainers of one base model live in one actor that holds the base once;
their operations take turns round robin; a trainer paged out (released with a save) comes back from
that save with the same weights and optimizer state."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import torch

from engine import data as data_lib
from engine.interactive import release_session, run_operation, session_alive
from engine.interactive.host import host_stats
from engine.interactive.lora_host import Turns
from engine.interactive.session import TrainingSession
from engine.interactive.spec import SessionSpec, host_name, shares_base

ADAM = {"adam_params": {"learning_rate": 1e-2, "grad_clip_norm": 1.0}}


def datums(model_path, rows):
    from engine.models import load_tokenizer

    out = []
    for e in data_lib.tokenize_sft(rows, load_tokenizer(model_path), 64, 64, "error"):
        ids = e.input_ids
        weights = [1.0 if t + 1 >= e.prompt_len else 0.0 for t in range(len(ids) - 1)]
        out.append({"model_input": ids[:-1], "loss_fn_inputs": {"target_tokens": ids[1:], "weights": weights}})
    return out


def loss(out: dict) -> float:
    return out["metrics"]["loss:sum"]


def test_turns_go_round_robin_across_clients():
    """A client with ten operations waiting never keeps another's single one behind more than one of them."""
    turns, order, threads = Turns(), [], []
    held, release = threading.Event(), threading.Event()

    def blocker():
        with turns.turn("x"):
            held.set()
            release.wait(10)

    def op(client: str, i: int):
        with turns.turn(client):
            order.append(f"{client}{i}")

    first = threading.Thread(target=blocker)
    first.start()
    held.wait(10)
    for client, n in (("a", 10), ("b", 1)):
        for i in range(n):
            threads.append(threading.Thread(target=op, args=(client, i)))
            threads[-1].start()
            while turns.waiting() < len(threads):  # each waits before the next comes
                time.sleep(0.001)
    release.set()
    for t in (first, *threads):
        t.join(10)
    assert order[:3] == ["a0", "b0", "a1"]
    assert order[3:] == [f"a{i}" for i in range(2, 10)]  # each client's own operations keep their order
    assert turns.waiting() == 0


def test_placement_lora_shares_full_parameter_does_not():
    lora = SessionSpec(session_id="a", model_path="/m", lora_rank=8)
    assert shares_base(lora) and not shares_base(dataclasses.replace(lora, lora_rank=0))
    assert host_name(lora) == host_name(dataclasses.replace(lora, session_id="b", lora_rank=16, seed=3))
    assert host_name(lora) != host_name(dataclasses.replace(lora, model_path="/other"))
    assert host_name(lora) != host_name(dataclasses.replace(lora, dtype="bfloat16"))


@pytest.mark.slow  # starts the host actor (torch and transformers in a new process)
def test_nine_clients_share_one_base_and_page_out_and_back(demo_assets, ray_local, tmp_path):
    model = demo_assets["model"]
    rows = data_lib.load_rows(demo_assets["sft_train"], "sft")
    first, second = datums(model, rows[:4]), datums(model, rows[4:8])
    fb = {"data": first, "loss_fn": "cross_entropy"}
    specs = [SessionSpec(session_id=f"lora-host-{i}", model_path=model, lora_rank=4, seed=i,
                         state_root=str(tmp_path / f"state{i}")) for i in range(8)]
    twin = dataclasses.replace(specs[0], session_id="lora-host-twin")

    torch.set_num_threads(1)
    alone = TrainingSession(specs[0])  # the same trainer with a model of its own, in this process
    expected = loss(alone.run("forward_backward", fb))

    outs = [run_operation(spec, "forward_backward", fb) for spec in (*specs, twin)]
    assert loss(outs[0]) == pytest.approx(expected, abs=1e-6)
    stats = host_stats(specs[0])
    assert stats["shared"] and len(stats["own"]) == 9
    own = sum(stats["own"].values())
    assert 0 < own < stats["base"]  # adapters, their gradients: a fraction of one base
    assert stats["unique"] <= stats["base"] + own  # nothing else is held per trainer
    assert stats["unique"] < 2 * stats["base"]  # nine separate trainers would hold nine bases

    # Page-out and back: the same forward loss, and the next step as if nothing happened.
    for spec in (specs[0], twin):
        run_operation(spec, "optim_step", ADAM)
    # Another trainer's step left this one's adapter as it was (its gradients were its own).
    assert loss(run_operation(specs[1], "forward", fb)) == pytest.approx(expected, abs=1e-6)
    before = loss(run_operation(specs[0], "forward", {"data": second, "loss_fn": "cross_entropy"}))
    saved = str(tmp_path / "state0" / "paged")
    assert release_session(specs[0], save_to=saved) == saved
    assert not session_alive(specs[0]) and session_alive(specs[1])
    after = loss(run_operation(specs[0], "forward", {"data": second, "loss_fn": "cross_entropy"},
                               restore_from=saved))
    assert after == pytest.approx(before, abs=1e-6)
    for spec in (specs[0], twin):
        run_operation(spec, "forward_backward", {"data": second, "loss_fn": "cross_entropy"})
        assert run_operation(spec, "optim_step", ADAM)["step"] == 2
    paged, kept = (loss(run_operation(s, "forward", fb)) for s in (specs[0], twin))
    assert paged == pytest.approx(kept, abs=1e-6)
    assert host_stats(specs[0])["shared"]

    # The last trainer to leave ends the host.
    for spec in (*specs, twin):
        release_session(spec, save_to=None)
    with pytest.raises(ValueError):
        ray_local.get_actor(host_name(specs[0]), namespace="keel")
    assert not session_alive(specs[3].session_id)
