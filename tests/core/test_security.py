"""API keys are stored hashed, shown once, and authenticate only their project."""

from sqlalchemy import select

from core.models import ApiKey
from core.security import authenticate, create_api_key, get_or_create_project


def test_key_is_stored_only_as_hash(db):
    project, created = get_or_create_project(db, "sec-test")
    assert created
    key = create_api_key(db, project)
    db.commit()
    rows = db.scalars(select(ApiKey).where(ApiKey.project_id == project.id)).all()
    assert len(rows) == 1 and key not in (rows[0].hash, rows[0].prefix) and len(rows[0].hash) == 64
    assert authenticate(db, key).id == project.id
    assert authenticate(db, key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert authenticate(db, "not-a-key") is None


def test_cli_keys_create_prints_a_working_key(database):
    from typer.testing import CliRunner

    from core.db import session_factory
    from keel_cli.main import app

    result = CliRunner().invoke(app, ["keys", "create", "--project", "cli-proj"])
    assert result.exit_code == 0, result.output
    key = result.stdout.strip().splitlines()[-1]
    with session_factory()() as db:
        assert authenticate(db, key).name == "cli-proj"
