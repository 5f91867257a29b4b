from enum import StrEnum


class DPOConfigLossType(StrEnum):
    IPO = "ipo"
    SIGMOID = "sigmoid"

    def __str__(self) -> str:
        return str(self.value)
