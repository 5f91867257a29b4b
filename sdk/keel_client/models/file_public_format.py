from enum import StrEnum


class FilePublicFormat(StrEnum):
    JSONL = "jsonl"
    PARQUET = "parquet"

    def __str__(self) -> str:
        return str(self.value)
