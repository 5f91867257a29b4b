from enum import StrEnum


class TrainerOperationPublicKind(StrEnum):
    FORWARD = "forward"
    FORWARD_BACKWARD = "forward_backward"
    LOAD_STATE = "load_state"
    OPTIM_STEP = "optim_step"
    SAMPLE = "sample"
    SAVE_STATE = "save_state"
    SAVE_WEIGHTS_FOR_SAMPLER = "save_weights_for_sampler"

    def __str__(self) -> str:
        return str(self.value)
