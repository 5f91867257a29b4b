"""What the DELETE routes of jobs, models and checkpoints share: the `in_use` refusal, and removing
a directory from the artifact store."""

from __future__ import annotations

import logging
from collections.abc import Collection

from sqlalchemy.orm import Session

from api.errors import ApiError
from core import checkpoints, references, trainers
from core.storage import get_storage

log = logging.getLogger(__name__)


def refuse_in_use(db: Session, project_id: str, ids: Collection[str], param: str) -> None:
    """409 `in_use` when a queued or running job of the project references one of `ids` (as its
    model, teacher, reward model, `compare_to` or `from_checkpoint`), or a live trainer does (as its
    base model or its last save)."""
    busy = references.users(db, project_id, ids)
    if busy:
        ref, user = next(iter(busy.items()))
        raise ApiError(409, "in_use", f"{ref} is used by job {user.job_id} ({user.status}) as {user.param}; "
                       "cancel the job or wait for it to finish.", param=param)
    held = trainers.trainer_users(db, project_id, list(ids))
    if held:
        ref, (trainer_id, what) = next(iter(held.items()))
        raise ApiError(409, "in_use", f"{ref} is used by trainer {trainer_id} as {what}; delete the trainer "
                       "(or, for a save, save_state again) first.", param=param)


def remove_files(location: str) -> None:
    """Remove a directory of the artifact store, after its rows are gone (never anything outside the
    store: a model or checkpoint recorded elsewhere keeps its files)."""
    storage = get_storage()
    if checkpoints.inside_store(storage, location):
        checkpoints.remove_tree(location, storage.options)
    else:
        log.warning("not removing %s: outside the artifact store", location)
