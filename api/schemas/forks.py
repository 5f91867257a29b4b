"""Forks: a new job continuing another job's run from one of its checkpoints."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.hyperparameters.fields import Strict, _one_error

CheckpointRef = Annotated[Annotated[str, Field(min_length=1, max_length=64, pattern=r"^ckpt-")] | Annotated[int, Field(ge=1)],
                          _one_error("must be a checkpoint id (ckpt-...) or a step (a positive integer)")]


class JobFork(Strict):
    """Start a new job from a checkpoint of this one: its weights, optimizer state and data position, as
    a resume would. The new job runs the parent's request (model, files, method, seed, resources)."""

    checkpoint: CheckpointRef
    """A checkpoint of this job: its id (`ckpt-...`) or its step."""
    hyperparameters: dict[str, Any] | None = None
    """A partial hyperparameters object of the job's method, merged over the parent's (nested objects
    key by key). Left out: the fork's steps after the checkpoint equal the parent's (on CPU, bitwise)."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"checkpoint": 200, "hyperparameters": {"optim": {"lr": 5e-6}}}]})


class ForkedFrom(BaseModel):
    """Where a forked job started: the parent job and its checkpoint."""

    job: str
    checkpoint: str
    step: int
