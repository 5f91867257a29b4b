from enum import StrEnum


class RolloutConfigPartial(StrEnum):
    CONTINUE = "continue"
    FINISH = "finish"

    def __str__(self) -> str:
        return str(self.value)
