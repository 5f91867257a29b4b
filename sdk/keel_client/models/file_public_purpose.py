from enum import StrEnum


class FilePublicPurpose(StrEnum):
    PREFERENCE = "preference"
    PROMPTS = "prompts"
    SFT = "sft"

    def __str__(self) -> str:
        return str(self.value)
