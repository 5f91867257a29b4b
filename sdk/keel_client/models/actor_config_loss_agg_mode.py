from enum import StrEnum


class ActorConfigLossAggMode(StrEnum):
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"
    TOKEN_MEAN = "token-mean"

    def __str__(self) -> str:
        return str(self.value)
