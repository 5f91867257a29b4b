from enum import StrEnum


class RolloutConfigMode(StrEnum):
    ASYNC = "async"
    ONE_STEP_OFF = "one_step_off"
    SYNC = "sync"

    def __str__(self) -> str:
        return str(self.value)
