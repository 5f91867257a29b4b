from enum import StrEnum


class ActorConfigKlLossType(StrEnum):
    ABS = "abs"
    KL = "kl"
    LOW_VAR_KL = "low_var_kl"
    MSE = "mse"

    def __str__(self) -> str:
        return str(self.value)
