"""Contains all the data models used in inputs/outputs"""

from .actor_config import ActorConfig
from .actor_config_kl_loss_type import ActorConfigKlLossType
from .actor_config_loss_agg_mode import ActorConfigLossAggMode
from .actor_config_strategy import ActorConfigStrategy
from .actor_optim_config import ActorOptimConfig
from .actor_optim_config_lr_scheduler_type import ActorOptimConfigLrSchedulerType
from .adam_params import AdamParams
from .algorithm_config import AlgorithmConfig
from .algorithm_config_adv_estimator import AlgorithmConfigAdvEstimator
from .algorithm_config_kl_penalty import AlgorithmConfigKlPenalty
from .api_key_create import ApiKeyCreate
from .api_key_created import ApiKeyCreated
from .api_key_public import ApiKeyPublic
from .api_keys_public import ApiKeysPublic
from .checkpoint_deleted import CheckpointDeleted
from .checkpoint_public import CheckpointPublic
from .checkpoint_public_metrics import CheckpointPublicMetrics
from .checkpoints_public import CheckpointsPublic
from .column_stats import ColumnStats
from .create_chat_completion_raw import CreateChatCompletionRaw
from .create_completion_raw import CreateCompletionRaw
from .create_fine_tuning_job_raw import CreateFineTuningJobRaw
from .critic_config import CriticConfig
from .critic_config_loss_agg_mode import CriticConfigLossAggMode
from .critic_config_strategy import CriticConfigStrategy
from .data_config import DataConfig
from .data_config_truncation import DataConfigTruncation
from .datum import Datum
from .distill_config import DistillConfig
from .distill_model_config import DistillModelConfig
from .distill_model_config_dtype import DistillModelConfigDtype
from .distill_model_config_lora_rank_type_1 import DistillModelConfigLoraRankType1
from .distill_model_config_strategy import DistillModelConfigStrategy
from .distill_optim_config import DistillOptimConfig
from .distill_optim_config_lr_scheduler_type import DistillOptimConfigLrSchedulerType
from .distill_policy_config import DistillPolicyConfig
from .distill_policy_method import DistillPolicyMethod
from .download_checkpoint_content_include_type_0 import DownloadCheckpointContentIncludeType0
from .download_checkpoint_content_role import DownloadCheckpointContentRole
from .dpo_config import DPOConfig
from .dpo_config_loss_type import DPOConfigLossType
from .dpo_method import DPOMethod
from .dpo_optim_config import DPOOptimConfig
from .dpo_optim_config_lr_scheduler_type import DPOOptimConfigLrSchedulerType
from .environment_spec import EnvironmentSpec
from .environment_spec_type import EnvironmentSpecType
from .eval_config import EvalConfig
from .eval_data_config import EvalDataConfig
from .eval_data_config_truncation import EvalDataConfigTruncation
from .eval_method import EvalMethod
from .eval_model_config import EvalModelConfig
from .eval_model_config_dtype import EvalModelConfigDtype
from .eval_rollout_config import EvalRolloutConfig
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
from .filter_groups_config import FilterGroupsConfig
from .fine_tuning_checkpoint import FineTuningCheckpoint
from .fine_tuning_checkpoint_metrics import FineTuningCheckpointMetrics
from .fine_tuning_checkpoints import FineTuningCheckpoints
from .fine_tuning_error import FineTuningError
from .fine_tuning_job import FineTuningJob
from .fine_tuning_job_event import FineTuningJobEvent
from .fine_tuning_job_event_data_type_0 import FineTuningJobEventDataType0
from .fine_tuning_job_event_level import FineTuningJobEventLevel
from .fine_tuning_job_event_type import FineTuningJobEventType
from .fine_tuning_job_events import FineTuningJobEvents
from .fine_tuning_job_hyperparameters import FineTuningJobHyperparameters
from .fine_tuning_job_integrations_type_0_item import FineTuningJobIntegrationsType0Item
from .fine_tuning_job_metadata_type_0 import FineTuningJobMetadataType0
from .fine_tuning_job_method import FineTuningJobMethod
from .fine_tuning_job_status import FineTuningJobStatus
from .fine_tuning_jobs import FineTuningJobs
from .forked_from import ForkedFrom
from .forward_backward_request import ForwardBackwardRequest
from .forward_backward_request_loss_fn import ForwardBackwardRequestLossFn
from .fsdp_config import FSDPConfig
from .grader_run import GraderRun
from .grader_run_grader import GraderRunGrader
from .grader_run_item_type_0 import GraderRunItemType0
from .grader_run_model_sample_type_1 import GraderRunModelSampleType1
from .grader_validate import GraderValidate
from .grader_validate_grader import GraderValidateGrader
from .guardrail_config import GuardrailConfig
from .guardrail_config_collapse_action import GuardrailConfigCollapseAction
from .healthz_response_healthz import HealthzResponseHealthz
from .integration import Integration
from .integration_type import IntegrationType
from .job_create import JobCreate
from .job_create_metadata import JobCreateMetadata
from .job_deleted import JobDeleted
from .job_error import JobError
from .job_event_public import JobEventPublic
from .job_event_public_data import JobEventPublicData
from .job_event_public_type import JobEventPublicType
from .job_events_public import JobEventsPublic
from .job_fork import JobFork
from .job_fork_hyperparameters_type_0 import JobForkHyperparametersType0
from .job_manifest import JobManifest
from .job_manifest_config import JobManifestConfig
from .job_manifest_packages import JobManifestPackages
from .job_manifest_resources import JobManifestResources
from .job_manifest_seeds import JobManifestSeeds
from .job_metrics_public import JobMetricsPublic
from .job_progress import JobProgress
from .job_public import JobPublic
from .job_public_latest_metrics import JobPublicLatestMetrics
from .job_public_metadata import JobPublicMetadata
from .job_public_queue_reason_type_0 import JobPublicQueueReasonType0
from .job_public_status import JobPublicStatus
from .job_resources import JobResources
from .job_resources_executor import JobResourcesExecutor
from .job_resources_placement import JobResourcesPlacement
from .jobs_public import JobsPublic
from .kl_control_config import KLControlConfig
from .kl_control_config_type import KLControlConfigType
from .list_files_purpose_type_0 import ListFilesPurposeType0
from .list_jobs_status_type_0 import ListJobsStatusType0
from .list_models_kind_type_0 import ListModelsKindType0
from .list_trainers_status_type_0 import ListTrainersStatusType0
from .load_state_request import LoadStateRequest
from .lora_spec import LoraSpec
from .loss_fn_config import LossFnConfig
from .loss_fn_inputs import LossFnInputs
from .m_lflow_settings import MLflowSettings
from .manifest_datasets import ManifestDatasets
from .manifest_file import ManifestFile
from .manifest_gpu import ManifestGpu
from .manifest_hardware import ManifestHardware
from .manifest_model import ManifestModel
from .manifest_ray import ManifestRay
from .memory_capacity import MemoryCapacity
from .memory_plan import MemoryPlan
from .memory_plan_device import MemoryPlanDevice
from .memory_plan_roles import MemoryPlanRoles
from .metric_series import MetricSeries
from .model_config import ModelConfig
from .model_config_dtype import ModelConfigDtype
from .model_config_lora_rank_type_1 import ModelConfigLoraRankType1
from .model_config_strategy import ModelConfigStrategy
from .model_deleted import ModelDeleted
from .model_public import ModelPublic
from .model_public_format import ModelPublicFormat
from .model_public_kind import ModelPublicKind
from .models_public import ModelsPublic
from .multi_turn_config import MultiTurnConfig
from .operation_error import OperationError
from .optim_config import OptimConfig
from .optim_config_lr_scheduler_type import OptimConfigLrSchedulerType
from .optim_step_request import OptimStepRequest
from .overlong_buffer_config import OverlongBufferConfig
from .ppo_config import PPOConfig
from .ppo_method import PPOMethod
from .ppo_trainer_config import PPOTrainerConfig
from .problem import Problem
from .problem_errors_type_0_item import ProblemErrorsType0Item
from .ref_config import RefConfig
from .resources import Resources
from .resources_cpus_per_worker_type_1 import ResourcesCpusPerWorkerType1
from .resources_executor import ResourcesExecutor
from .resources_placement import ResourcesPlacement
from .reward_filter_config import RewardFilterConfig
from .reward_filter_config_mode import RewardFilterConfigMode
from .reward_model_config import RewardModelConfig
from .reward_model_method import RewardModelMethod
from .reward_shaping_config import RewardShapingConfig
from .reward_spec import RewardSpec
from .reward_spec_function_type_0 import RewardSpecFunctionType0
from .reward_spec_options import RewardSpecOptions
from .rm_distill_config import RMDistillConfig
from .rm_distill_config_loss import RMDistillConfigLoss
from .rm_distill_method import RMDistillMethod
from .role_memory import RoleMemory
from .rollout_config import RolloutConfig
from .rollout_config_mode import RolloutConfigMode
from .rollout_config_name import RolloutConfigName
from .rollout_config_partial import RolloutConfigPartial
from .rollout_config_source import RolloutConfigSource
from .rollout_config_trajectory_filter import RolloutConfigTrajectoryFilter
from .rollout_config_weight_sync_type_0 import RolloutConfigWeightSyncType0
from .rollout_correction_config import RolloutCorrectionConfig
from .rollout_correction_config_rollout_is_type_0 import RolloutCorrectionConfigRolloutIsType0
from .rollout_correction_config_rollout_rs_type_0 import RolloutCorrectionConfigRolloutRsType0
from .run_grader_response_run_grader import RunGraderResponseRunGrader
from .sample_request import SampleRequest
from .sampling_params import SamplingParams
from .save_request import SaveRequest
from .secret_deleted import SecretDeleted
from .secret_public import SecretPublic
from .secret_write import SecretWrite
from .secrets_public import SecretsPublic
from .sft_config import SFTConfig
from .sft_method import SFTMethod
from .step_guardrail_config import StepGuardrailConfig
from .trainer_config import TrainerConfig
from .trainer_create import TrainerCreate
from .trainer_create_dtype import TrainerCreateDtype
from .trainer_create_metadata import TrainerCreateMetadata
from .trainer_error import TrainerError
from .trainer_event_public import TrainerEventPublic
from .trainer_event_public_data import TrainerEventPublicData
from .trainer_event_public_type import TrainerEventPublicType
from .trainer_events_public import TrainerEventsPublic
from .trainer_operation_public import TrainerOperationPublic
from .trainer_operation_public_kind import TrainerOperationPublicKind
from .trainer_operation_public_result_type_0 import TrainerOperationPublicResultType0
from .trainer_operation_public_status import TrainerOperationPublicStatus
from .trainer_operations_public import TrainerOperationsPublic
from .trainer_public import TrainerPublic
from .trainer_public_dtype import TrainerPublicDtype
from .trainer_public_metadata import TrainerPublicMetadata
from .trainer_public_status import TrainerPublicStatus
from .trainer_resources import TrainerResources
from .trainers_public import TrainersPublic
from .trajectory_call_public import TrajectoryCallPublic
from .trajectory_public import TrajectoryPublic
from .trajectory_public_metadata import TrajectoryPublicMetadata
from .trajectory_reward_create import TrajectoryRewardCreate
from .trajectory_reward_create_metadata import TrajectoryRewardCreateMetadata
from .trajectory_summary import TrajectorySummary
from .trajectory_summary_metadata import TrajectorySummaryMetadata
from .upload_file_file_upload import UploadFileFileUpload
from .upload_file_file_upload_purpose import UploadFileFileUploadPurpose
from .validate_grader_response_validate_grader import ValidateGraderResponseValidateGrader
from .wandb_settings import WandbSettings
from .webhook_create import WebhookCreate
from .webhook_create_event_types_item import WebhookCreateEventTypesItem
from .webhook_created import WebhookCreated
from .webhook_created_event_types_item import WebhookCreatedEventTypesItem
from .webhook_deleted import WebhookDeleted
from .webhook_deliveries_public import WebhookDeliveriesPublic
from .webhook_delivery_public import WebhookDeliveryPublic
from .webhook_delivery_public_event_type import WebhookDeliveryPublicEventType
from .webhook_delivery_public_status import WebhookDeliveryPublicStatus
from .webhook_public import WebhookPublic
from .webhook_public_event_types_item import WebhookPublicEventTypesItem
from .webhooks_public import WebhooksPublic
from .worker_memory import WorkerMemory
from .worker_placement import WorkerPlacement

__all__ = (
    "ActorConfig",
    "ActorConfigKlLossType",
    "ActorConfigLossAggMode",
    "ActorConfigStrategy",
    "ActorOptimConfig",
    "ActorOptimConfigLrSchedulerType",
    "AdamParams",
    "AlgorithmConfig",
    "AlgorithmConfigAdvEstimator",
    "AlgorithmConfigKlPenalty",
    "ApiKeyCreate",
    "ApiKeyCreated",
    "ApiKeyPublic",
    "ApiKeysPublic",
    "CheckpointDeleted",
    "CheckpointPublic",
    "CheckpointPublicMetrics",
    "CheckpointsPublic",
    "ColumnStats",
    "CreateChatCompletionRaw",
    "CreateCompletionRaw",
    "CreateFineTuningJobRaw",
    "CriticConfig",
    "CriticConfigLossAggMode",
    "CriticConfigStrategy",
    "DataConfig",
    "DataConfigTruncation",
    "Datum",
    "DistillConfig",
    "DistillModelConfig",
    "DistillModelConfigDtype",
    "DistillModelConfigLoraRankType1",
    "DistillModelConfigStrategy",
    "DistillOptimConfig",
    "DistillOptimConfigLrSchedulerType",
    "DistillPolicyConfig",
    "DistillPolicyMethod",
    "DownloadCheckpointContentIncludeType0",
    "DownloadCheckpointContentRole",
    "DPOConfig",
    "DPOConfigLossType",
    "DPOMethod",
    "DPOOptimConfig",
    "DPOOptimConfigLrSchedulerType",
    "EnvironmentSpec",
    "EnvironmentSpecType",
    "EvalConfig",
    "EvalDataConfig",
    "EvalDataConfigTruncation",
    "EvalMethod",
    "EvalModelConfig",
    "EvalModelConfigDtype",
    "EvalRolloutConfig",
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
    "FilterGroupsConfig",
    "FineTuningCheckpoint",
    "FineTuningCheckpointMetrics",
    "FineTuningCheckpoints",
    "FineTuningError",
    "FineTuningJob",
    "FineTuningJobEvent",
    "FineTuningJobEventDataType0",
    "FineTuningJobEventLevel",
    "FineTuningJobEvents",
    "FineTuningJobEventType",
    "FineTuningJobHyperparameters",
    "FineTuningJobIntegrationsType0Item",
    "FineTuningJobMetadataType0",
    "FineTuningJobMethod",
    "FineTuningJobs",
    "FineTuningJobStatus",
    "ForkedFrom",
    "ForwardBackwardRequest",
    "ForwardBackwardRequestLossFn",
    "FSDPConfig",
    "GraderRun",
    "GraderRunGrader",
    "GraderRunItemType0",
    "GraderRunModelSampleType1",
    "GraderValidate",
    "GraderValidateGrader",
    "GuardrailConfig",
    "GuardrailConfigCollapseAction",
    "HealthzResponseHealthz",
    "Integration",
    "IntegrationType",
    "JobCreate",
    "JobCreateMetadata",
    "JobDeleted",
    "JobError",
    "JobEventPublic",
    "JobEventPublicData",
    "JobEventPublicType",
    "JobEventsPublic",
    "JobFork",
    "JobForkHyperparametersType0",
    "JobManifest",
    "JobManifestConfig",
    "JobManifestPackages",
    "JobManifestResources",
    "JobManifestSeeds",
    "JobMetricsPublic",
    "JobProgress",
    "JobPublic",
    "JobPublicLatestMetrics",
    "JobPublicMetadata",
    "JobPublicQueueReasonType0",
    "JobPublicStatus",
    "JobResources",
    "JobResourcesExecutor",
    "JobResourcesPlacement",
    "JobsPublic",
    "KLControlConfig",
    "KLControlConfigType",
    "ListFilesPurposeType0",
    "ListJobsStatusType0",
    "ListModelsKindType0",
    "ListTrainersStatusType0",
    "LoadStateRequest",
    "LoraSpec",
    "LossFnConfig",
    "LossFnInputs",
    "ManifestDatasets",
    "ManifestFile",
    "ManifestGpu",
    "ManifestHardware",
    "ManifestModel",
    "ManifestRay",
    "MemoryCapacity",
    "MemoryPlan",
    "MemoryPlanDevice",
    "MemoryPlanRoles",
    "MetricSeries",
    "MLflowSettings",
    "ModelConfig",
    "ModelConfigDtype",
    "ModelConfigLoraRankType1",
    "ModelConfigStrategy",
    "ModelDeleted",
    "ModelPublic",
    "ModelPublicFormat",
    "ModelPublicKind",
    "ModelsPublic",
    "MultiTurnConfig",
    "OperationError",
    "OptimConfig",
    "OptimConfigLrSchedulerType",
    "OptimStepRequest",
    "OverlongBufferConfig",
    "PPOConfig",
    "PPOMethod",
    "PPOTrainerConfig",
    "Problem",
    "ProblemErrorsType0Item",
    "RefConfig",
    "Resources",
    "ResourcesCpusPerWorkerType1",
    "ResourcesExecutor",
    "ResourcesPlacement",
    "RewardFilterConfig",
    "RewardFilterConfigMode",
    "RewardModelConfig",
    "RewardModelMethod",
    "RewardShapingConfig",
    "RewardSpec",
    "RewardSpecFunctionType0",
    "RewardSpecOptions",
    "RMDistillConfig",
    "RMDistillConfigLoss",
    "RMDistillMethod",
    "RoleMemory",
    "RolloutConfig",
    "RolloutConfigMode",
    "RolloutConfigName",
    "RolloutConfigPartial",
    "RolloutConfigSource",
    "RolloutConfigTrajectoryFilter",
    "RolloutConfigWeightSyncType0",
    "RolloutCorrectionConfig",
    "RolloutCorrectionConfigRolloutIsType0",
    "RolloutCorrectionConfigRolloutRsType0",
    "RunGraderResponseRunGrader",
    "SampleRequest",
    "SamplingParams",
    "SaveRequest",
    "SecretDeleted",
    "SecretPublic",
    "SecretsPublic",
    "SecretWrite",
    "SFTConfig",
    "SFTMethod",
    "StepGuardrailConfig",
    "TrainerConfig",
    "TrainerCreate",
    "TrainerCreateDtype",
    "TrainerCreateMetadata",
    "TrainerError",
    "TrainerEventPublic",
    "TrainerEventPublicData",
    "TrainerEventPublicType",
    "TrainerEventsPublic",
    "TrainerOperationPublic",
    "TrainerOperationPublicKind",
    "TrainerOperationPublicResultType0",
    "TrainerOperationPublicStatus",
    "TrainerOperationsPublic",
    "TrainerPublic",
    "TrainerPublicDtype",
    "TrainerPublicMetadata",
    "TrainerPublicStatus",
    "TrainerResources",
    "TrainersPublic",
    "TrajectoryCallPublic",
    "TrajectoryPublic",
    "TrajectoryPublicMetadata",
    "TrajectoryRewardCreate",
    "TrajectoryRewardCreateMetadata",
    "TrajectorySummary",
    "TrajectorySummaryMetadata",
    "UploadFileFileUpload",
    "UploadFileFileUploadPurpose",
    "ValidateGraderResponseValidateGrader",
    "WandbSettings",
    "WebhookCreate",
    "WebhookCreated",
    "WebhookCreatedEventTypesItem",
    "WebhookCreateEventTypesItem",
    "WebhookDeleted",
    "WebhookDeliveriesPublic",
    "WebhookDeliveryPublic",
    "WebhookDeliveryPublicEventType",
    "WebhookDeliveryPublicStatus",
    "WebhookPublic",
    "WebhookPublicEventTypesItem",
    "WebhooksPublic",
    "WorkerMemory",
    "WorkerPlacement",
)
