from enum import StrEnum


class EvalDataConfigTruncation(StrEnum):
    ERROR = "error"
    LEFT = "left"
    MIDDLE = "middle"
    RIGHT = "right"

    def __str__(self) -> str:
        return str(self.value)
