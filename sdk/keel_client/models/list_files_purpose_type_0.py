from enum import StrEnum


class ListFilesPurposeType0(StrEnum):
    EVAL_RESULTS = "eval_results"
    FINE_TUNE = "fine-tune"
    FINE_TUNE_RESULTS = "fine-tune-results"
    PREFERENCE = "preference"
    PROMPTS = "prompts"
    SFT = "sft"
    TRAJECTORIES = "trajectories"

    def __str__(self) -> str:
        return str(self.value)
