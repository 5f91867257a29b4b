from enum import StrEnum


class FilePublicStatus(StrEnum):
    ERROR = "error"
    PROCESSED = "processed"

    def __str__(self) -> str:
        return str(self.value)
