from enum import StrEnum


class RolloutCorrectionConfigRolloutRsType0(StrEnum):
    SEQUENCE = "sequence"
    TOKEN = "token"

    def __str__(self) -> str:
        return str(self.value)
