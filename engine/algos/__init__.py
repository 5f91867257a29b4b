"""PPO and preference-optimisation math as pure tensor functions (VERL `core_algos` semantics): no
I/O, no config objects.

Per-token tensors are `(batch, response_len)`; `response_mask` is 1 on real response tokens (EOS
included) and 0 on padding.
"""

from engine.algos.advantages import compute_gae, compute_grpo_advantages
from engine.algos.distill import reverse_kl_rewards
from engine.algos.kl import (
    KL_KINDS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_in_reward,
    kl_penalty,
)
from engine.algos.logits import entropy_from_logits, log_probs_and_entropy, log_probs_from_logits
from engine.algos.losses import (
    LOSS_AGG_MODES,
    agg_loss,
    cispo_loss,
    cross_entropy_loss,
    dro_loss,
    importance_sampling_loss,
    policy_loss,
    ppo_threshold_loss,
    value_loss,
)
from engine.algos.masked import (
    explained_variance,
    last_index,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from engine.algos.outcome import (
    compute_reinforce_plus_plus_advantages,
    compute_reinforce_plus_plus_baseline_advantages,
    compute_remax_advantages,
    compute_rloo_advantages,
    group_has_signal,
    overlong_penalty,
)
from engine.algos.preference import PREFERENCE_LOSS_TYPES, dpo_loss

__all__ = [
    "KL_KINDS",
    "LOSS_AGG_MODES",
    "PREFERENCE_LOSS_TYPES",
    "AdaptiveKLController",
    "FixedKLController",
    "agg_loss",
    "apply_kl_in_reward",
    "cispo_loss",
    "compute_gae",
    "compute_grpo_advantages",
    "compute_reinforce_plus_plus_advantages",
    "compute_reinforce_plus_plus_baseline_advantages",
    "compute_remax_advantages",
    "compute_rloo_advantages",
    "cross_entropy_loss",
    "dpo_loss",
    "dro_loss",
    "entropy_from_logits",
    "explained_variance",
    "group_has_signal",
    "importance_sampling_loss",
    "kl_penalty",
    "last_index",
    "log_probs_and_entropy",
    "log_probs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "overlong_penalty",
    "policy_loss",
    "ppo_threshold_loss",
    "reverse_kl_rewards",
    "value_loss",
]
