"""Contains all the data models used in inputs/outputs"""

from .actor_config import ActorConfig
from .actor_config_kl_loss_type import ActorConfigKlLossType
from .actor_config_loss_agg_mode import ActorConfigLossAggMode
from .actor_optim_config import ActorOptimConfig
from .actor_optim_config_lr_scheduler_type import ActorOptimConfigLrSchedulerType
from .algorithm_config import AlgorithmConfig
from .algorithm_config_adv_estimator import AlgorithmConfigAdvEstimator
from .algorithm_config_kl_penalty import AlgorithmConfigKlPenalty
from .checkpoint_public import CheckpointPublic
from .checkpoint_public_metrics import CheckpointPublicMetrics
from .checkpoints_public import CheckpointsPublic
from .column_stats import ColumnStats
from .critic_config import CriticConfig
from .critic_config_loss_agg_mode import CriticConfigLossAggMode
from .data_config import DataConfig
from .data_config_truncation import DataConfigTruncation
from .distill_model_config import DistillModelConfig
from .distill_model_config_dtype import DistillModelConfigDtype
from .distill_model_config_lora_rank_type_1 import DistillModelConfigLoraRankType1
from .distill_optim_config import DistillOptimConfig
from .distill_optim_config_lr_scheduler_type import DistillOptimConfigLrSchedulerType
from .file_deleted import FileDeleted
from .file_preview import FilePreview
from .file_preview_data_item import FilePreviewDataItem
from .file_public import FilePublic
from .file_public_format import FilePublicFormat
from .file_public_metadata import FilePublicMetadata
from .file_public_purpose import FilePublicPurpose
from .file_public_stats import FilePublicStats
from .file_public_status import FilePublicStatus
from .files_public import FilesPublic
from .guardrail_config import GuardrailConfig
from .healthz_response_healthz import HealthzResponseHealthz
from .job_create import JobCreate
from .job_create_metadata import JobCreateMetadata
from .job_error import JobError
from .job_event_public import JobEventPublic
from .job_event_public_data import JobEventPublicData
from .job_event_public_type import JobEventPublicType
from .job_events_public import JobEventsPublic
from .job_metrics_public import JobMetricsPublic
from .job_progress import JobProgress
from .job_public import JobPublic
from .job_public_latest_metrics import JobPublicLatestMetrics
from .job_public_metadata import JobPublicMetadata
from .job_public_status import JobPublicStatus
from .jobs_public import JobsPublic
from .kl_control_config import KLControlConfig
from .kl_control_config_type import KLControlConfigType
from .list_files_purpose_type_0 import ListFilesPurposeType0
from .list_jobs_status_type_0 import ListJobsStatusType0
from .list_models_kind_type_0 import ListModelsKindType0
from .metric_series import MetricSeries
from .model_config import ModelConfig
from .model_config_dtype import ModelConfigDtype
from .model_config_lora_rank_type_1 import ModelConfigLoraRankType1
from .model_public import ModelPublic
from .model_public_format import ModelPublicFormat
from .model_public_kind import ModelPublicKind
from .models_public import ModelsPublic
from .optim_config import OptimConfig
from .optim_config_lr_scheduler_type import OptimConfigLrSchedulerType
from .ppo_config import PPOConfig
from .ppo_method import PPOMethod
from .ppo_trainer_config import PPOTrainerConfig
from .problem import Problem
from .problem_errors_type_0_item import ProblemErrorsType0Item
from .resources import Resources
from .reward_filter_config import RewardFilterConfig
from .reward_model_config import RewardModelConfig
from .reward_model_method import RewardModelMethod
from .reward_spec import RewardSpec
from .reward_spec_function_type_0 import RewardSpecFunctionType0
from .reward_spec_options import RewardSpecOptions
from .rm_distill_config import RMDistillConfig
from .rm_distill_config_loss import RMDistillConfigLoss
from .rm_distill_method import RMDistillMethod
from .rollout_config import RolloutConfig
from .rollout_config_name import RolloutConfigName
from .sft_config import SFTConfig
from .sft_method import SFTMethod
from .trainer_config import TrainerConfig
from .upload_file_file_upload import UploadFileFileUpload
from .upload_file_file_upload_purpose import UploadFileFileUploadPurpose

__all__ = (
    "ActorConfig",
    "ActorConfigKlLossType",
    "ActorConfigLossAggMode",
    "ActorOptimConfig",
    "ActorOptimConfigLrSchedulerType",
    "AlgorithmConfig",
    "AlgorithmConfigAdvEstimator",
    "AlgorithmConfigKlPenalty",
    "CheckpointPublic",
    "CheckpointPublicMetrics",
    "CheckpointsPublic",
    "ColumnStats",
    "CriticConfig",
    "CriticConfigLossAggMode",
    "DataConfig",
    "DataConfigTruncation",
    "DistillModelConfig",
    "DistillModelConfigDtype",
    "DistillModelConfigLoraRankType1",
    "DistillOptimConfig",
    "DistillOptimConfigLrSchedulerType",
    "FileDeleted",
    "FilePreview",
    "FilePreviewDataItem",
    "FilePublic",
    "FilePublicFormat",
    "FilePublicMetadata",
    "FilePublicPurpose",
    "FilePublicStats",
    "FilePublicStatus",
    "FilesPublic",
    "GuardrailConfig",
    "HealthzResponseHealthz",
    "JobCreate",
    "JobCreateMetadata",
    "JobError",
    "JobEventPublic",
    "JobEventPublicData",
    "JobEventPublicType",
    "JobEventsPublic",
    "JobMetricsPublic",
    "JobProgress",
    "JobPublic",
    "JobPublicLatestMetrics",
    "JobPublicMetadata",
    "JobPublicStatus",
    "JobsPublic",
    "KLControlConfig",
    "KLControlConfigType",
    "ListFilesPurposeType0",
    "ListJobsStatusType0",
    "ListModelsKindType0",
    "MetricSeries",
    "ModelConfig",
    "ModelConfigDtype",
    "ModelConfigLoraRankType1",
    "ModelPublic",
    "ModelPublicFormat",
    "ModelPublicKind",
    "ModelsPublic",
    "OptimConfig",
    "OptimConfigLrSchedulerType",
    "PPOConfig",
    "PPOMethod",
    "PPOTrainerConfig",
    "Problem",
    "ProblemErrorsType0Item",
    "Resources",
    "RewardFilterConfig",
    "RewardModelConfig",
    "RewardModelMethod",
    "RewardSpec",
    "RewardSpecFunctionType0",
    "RewardSpecOptions",
    "RMDistillConfig",
    "RMDistillConfigLoss",
    "RMDistillMethod",
    "RolloutConfig",
    "RolloutConfigName",
    "SFTConfig",
    "SFTMethod",
    "TrainerConfig",
    "UploadFileFileUpload",
    "UploadFileFileUploadPurpose",
)
