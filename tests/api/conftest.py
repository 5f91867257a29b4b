"""Fixtures of the API tests: a project's training files, one per purpose (rows written straight to
the database)."""

from __future__ import annotations

import pytest

from tests.api.job_requests import make_file


@pytest.fixture
def files(db, project_key):
    pid = project_key[0]
    return {p: make_file(db, pid, p) for p in ("sft", "preference", "prompts")}
