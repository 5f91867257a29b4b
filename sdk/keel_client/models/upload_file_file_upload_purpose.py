from enum import StrEnum


class UploadFileFileUploadPurpose(StrEnum):
    PREFERENCE = "preference"
    PROMPTS = "prompts"
    SFT = "sft"

    def __str__(self) -> str:
        return str(self.value)
