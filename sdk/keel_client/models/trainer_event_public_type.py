from enum import StrEnum


class TrainerEventPublicType(StrEnum):
    TRAINER_MODEL = "trainer.model"
    TRAINER_OPERATION = "trainer.operation"
    TRAINER_STATUS = "trainer.status"
    TRAINER_WARNING = "trainer.warning"

    def __str__(self) -> str:
        return str(self.value)
