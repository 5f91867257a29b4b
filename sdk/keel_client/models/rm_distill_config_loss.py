from enum import StrEnum


class RMDistillConfigLoss(StrEnum):
    KL = "kl"
    MSE = "mse"

    def __str__(self) -> str:
        return str(self.value)
