"""The memory plan knows Ulysses sequence parallelism: a group of two workers splits the decoder
layers' activations of one micro-batch (the head still sees every token)."""

from __future__ import annotations

from core.memory_plan import Capacity, plan_job
from tests.core.test_memory_plan import BASE_HP, BIG


def _activations(sp: int) -> float:
    hp = {**BASE_HP, "ulysses_sequence_parallel_size": sp}
    plan = plan_job("sft", hp, {"num_workers": 2}, {"policy": BIG}, Capacity())
    return plan["per_worker"]["activations_bytes"]


def test_sequence_parallelism_divides_the_layers_activations():
    one, two = _activations(1), _activations(2)
    assert two < 0.75 * one
    assert two > one / 2  # the head's logits are not split
