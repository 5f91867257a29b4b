from enum import StrEnum


class GuardrailConfigCollapseAction(StrEnum):
    ROLLBACK = "rollback"
    WARN = "warn"

    def __str__(self) -> str:
        return str(self.value)
