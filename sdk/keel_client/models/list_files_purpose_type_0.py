from enum import StrEnum


class ListFilesPurposeType0(StrEnum):
    PREFERENCE = "preference"
    PROMPTS = "prompts"
    SFT = "sft"

    def __str__(self) -> str:
        return str(self.value)
