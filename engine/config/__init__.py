"""Per-job hyperparameters as frozen dataclasses, named and nested like VERL's config.

Defaults follow Keel's production recipe (../shared/rlhf-defaults.md); tests override sizes for tiny
CPU runs. The API validates requests with its own pydantic schema and hands the validated dict to
`build_config`, which rejects unknown keys with the dotted path of the offender.

The modules hold what the dataclasses describe: `sections` (model, optimizer, trainer, data: what
every training method shares), `supervised` (SFT, reward model, distillation, DPO), `ppo` (actor,
critic, reference, rollout, algorithm, guardrails), `distill` (on-policy distillation: PPO's plus the
teacher's reward), `evaluation`, `job` (the request and result a
method handles) and `building` (dict -> config, cross-field rules, config -> dict). This package
names the public surface: `from engine.config import X`.
"""

from engine.config.building import METHOD_CONFIGS, build_config, check_parallel, config_to_dict
from engine.config.distill import DistillConfig, DistillPolicyConfig
from engine.config.evaluation import EvalConfig, EvalDataConfig, EvalModelConfig, EvalRolloutConfig
from engine.config.job import JobRequest, JobResult, Resources, ResultFile
from engine.config.ppo import (
    GROUP_ESTIMATORS,
    ActorConfig,
    AlgorithmConfig,
    CriticConfig,
    FilterGroupsConfig,
    GuardrailConfig,
    KLControlConfig,
    MultiTurnConfig,
    OverlongBufferConfig,
    PPOConfig,
    RefConfig,
    RewardFilterConfig,
    RewardShapingConfig,
    RolloutConfig,
    RolloutCorrectionConfig,
)
from engine.config.sections import (
    DataConfig,
    FSDPConfig,
    ModelConfig,
    OptimConfig,
    StepGuardrailConfig,
    TrainerConfig,
)
from engine.config.supervised import DPOConfig, RewardModelConfig, RMDistillConfig, SFTConfig

__all__ = [
    "GROUP_ESTIMATORS", "METHOD_CONFIGS", "ActorConfig", "AlgorithmConfig", "CriticConfig", "DPOConfig",
    "DataConfig", "DistillConfig", "DistillPolicyConfig", "EvalConfig", "EvalDataConfig", "EvalModelConfig", "EvalRolloutConfig", "FSDPConfig",
    "FilterGroupsConfig", "GuardrailConfig", "JobRequest", "JobResult", "KLControlConfig", "ModelConfig", "MultiTurnConfig",
    "OptimConfig", "OverlongBufferConfig", "PPOConfig", "RMDistillConfig", "RefConfig", "Resources",
    "ResultFile", "RewardFilterConfig", "RewardModelConfig", "RewardShapingConfig", "RolloutConfig",
    "RolloutCorrectionConfig", "SFTConfig", "StepGuardrailConfig", "TrainerConfig", "build_config",
    "check_parallel", "config_to_dict",
]
