from enum import StrEnum


class RolloutCorrectionConfigRolloutIsType0(StrEnum):
    SEQUENCE = "sequence"
    TOKEN = "token"

    def __str__(self) -> str:
        return str(self.value)
