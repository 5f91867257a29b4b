from enum import StrEnum


class ResourcesCpusPerWorkerType1(StrEnum):
    AUTO = "auto"

    def __str__(self) -> str:
        return str(self.value)
