"""The three heads Keel trains: policy, reward model and value model.

- policy: a causal LM (`AutoModelForCausalLM`);
- reward model: `AutoModelForSequenceClassification` with `num_labels=1`; the score is the `score`
  head read at the last attended token, exactly what Hugging Face pools, so a saved reward model
  scores the same outside Keel;
- value model: the same class and on-disk format; its per-token values are the `score` head applied
  to every hidden state.

Weights are read and written as safetensors only (`use_safetensors=True`): nothing a user uploads
is ever unpickled. With LoRA (peft), the reference policy is the actor with its adapter disabled,
so the base weights exist once.

`loading` reads them, `forward` runs them, `saving` writes them; this package names the public
surface (`from engine import models`; `models.load_policy(...)`).
"""

from engine.models.forward import (
    PLAIN_LM_HEADS,
    is_lora,
    logits_at,
    reference_mode,
    reward_scores,
    score_positions,
    token_values,
)
from engine.models.loading import (
    DTYPES,
    MODEL_MARKERS,
    adapter_base,
    count_parameters,
    disable_dropout,
    load_policy,
    load_reference,
    load_reward_model,
    load_tokenizer,
    load_value_model,
    lora_view,
    resolve_lora_rank,
    resolve_model_path,
)
from engine.models.saving import save_model

__all__ = [
    "DTYPES", "MODEL_MARKERS", "PLAIN_LM_HEADS", "adapter_base", "count_parameters", "disable_dropout",
    "is_lora", "load_policy", "load_reference", "load_reward_model", "load_tokenizer", "load_value_model",
    "logits_at", "lora_view", "reference_mode", "resolve_lora_rank", "resolve_model_path", "reward_scores",
    "save_model", "score_positions", "token_values",
]
