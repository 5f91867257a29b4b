from enum import StrEnum


class ForwardBackwardRequestLossFn(StrEnum):
    CISPO = "cispo"
    CROSS_ENTROPY = "cross_entropy"
    DPO = "dpo"
    DRO = "dro"
    IMPORTANCE_SAMPLING = "importance_sampling"
    PPO = "ppo"

    def __str__(self) -> str:
        return str(self.value)
