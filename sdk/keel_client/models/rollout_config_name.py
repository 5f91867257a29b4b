from enum import StrEnum


class RolloutConfigName(StrEnum):
    HF = "hf"
    VLLM = "vllm"

    def __str__(self) -> str:
        return str(self.value)
