"""Per-method hyperparameters: pydantic mirrors of engine/config/ (the API must not import the engine).

Field names, nesting and defaults are the engine dataclasses' (VERL's names); tests/api/
test_hyperparameters.py keeps the two in lock-step. On top of the engine's own checks, these schemas
refuse unknown keys, wrong types (strict: `"4"` is not an int, `1` is not a bool), NaN/Inf and
absurd sizes, and report cross-field contradictions at the field that must change, so a problem's
`param` reads `method.hyperparameters.actor.ppo_mini_batch_size`.

VERL-style dotted overrides (`actor_rollout_ref.actor.ppo_epochs=4`) are mapped onto the nested form
by `apply_overrides` before validation.

The modules: `fields` (limits, field types, the `Strict` base), `sections` (what several methods
share), `supervised` (SFT, reward model, distillation, DPO), `ppo`, `distill` (on-policy distillation),
`evaluation`, `resources` and
`overrides`; this package's top is their public surface.
"""

from __future__ import annotations

from api.schemas.hyperparameters.distill import DistillConfig, DistillPolicyConfig
from api.schemas.hyperparameters.evaluation import (
    EvalConfig,
    EvalDataConfig,
    EvalModelConfig,
    EvalRolloutConfig,
)
from api.schemas.hyperparameters.fields import (
    MAX_SECONDS,
    MAX_SIZE,
    MAX_STEPS,
    Coef,
    CpusPerWorker,
    Dtype,
    Epochs,
    KLType,
    LossAggMode,
    Ratio,
    SequenceParallel,
    Share,
    Size,
    Strategy,
    Strict,
    TargetModules,
    Truncation,
    errors_at,
)
from api.schemas.hyperparameters.overrides import MAX_OVERRIDES, apply_overrides, map_key, parse_value
from api.schemas.hyperparameters.ppo import (
    GROUP_ESTIMATORS,
    ActorConfig,
    AlgorithmConfig,
    CriticConfig,
    FilterGroupsConfig,
    GuardrailConfig,
    KLControlConfig,
    OverlongBufferConfig,
    PPOConfig,
    RefConfig,
    RewardFilterConfig,
    RewardShapingConfig,
    RolloutConfig,
    RolloutCorrectionConfig,
)
from api.schemas.hyperparameters.resources import JobResources, Resources
from api.schemas.hyperparameters.sections import (
    ActorOptimConfig,
    DataConfig,
    DistillModelConfig,
    DistillOptimConfig,
    DPOOptimConfig,
    FSDPConfig,
    ModelConfig,
    OptimConfig,
    PPOTrainerConfig,
    StepGuardrailConfig,
    TrainerConfig,
)
from api.schemas.hyperparameters.supervised import DPOConfig, RewardModelConfig, RMDistillConfig, SFTConfig

METHOD_HYPERPARAMETERS: dict[str, type[Strict]] = {
    "sft": SFTConfig,
    "reward_model": RewardModelConfig,
    "rm_distill": RMDistillConfig,
    "dpo": DPOConfig,
    "ppo": PPOConfig,
    "distill_policy": DistillPolicyConfig,
    "eval": EvalConfig,
}

__all__ = [
    "GROUP_ESTIMATORS",
    "MAX_OVERRIDES",
    "MAX_SECONDS",
    "MAX_SIZE",
    "MAX_STEPS",
    "METHOD_HYPERPARAMETERS",
    "ActorConfig",
    "ActorOptimConfig",
    "AlgorithmConfig",
    "Coef",
    "CpusPerWorker",
    "CriticConfig",
    "DPOConfig",
    "DPOOptimConfig",
    "DataConfig",
    "DistillConfig",
    "DistillModelConfig",
    "DistillOptimConfig",
    "DistillPolicyConfig",
    "Dtype",
    "Epochs",
    "EvalConfig",
    "EvalDataConfig",
    "EvalModelConfig",
    "EvalRolloutConfig",
    "FSDPConfig",
    "FilterGroupsConfig",
    "GuardrailConfig",
    "JobResources",
    "KLControlConfig",
    "KLType",
    "LossAggMode",
    "ModelConfig",
    "OptimConfig",
    "OverlongBufferConfig",
    "PPOConfig",
    "PPOTrainerConfig",
    "RMDistillConfig",
    "Ratio",
    "RefConfig",
    "Resources",
    "RewardFilterConfig",
    "RewardModelConfig",
    "RewardShapingConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "SFTConfig",
    "SequenceParallel",
    "Share",
    "Size",
    "StepGuardrailConfig",
    "Strategy",
    "Strict",
    "TargetModules",
    "TrainerConfig",
    "Truncation",
    "apply_overrides",
    "errors_at",
    "map_key",
    "parse_value",
]
