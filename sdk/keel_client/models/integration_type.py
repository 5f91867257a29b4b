from enum import StrEnum


class IntegrationType(StrEnum):
    MLFLOW = "mlflow"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"

    def __str__(self) -> str:
        return str(self.value)
