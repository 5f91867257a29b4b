"""The memory plan: the estimator's arithmetic by hand on a tiny config, the direction each knob moves
it, the dry-run create (`POST /v1/jobs?dry_run=true`), the `will_not_fit` 422, and (slow) the estimate
against the measured peak RSS growth of a real SFT run on the demo model."""

from __future__ import annotations

import json
import secrets
import struct

import pytest
from sqlalchemy import func, select

from core import model_memory, model_shape
from core.memory_plan import Capacity, plan_job
from core.model_shape import Architecture
from core.models import File, IdempotencyKey, Job

TINY = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "intermediate_size": 16,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 32,
        "tie_word_embeddings": False}
ARCH = Architecture.from_config(TINY)


# --- arithmetic by hand ------------------------------------------------------------------------------------

def test_parameters_follow_the_llama_formula():
    # per layer: q 8x8, k 8x4, v 8x4, o 8x8 (192), MLP 3 x 8x16 (384), two norms (16) = 592
    assert ARCH.layer_parameters() == 592
    # embeddings 32x8, two layers, final norm, LM head 32x8
    assert ARCH.parameters("lm") == 256 + 2 * 592 + 8 + 256 == 1704
    assert ARCH.parameters("score") == 1704 - 256 + 8  # no LM head, a 1-output score head
    tied = Architecture.from_config({**TINY, "tie_word_embeddings": True})
    assert tied.parameters("lm") == 1704 - 256
    # LoRA rank 2 on q, k, v, o, gate, up, down: r * (in + out) each, per layer
    assert ARCH.lora_parameters(2) == 2 * 2 * ((8 + 8) + (8 + 4) * 2 + (8 + 8) + (8 + 16) * 2 + (16 + 8))


def test_safetensors_headers_give_the_exact_count(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    header = {"__metadata__": {"format": "pt"},
              "model.embed_tokens.weight": {"dtype": "F32", "shape": [32, 8], "data_offsets": [0, 1]},
              "model.layers.0.mlp.up_proj.weight": {"dtype": "F32", "shape": [16, 8], "data_offsets": [1, 2]},
              "lm_head.weight": {"dtype": "F32", "shape": [32, 8], "data_offsets": [2, 3]}}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    arch = Architecture.from_dir(tmp_path)
    assert (arch.exact_parameters, arch.exact_lm_head) == (256 + 128 + 256, 256)
    assert arch.parameters("lm") == 640
    assert arch.parameters("score") == 640 - 256 + 8


def test_a_directory_is_read_again_when_its_files_change(tmp_path, monkeypatch):
    """`from_dir` remembers a directory (every create asks) only while its files stay as they were."""
    reads = []
    real = Architecture._read_dir.__func__
    monkeypatch.setattr(Architecture, "_read_dir", classmethod(lambda cls, p: reads.append(p) or real(cls, p)))
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert Architecture.from_dir(tmp_path) == Architecture.from_dir(tmp_path) == ARCH
    assert len(reads) == 1
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "num_hidden_layers": 3, "pad": "x" * 10}))
    assert Architecture.from_dir(tmp_path).num_hidden_layers == 3
    header = json.dumps({"lm_head.weight": {"dtype": "F32", "shape": [32, 8], "data_offsets": [0, 1]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    assert Architecture.from_dir(tmp_path).exact_lm_head == 256  # a new weight file counts
    assert len(reads) == 3


def test_a_config_without_the_shape_is_refused():
    with pytest.raises(model_shape.PlanError, match="hidden_size"):
        Architecture.from_config({"vocab_size": 10})


def test_sft_plan_by_hand():
    hp = {"data": {"train_batch_size": 4, "max_prompt_length": 3, "max_response_length": 2},
          "use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}
    plan = plan_job("sft", hp, {"gpus_per_worker": 1}, {"policy": ARCH}, Capacity())
    w = plan["per_worker"]
    assert (w["weights_bytes"], w["gradients_bytes"], w["optimizer_bytes"]) == (1704 * 4, 1704 * 4, 1704 * 8)
    # 2 rows x 5 tokens = 10 tokens. Per token and layer (float32): norms 4*8*4 = 128, attention
    # (3*8 + 3*4)*4 + 2 heads*4 = 152, MLP 4*16*4 = 256 -> 536; two layers kept, one layer's backward
    # working set, the head: final norm 2*8*4 + logits 32*4 + the loss's float32 temporaries.
    head = 2 * 8 * 4 + 32 * 4 + model_memory.LOSS_HEAD_TEMPS["sft"] * 32 * 4
    assert w["activations_bytes"] == round(10 * (2 * 536 + 536 + head))
    assert w["total_bytes"] == 1704 * 16 + w["activations_bytes"]
    assert plan["fits"] is None and plan["device"] == "gpu"


# --- each knob moves the estimate the right way -------------------------------------------------------

BIG = Architecture.from_config({**TINY, "num_hidden_layers": 8, "hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8,
                                "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 4096})
BASE_HP = {"data": {"train_batch_size": 8, "max_prompt_length": 256, "max_response_length": 256},
           "max_token_len_per_gpu": 2048}


def _worker(method="sft", hp=None, resources=None, **models):
    plan = plan_job(method, hp or BASE_HP, resources or {}, {"policy": BIG, **models}, Capacity())
    return plan["per_worker"]


def _with(**model):
    return {**BASE_HP, "model": model}


def test_gradient_checkpointing_lowers_activations():
    assert _worker(hp=_with(enable_gradient_checkpointing=True))["activations_bytes"] < _worker()["activations_bytes"]


def test_a_smaller_token_budget_or_micro_batch_lowers_activations():
    assert _worker(hp={**BASE_HP, "max_token_len_per_gpu": 1024})["activations_bytes"] < _worker()["activations_bytes"]
    static = {**BASE_HP, "use_dynamic_bsz": False}
    assert (_worker(hp={**static, "micro_batch_size_per_gpu": 1})["activations_bytes"]
            < _worker(hp={**static, "micro_batch_size_per_gpu": 4})["activations_bytes"])


def test_packing_lowers_activations_of_padded_batches():
    assert _worker()["activations_bytes"] < _worker(hp=_with(use_remove_padding=False))["activations_bytes"]


def test_sixteen_bit_compute_lowers_activations_and_keeps_float32_masters():
    bf16 = _worker(hp=_with(dtype="bfloat16"))
    fp32 = _worker()
    assert bf16["activations_bytes"] < fp32["activations_bytes"]
    assert bf16["optimizer_bytes"] == fp32["optimizer_bytes"] and bf16["gradients_bytes"] == fp32["gradients_bytes"]
    assert bf16["weights_bytes"] == BIG.parameters("lm") * (4 + 2)  # masters + autocast's copies


def test_fsdp2_over_two_workers_lowers_per_worker_state():
    ddp = _worker(resources={"num_workers": 2})
    fsdp = _worker(hp=_with(strategy="fsdp2"), resources={"num_workers": 2})
    for key in ("gradients_bytes", "optimizer_bytes"):
        assert fsdp[key] == ddp[key] / 2
    assert fsdp["weights_bytes"] < ddp["weights_bytes"]
    assert fsdp["total_bytes"] < ddp["total_bytes"]


def test_offload_moves_bytes_from_the_device_to_the_host():
    on = _worker(hp=_with(strategy="fsdp2"), resources={"num_workers": 2, "gpus_per_worker": 1})
    params = _worker(hp=_with(strategy="fsdp2", fsdp_config={"param_offload": True}),
                     resources={"num_workers": 2, "gpus_per_worker": 1})
    optim = _worker(hp=_with(strategy="fsdp2", fsdp_config={"optimizer_offload": True}),
                    resources={"num_workers": 2, "gpus_per_worker": 1})
    assert params["total_bytes"] < on["total_bytes"] and params["host_bytes"] > on["host_bytes"] == 0
    assert params["gradients_bytes"] == 0
    assert optim["optimizer_bytes"] == 0 and optim["host_bytes"] == on["optimizer_bytes"]
    moved = on["total_bytes"] - optim["total_bytes"]
    assert moved == optim["host_bytes"]


def test_lora_lowers_gradients_and_optimizer_state():
    full, lora = _worker(), _worker(hp=_with(lora_rank=8))
    assert lora["gradients_bytes"] < full["gradients_bytes"] / 10
    assert lora["optimizer_bytes"] < full["optimizer_bytes"] / 10
    assert lora["trainable_parameters"] == BIG.lora_parameters(8)


PPO_HP = {"data": {"train_batch_size": 8, "max_prompt_length": 128, "max_response_length": 128},
          "rollout": {"n": 2}, "actor": {"ppo_mini_batch_size": 8}}


def test_ppo_roles_add_up_when_colocated():
    gpu = {"gpus_per_worker": 1}  # (a CPU worker adds the allocator's slack on top)
    plan = plan_job("ppo", PPO_HP, gpu, {"policy": BIG, "reward": BIG}, Capacity())
    roles, worker = plan["roles"], plan["per_worker"]
    assert set(roles) == {"actor", "critic", "reference", "reward"}
    assert worker["weights_bytes"] == sum(r["weights_bytes"] for r in roles.values())
    assert worker["activations_bytes"] == max(r["activations_bytes"] for r in roles.values())
    assert roles["reference"]["gradients_bytes"] == roles["reward"]["optimizer_bytes"] == 0
    assert roles["actor"]["host_bytes"] > 0  # the rollback snapshot
    separate = plan_job("ppo", PPO_HP, {**gpu, "colocate": False}, {"policy": BIG, "reward": BIG}, Capacity())
    assert separate["per_worker"]["total_bytes"] == max(r["total_bytes"] for r in roles.values())
    assert separate["per_worker"]["total_bytes"] < worker["total_bytes"]
    # GRPO has no critic; LoRA has no reference (the actor with its adapter disabled serves it)
    grpo = plan_job("ppo", {**PPO_HP, "algorithm": {"adv_estimator": "grpo"}}, {}, {"policy": BIG}, Capacity())
    assert set(grpo["roles"]) == {"actor", "reference"}
    lora = plan_job("ppo", {**PPO_HP, "model": {"lora_rank": 8}}, {}, {"policy": BIG}, Capacity())
    assert "reference" not in lora["roles"]


def test_more_samples_per_prompt_grow_the_actors_kv_cache():
    def actor(n):
        hp = {**PPO_HP, "rollout": {"n": n}, "data": {**PPO_HP["data"], "max_response_length": 2048}}
        return plan_job("ppo", hp, {}, {"policy": BIG}, Capacity())["roles"]["actor"]["activations_bytes"]

    assert actor(8) > actor(2)


def test_fit_against_the_capacity_names_the_field_to_change():
    gpu = {"gpus_per_worker": 1}
    need = plan_job("sft", BASE_HP, gpu, {"policy": BIG}, Capacity())["per_worker"]["required_bytes"]
    assert plan_job("sft", BASE_HP, gpu, {"policy": BIG}, Capacity(gpu_bytes=need))["fits"] is True
    tight = plan_job("sft", BASE_HP, gpu, {"policy": BIG}, Capacity(gpu_bytes=need - 1))
    assert tight["fits"] is False
    assert tight["param"] == "method.hyperparameters.max_token_len_per_gpu"  # activations dominate here
    small_batch = {**BASE_HP, "max_token_len_per_gpu": 16,
                   "data": {"train_batch_size": 1, "max_prompt_length": 8, "max_response_length": 8}}
    state = plan_job("sft", small_batch, gpu, {"policy": BIG}, Capacity(gpu_bytes=1))
    assert state["param"] == "method.hyperparameters.model.lora_rank"  # gradients + moments dominate
    cpu = plan_job("sft", BASE_HP, {}, {"policy": BIG}, Capacity(gpu_bytes=10**15, host_bytes=1))
    assert cpu["device"] == "cpu" and cpu["fits"] is False  # a CPU worker is checked against host memory


# --- the API ---------------------------------------------------------------------------------------------

@pytest.fixture
def model_dir(keel_home) -> str:
    """A model directory under the deployment's model root, with only a config.json (no weights)."""
    path = keel_home / "models" / f"tiny-{secrets.token_hex(3)}"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({**TINY, "num_hidden_layers": 8, "hidden_size": 512, "intermediate_size": 1408,
                                                  "num_attention_heads": 8, "num_key_value_heads": 8,
                                                  "head_dim": 64, "vocab_size": 4096,
                                                  "max_position_embeddings": 4096}))
    return str(path)


@pytest.fixture
def sft_file(db, project_key) -> str:
    f = File(project_id=project_key[0], purpose="sft", filename="sft.parquet", bytes=10, sha256=secrets.token_hex(32),
             format="parquet", storage_key=f"files/{secrets.token_hex(4)}")
    db.add(f)
    db.commit()
    return f.id


def _body(model: str, file_id: str, **hyper) -> dict:
    return {"model": model, "training_file": file_id,
            "method": {"type": "sft", "hyperparameters": {**BASE_HP, **hyper}}}


def _jobs(db, project_id: str) -> int:
    return db.scalar(select(func.count()).select_from(Job).where(Job.project_id == project_id))


def _keys(db, project_id: str) -> int:
    return db.scalar(select(func.count()).select_from(IdempotencyKey).where(IdempotencyKey.project_id == project_id))


def test_dry_run_returns_the_plan_and_creates_nothing(client, auth, db, project_key, model_dir, sft_file, dispatched):
    r = client.post("/v1/jobs?dry_run=true", json=_body(model_dir, sft_file),
                    headers={**auth, "Idempotency-Key": secrets.token_hex(8)})
    assert r.status_code == 200, r.text
    plan = r.json()
    expected = plan_job("sft", {**BASE_HP}, {}, {"policy": BIG}, Capacity())
    assert plan["object"] == "memory_plan" and plan["method"] == "sft" and plan["device"] == "cpu"
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "total_bytes"):
        assert plan["per_worker"][key] == expected["per_worker"][key], key
    assert set(plan["roles"]) == {"trainer"} and plan["fits"] is None  # capacity not configured
    assert _jobs(db, project_key[0]) == 0 and _keys(db, project_key[0]) == 0 and dispatched == []
    # the same body without dry_run creates the job
    assert client.post("/v1/jobs", json=_body(model_dir, sft_file), headers=auth).status_code == 201
    assert _jobs(db, project_key[0]) == 1


def test_dry_run_refuses_a_bad_spec_like_a_create(client, auth, other_auth, model_dir, sft_file, dispatched):
    bad = _body(model_dir, sft_file, micro_batch_size_per_gpu=0)
    r = client.post("/v1/jobs?dry_run=true", json=bad, headers=auth)
    assert r.status_code == 422 and r.json()["param"] == "method.hyperparameters.micro_batch_size_per_gpu"
    r = client.post("/v1/jobs?dry_run=true", json=_body(model_dir, "file-nope"), headers=auth)
    assert (r.status_code, r.json()["param"]) == (404, "training_file")
    # another project's file is unknown to this key, exactly as for a create
    assert client.post("/v1/jobs?dry_run=true", json=_body(model_dir, sft_file), headers=other_auth).status_code == 404
    assert client.post("/v1/jobs?dry_run=true", json=_body(model_dir, sft_file)).status_code == 401


def test_a_hub_model_gets_no_estimate(client, auth, sft_file, dispatched):
    r = client.post("/v1/jobs?dry_run=true", json=_body("org/name", sft_file), headers=auth)
    assert r.status_code == 200, r.text
    assert r.json()["per_worker"] is None and r.json()["fits"] is None


def test_a_job_that_cannot_fit_is_a_422_with_the_numbers(client, auth, db, project_key, model_dir, sft_file,
                                                         dispatched, monkeypatch):
    from core.config import settings

    fits = client.post("/v1/jobs?dry_run=true", json=_body(model_dir, sft_file), headers=auth).json()
    need = fits["per_worker"]["required_bytes"]
    monkeypatch.setattr(settings, "WORKER_MEMORY_BYTES", need - 1)
    r = client.post("/v1/jobs", json=_body(model_dir, sft_file), headers=auth)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["code"] == "will_not_fit"
    assert problem["param"] == "method.hyperparameters.max_token_len_per_gpu"
    assert problem["memory_plan"]["per_worker"]["required_bytes"] == need
    assert problem["memory_plan"]["capacity"]["host_bytes"] == need - 1
    assert problem["memory_plan"]["fits"] is False
    assert _jobs(db, project_key[0]) == 0 and dispatched == []
    # the dry run says the same with a 200; a smaller budget fits and is created
    plan = client.post("/v1/jobs?dry_run=true", json=_body(model_dir, sft_file), headers=auth).json()
    assert plan["fits"] is False and plan["param"] == problem["param"]
    smaller = _body(model_dir, sft_file, max_token_len_per_gpu=512)
    assert client.post("/v1/jobs", json=smaller, headers=auth).status_code == 201
    # a GPU job is checked against one GPU's memory
    monkeypatch.setattr(settings, "GPU_MEMORY_BYTES", 2**20)
    gpu = {**_body(model_dir, sft_file), "resources": {"gpus_per_worker": 1}}
    r = client.post("/v1/jobs", json=gpu, headers=auth)
    assert (r.status_code, r.json()["code"]) == (422, "will_not_fit")


# --- accuracy against a real run ----------------------------------------------------------------------------

@pytest.mark.slow
def test_estimate_is_within_a_quarter_of_the_measured_peak_rss():
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("the measurement resets /proc/self/clear_refs")
    from bench.memory_plan import run_case

    result = run_case("sft-demo", steps=2, threads=1)
    assert 0.75 <= result["ratio"] <= 1.25, result
