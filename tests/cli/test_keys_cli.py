"""`keel keys create|list|revoke` on the server's database: admin keys, secrets shown once, revocation
that the API honours at once, and a plain sentence (not a traceback) on a database never migrated."""

from __future__ import annotations

import secrets

from core.config import settings


def test_create_list_and_revoke(run_keel, client, database):
    project = f"cli-{secrets.token_hex(4)}"
    made = run_keel("keys", "create", "--project", project, "--admin", "--name", "ops")
    assert made.exit_code == 0, made.output
    admin_key = made.stdout.strip()
    assert admin_key.startswith("keel_") and f"created project {project}" in made.stderr
    plain_key = run_keel("keys", "create", "--project", project).stdout.strip()

    # The admin key manages keys over HTTP; the plain one may not.
    assert client.get("/v1/keys", headers={"Authorization": f"Bearer {admin_key}"}).status_code == 200
    assert client.get("/v1/keys", headers={"Authorization": f"Bearer {plain_key}"}).status_code == 403

    listed = run_keel("keys", "list", "--project", project)
    assert listed.exit_code == 0
    lines = listed.stdout.strip().splitlines()
    assert lines[0].split("\t")[:4] == ["id", "project", "prefix", "scope"] and len(lines) == 3
    rows = [line.split("\t") for line in lines[1:]]
    assert sorted(r[3] for r in rows) == ["admin", "project"] and {r[1] for r in rows} == {project}
    assert admin_key not in listed.stdout and plain_key not in listed.stdout  # never the secrets
    assert {r[2] for r in rows} == {admin_key[:12] + "...", plain_key[:12] + "..."}

    plain_id = next(r[0] for r in rows if r[3] == "project")
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {plain_key}"}).status_code == 200
    revoked = run_keel("keys", "revoke", plain_id)
    assert revoked.exit_code == 0 and plain_id in revoked.stdout
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {plain_key}"}).status_code == 401
    assert len(run_keel("keys", "list", "--project", project).stdout.strip().splitlines()) == 2
    assert len(run_keel("keys", "list", "--project", project, "--revoked").stdout.strip().splitlines()) == 3
    missing = run_keel("keys", "revoke", "key-doesnotexist")
    assert missing.exit_code == 1 and "no API key" in missing.stderr


def test_a_database_never_migrated_gets_a_sentence(run_keel, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "DATABASE_URL", f"sqlite:///{tmp_path / 'fresh.db'}")
    for args in (["keys", "create", "--project", "p"], ["keys", "list"], ["keys", "revoke", "key-x"]):
        result = run_keel(*args)
        assert result.exit_code == 1, result.output
        assert "run `keel migrate` first" in result.stderr and "Traceback" not in result.output
    # After the migration the same command works.
    from core import migrate

    migrate.upgrade(settings.database_url)
    assert run_keel("keys", "create", "--project", "p").stdout.startswith("keel_")


def test_an_unreachable_database_gets_a_sentence(run_keel, monkeypatch):
    monkeypatch.setattr(settings, "DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    result = run_keel("keys", "list")
    assert result.exit_code == 1 and "cannot reach the database" in result.stderr
