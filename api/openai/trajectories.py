"""A trajectory's outcome (bring your own agent, docs/trajectories.md): an agent calls
`/v1/chat/completions` with `extra_body={"trajectory_id": ...}` (each call's token ids and log-probs
are recorded, `core.trajectories`), then `POST /v1/trajectories/{trajectory_id}/reward` scores the
whole trajectory; a PPO job with `rollout.source: trajectories` trains on the scored ones.

A reward may be posted again, and replaces the previous one, until a job takes the trajectory; then
only the same reward and group are accepted (a retried request), a different one is a 409
`trajectory_consumed`. A project sees only its own trajectories: another project's id is a 404.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from api.deps import CurrentProject, SessionDep
from api.errors import ApiError, not_found, problem_responses
from api.schemas.hyperparameters.fields import Strict
from api.schemas.jobs import Metadata
from core import trajectories

router = APIRouter(prefix="/v1/trajectories", tags=["inference"])

TrajectoryId = Annotated[str, Path(min_length=1, max_length=200,
                                   description="The `trajectory_id` the agent's calls carried in `extra_body`.")]


class TrajectoryRewardCreate(Strict):
    """A finished trajectory's outcome."""

    reward: float = Field(ge=-1e6, le=1e6)
    """The trajectory's score (finite); every sample cut from it earns it."""
    group_id: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    """Trajectories of one group (e.g. several attempts at one task) share a baseline under a group
    estimator (`grpo`, `rloo`, ...); without one a trajectory is a group of its own."""
    metadata: Metadata = Field(default_factory=dict)


class TrajectoryCallPublic(BaseModel):
    """One choice of one recorded call, its tokens as the serving engine sampled them."""

    model: str
    choice_index: int
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float] = Field(description="The sampled tokens' log-probs (temperature 1), one per "
                                              "completion token.")
    created_at: int = Field(description="Unix seconds.")


class TrajectorySummary(BaseModel):
    """A trajectory: its recorded calls counted, and its outcome."""

    id: str
    object: Literal["trajectory"] = "trajectory"
    calls: int = Field(description="Recorded call choices.")
    prompt_tokens: int
    completion_tokens: int
    reward: float | None = Field(description="None until a reward is posted.")
    group_id: str | None
    metadata: dict[str, str]
    completed_at: int | None = Field(description="Unix seconds of the (last) reward.")
    consumed_by: str | None = Field(description="The snapshot file (`purpose: trajectories`) a training job "
                                                "took the trajectory into; None: not trained on yet.")


class TrajectoryPublic(TrajectorySummary):
    """A trajectory with its calls, oldest first."""

    data: list[TrajectoryCallPublic]


def _seconds(at: datetime | None) -> int | None:
    return int(at.timestamp()) if at is not None else None


def _summary(db: SessionDep, project_id: str, trajectory_id: str) -> TrajectorySummary:
    calls, prompt, completion = trajectories.call_totals(db, project_id, trajectory_id)
    if not calls:
        raise not_found("trajectory", trajectory_id, param="trajectory_id")
    row = trajectories.outcome(db, project_id, trajectory_id)
    return TrajectorySummary(id=trajectory_id, calls=calls, prompt_tokens=prompt, completion_tokens=completion,
                             reward=row.reward if row else None, group_id=row.group_id if row else None,
                             metadata=row.meta if row else {}, completed_at=_seconds(row.completed_at if row else None),
                             consumed_by=row.consumed_by if row else None)


@router.post("/{trajectory_id}/reward", summary="Score a trajectory", response_model=TrajectorySummary,
             responses=problem_responses(400, 401, 404, 409, 429))
def create_trajectory_reward(trajectory_id: TrajectoryId, body: TrajectoryRewardCreate, project: CurrentProject,
                             db: SessionDep) -> TrajectorySummary:
    """Record a trajectory's reward (and group); 404 when the project recorded no call under the id.
    Posting again replaces the outcome until a training job takes the trajectory, then a different
    reward is a 409 `trajectory_consumed`."""
    if not trajectories.call_totals(db, project.id, trajectory_id)[0]:
        raise not_found("trajectory", trajectory_id, param="trajectory_id")
    try:
        trajectories.score(db, project.id, trajectory_id, body.reward, body.group_id, dict(body.metadata))
    except trajectories.AlreadyConsumed as taken:
        db.rollback()
        raise ApiError(409, "trajectory_consumed", f"Trajectory {trajectory_id!r} was already trained on (snapshot "
                       f"{taken}) with another reward or group; its outcome can no longer change.",
                       param="reward") from None
    db.commit()
    return _summary(db, project.id, trajectory_id)


@router.get("/{trajectory_id}", summary="Retrieve a trajectory", response_model=TrajectoryPublic,
            responses=problem_responses(400, 401, 404, 429))
def retrieve_trajectory(trajectory_id: TrajectoryId, project: CurrentProject, db: SessionDep) -> TrajectoryPublic:
    """A trajectory's recorded calls (token ids and log-probs, oldest first) and its outcome."""
    summary = _summary(db, project.id, trajectory_id)
    calls = [TrajectoryCallPublic(model=c.model, choice_index=c.choice_index, prompt_token_ids=c.prompt_token_ids,
                                  completion_token_ids=c.completion_token_ids, logprobs=c.logprobs,
                                  created_at=int(c.created_at.timestamp()))
             for c in trajectories.calls(db, project.id, trajectory_id)]
    return TrajectoryPublic(**summary.model_dump(), data=calls)
