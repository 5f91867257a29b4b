from enum import StrEnum


class UploadFileFileUploadPurpose(StrEnum):
    FINE_TUNE = "fine-tune"
    PREFERENCE = "preference"
    PROMPTS = "prompts"
    SFT = "sft"

    def __str__(self) -> str:
        return str(self.value)
