from enum import StrEnum


class ListModelsKindType0(StrEnum):
    POLICY = "policy"
    REWARD_MODEL = "reward_model"
    VALUE_MODEL = "value_model"

    def __str__(self) -> str:
        return str(self.value)
