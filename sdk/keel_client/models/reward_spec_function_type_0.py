from enum import StrEnum


class RewardSpecFunctionType0(StrEnum):
    CODE_TESTS = "code_tests"
    DATA_SOURCE = "data_source"
    EXACT_MATCH = "exact_match"
    GRADER = "grader"
    GSM8K = "gsm8k"
    LENGTH_PENALTY = "length_penalty"
    REGEX = "regex"

    def __str__(self) -> str:
        return str(self.value)
