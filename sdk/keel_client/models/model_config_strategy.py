from enum import StrEnum


class ModelConfigStrategy(StrEnum):
    DDP = "ddp"
    FSDP2 = "fsdp2"

    def __str__(self) -> str:
        return str(self.value)
