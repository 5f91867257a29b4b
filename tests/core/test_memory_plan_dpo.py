"""The memory plan of a `dpo` job: the trained policy (LM head, two sequences per pair) and the frozen
reference's one-off scoring phase before it."""

from __future__ import annotations

from core.memory_plan import Capacity, plan_job
from core.model_shape import Architecture

ARCH = Architecture.from_config({
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "vocab_size": 512,
    "tie_word_embeddings": False})
HP = {"data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
      "use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}


def test_dpo_trains_a_policy_on_pairs_after_a_reference_phase():
    dpo = plan_job("dpo", HP, {"gpus_per_worker": 1}, {"policy": ARCH}, Capacity())
    sft = plan_job("sft", HP, {}, {"policy": ARCH}, Capacity())
    rm = plan_job("reward_model", HP, {}, {"policy": ARCH}, Capacity())
    assert set(dpo["roles"]) == {"reference", "trainer"}
    trainer, reference = dpo["roles"]["trainer"], dpo["roles"]["reference"]
    # The policy keeps its LM head (as SFT's), not a score head (as the reward model's).
    assert trainer["weights_bytes"] == sft["roles"]["trainer"]["weights_bytes"] != rm["roles"]["trainer"]["weights_bytes"]
    # A micro-batch of 2 pairs is 4 sequences: more activations than SFT's 2 rows.
    assert trainer["activations_bytes"] > sft["roles"]["trainer"]["activations_bytes"]
    # The reference is frozen: weights in the compute dtype, nothing to train.
    assert reference["gradients_bytes"] == reference["optimizer_bytes"] == 0
    assert reference["weights_bytes"] == trainer["weights_bytes"]  # float32 both, here
    assert dpo["per_worker"]["total_bytes"] == max(trainer["total_bytes"], reference["total_bytes"])


def test_a_full_fine_tunes_reference_holds_float32_weights_as_the_policy():
    """The reference runs on the policy's precision path (float32 weights under its autocast), so its
    step-0 log-probs are the policy's; under LoRA it is the bf16 base the adapter sits on."""
    bf16 = {**HP, "model": {"dtype": "bfloat16"}}
    params = ARCH.parameters("lm")
    dpo = plan_job("dpo", bf16, {}, {"policy": ARCH}, Capacity())
    assert dpo["roles"]["reference"]["weights_bytes"] == 4 * params
    lora = plan_job("dpo", {**bf16, "model": {"dtype": "bfloat16", "lora_rank": 8}}, {}, {"policy": ARCH}, Capacity())
    assert lora["roles"]["reference"]["weights_bytes"] == 2 * params
    ppo_hp = {"data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": 32},
              "actor": {"ppo_mini_batch_size": 8}, "model": {"dtype": "bfloat16"}}
    ppo = plan_job("ppo", ppo_hp, {}, {"policy": ARCH}, Capacity())
    assert ppo["roles"]["reference"]["weights_bytes"] == 4 * params
