from enum import StrEnum


class FineTuningJobStatus(StrEnum):
    CANCELLED = "cancelled"
    FAILED = "failed"
    PAUSED = "paused"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    VALIDATING_FILES = "validating_files"

    def __str__(self) -> str:
        return str(self.value)
