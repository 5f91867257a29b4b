from enum import StrEnum


class EnvironmentSpecType(StrEnum):
    ARITHMETIC = "arithmetic"
    ECHO_TOKEN = "echo_token"
    OPENENV = "openenv"
    TOOLS = "tools"

    def __str__(self) -> str:
        return str(self.value)
