from enum import StrEnum


class ModelPublicFormat(StrEnum):
    HF = "hf"
    LORA = "lora"

    def __str__(self) -> str:
        return str(self.value)
