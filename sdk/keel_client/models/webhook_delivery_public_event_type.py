from enum import StrEnum


class WebhookDeliveryPublicEventType(StrEnum):
    JOB_CANCELLED = "job.cancelled"
    JOB_CHECKPOINT = "job.checkpoint"
    JOB_FAILED = "job.failed"
    JOB_PAUSED = "job.paused"
    JOB_SUCCEEDED = "job.succeeded"
    JOB_WARNING = "job.warning"

    def __str__(self) -> str:
        return str(self.value)
