"""The vllm backend's pure parts, which run without vLLM or a GPU: the engine arguments built from a
job's config (`vllm_engine_kwargs`), the LoRA rank read from an adapter, and the per-sync adapter
directories. The engine itself needs CUDA; the GPU check and a GPU machine cover it."""

from __future__ import annotations

import json

import pytest

from engine.config import PPOConfig, build_config
from engine.errors import EngineError
from engine.rollout.vllm import AdapterVersions, adapter_lora_rank, vllm_engine_kwargs, vllm_max_lora_rank


def write_adapter(directory, rank: int, base: str) -> str:
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": 16,
                                                               "base_model_name_or_path": base}))
    return str(directory)


def test_engine_kwargs_follow_the_config():
    cfg = build_config(PPOConfig, {"model": {"dtype": "bfloat16"},
                                   "data": {"max_prompt_length": 100, "max_response_length": 28}})
    kwargs = vllm_engine_kwargs(cfg, model_path="/models/policy", lora_rank=0, seed=7)
    assert kwargs["model"] == "/models/policy" and kwargs["dtype"] == "bfloat16" and kwargs["seed"] == 7
    assert kwargs["max_model_len"] == 128
    assert kwargs["distributed_executor_backend"] == "external_launcher"  # joins Keel's process group
    assert kwargs["enforce_eager"] is False  # CUDA graphs on by default
    assert kwargs["enable_sleep_mode"] is True and kwargs["gpu_memory_utilization"] == 0.5
    assert "enable_lora" not in kwargs

    cfg = build_config(PPOConfig, {"rollout": {"enforce_eager": True, "free_cache_engine": False,
                                               "gpu_memory_utilization": 0.3}})
    kwargs = vllm_engine_kwargs(cfg, model_path="/models/policy", lora_rank=0, seed=0, max_model_len=64)
    assert kwargs["enforce_eager"] is True and kwargs["enable_sleep_mode"] is False
    assert kwargs["gpu_memory_utilization"] == 0.3 and kwargs["max_model_len"] == 64


def test_lora_rank_comes_from_the_adapter_when_not_given(tmp_path):
    adapter = write_adapter(tmp_path / "adapter", 24, "/models/base")
    assert adapter_lora_rank(adapter) == 24
    cfg = build_config(PPOConfig, {"model": {"lora_adapter_path": adapter}})
    kwargs = vllm_engine_kwargs(cfg, model_path="/models/base", lora_rank=0, seed=0)
    assert kwargs["enable_lora"] is True and kwargs["max_loras"] == 1
    assert kwargs["max_lora_rank"] == 32  # the smallest rank vLLM accepts that holds 24
    assert kwargs["model"] == "/models/base"

    # The job's model is the adapter itself: the engine loads its base and serves the adapter.
    kwargs = vllm_engine_kwargs(PPOConfig(), model_path=adapter, lora_rank=0, seed=0)
    assert kwargs["model"] == "/models/base" and kwargs["max_lora_rank"] == 32

    # An explicit rank wins over the adapter's.
    kwargs = vllm_engine_kwargs(cfg, model_path="/models/base", lora_rank=64, seed=0)
    assert kwargs["max_lora_rank"] == 64


def test_lora_rank_rounding_and_bad_adapters(tmp_path):
    assert [vllm_max_lora_rank(r) for r in (1, 8, 9, 100, 300, 512)] == [8, 8, 16, 128, 320, 512]
    with pytest.raises(EngineError) as err:
        vllm_max_lora_rank(1024)
    assert err.value.param == "model.lora_rank"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "adapter_config.json").write_text(json.dumps({"lora_alpha": 16}))
    with pytest.raises(EngineError) as err:
        adapter_lora_rank(str(bad))
    assert err.value.code == "invalid_model" and err.value.param == "model.lora_adapter_path"
    with pytest.raises(EngineError):
        adapter_lora_rank(str(tmp_path / "missing"))


def test_only_the_latest_adapter_directory_is_kept(tmp_path):
    versions = AdapterVersions(str(tmp_path / "adapters"))
    (tmp_path / "adapters").mkdir()
    seen = []
    for _ in range(3):
        version, path = versions.next()
        write_adapter(tmp_path / "adapters" / f"v{version}", 8, "/models/base")
        assert path == str(tmp_path / "adapters" / f"v{version}")
        versions.prune()
        seen.append(version)
        assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == [f"v{version}"]
    assert seen == [1, 2, 3]


def test_adapter_root_is_removed_with_its_owner():
    import gc
    import os

    versions = AdapterVersions()
    root = versions.root
    assert os.path.isdir(root)
    del versions
    gc.collect()
    assert not os.path.exists(root)
