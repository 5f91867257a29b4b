from enum import StrEnum


class JobEventPublicType(StrEnum):
    JOB_CHECKPOINT = "job.checkpoint"
    JOB_DONE = "job.done"
    JOB_ERROR = "job.error"
    JOB_LOG = "job.log"
    JOB_METRICS = "job.metrics"
    JOB_PLACEMENT = "job.placement"
    JOB_SAMPLES = "job.samples"
    JOB_STATUS = "job.status"
    JOB_WARNING = "job.warning"

    def __str__(self) -> str:
        return str(self.value)
