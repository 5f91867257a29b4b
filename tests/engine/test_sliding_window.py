"""Packed attention has no sliding window: a model that uses one (Mistral; Qwen2 with
`use_sliding_window`) is refused at load time naming `model.use_remove_padding`, and loads padded
with it off (issue 28)."""

from __future__ import annotations

import pytest

from engine import packing
from engine.config import ModelConfig
from engine.errors import ConfigError
from engine.models import load_policy

TINY = {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64}


def _save(tmp_path, config) -> str:
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    return str(tmp_path)


def _configs():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    return {
        "mistral": (MistralConfig(**TINY, sliding_window=16), True),
        "qwen2_sliding": (Qwen2Config(**TINY, use_sliding_window=True, sliding_window=16, max_window_layers=0), True),
        "qwen2": (Qwen2Config(**TINY), False),
        "mistral_no_window": (MistralConfig(**TINY, sliding_window=None), False),
        "llama": (LlamaConfig(**TINY), False),
    }


@pytest.mark.parametrize("name", ["mistral", "qwen2_sliding", "qwen2", "mistral_no_window", "llama"])
def test_packing_refuses_sliding_window_models(name, tmp_path):
    config, sliding = _configs()[name]
    assert packing.uses_sliding_window(config) == sliding
    path = _save(tmp_path, config)
    if sliding:
        with pytest.raises(ConfigError) as err:
            load_policy(path, ModelConfig(use_remove_padding=True))
        assert err.value.param == "model.use_remove_padding" and "sliding window" in str(err.value)
        assert not packing.enabled(load_policy(path, ModelConfig(use_remove_padding=False)))
    else:
        assert packing.enabled(load_policy(path, ModelConfig(use_remove_padding=True)))
