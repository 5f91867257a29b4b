from enum import StrEnum


class TrainerPublicDtype(StrEnum):
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"

    def __str__(self) -> str:
        return str(self.value)
