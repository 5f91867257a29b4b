"""The jobs API tests' requests and rows: files and models written straight to the database, the
brief's reward-model body, a PPO body, and a create call."""

from __future__ import annotations

import secrets

from core.models import File, Model


def make_file(db, project_id: str, purpose: str, **kw) -> str:
    f = File(project_id=project_id, purpose=purpose, filename=f"{purpose}.parquet", bytes=10,
             sha256=secrets.token_hex(32), format="parquet", storage_key=f"files/{secrets.token_hex(4)}", **kw)
    db.add(f)
    db.commit()
    return f.id


def make_model(db, project_id: str, kind: str = "reward_model", **kw) -> str:
    m = Model(project_id=project_id, name=f"m-{secrets.token_hex(3)}", kind=kind, format="hf",
              base_model="org/base", path="/nowhere", **kw)
    db.add(m)
    db.commit()
    return m.id


def project_of(db, headers: dict[str, str]) -> str:
    from core.security import authenticate

    return authenticate(db, headers["Authorization"].split()[1]).id


def rm_body(files) -> dict:
    """The brief's example body, verbatim."""
    return {"model": "org/name", "training_file": files["preference"], "validation_file": None,
            "method": {"type": "reward_model", "hyperparameters": {
                "data": {"train_batch_size": 16, "max_length": 256}, "optim": {"lr": 1e-4},
                "trainer": {"total_training_steps": 100, "save_freq": 20, "test_freq": 20}}},
            "seed": 0, "metadata": {"team": "align"}}


def ppo_body(files, **hyper) -> dict:
    return {"model": "org/name", "training_file": files["prompts"],
            "method": {"type": "ppo", "reward": {"function": "gsm8k"}, "hyperparameters": hyper}}


def create(client, auth, body, **headers):
    return client.post("/v1/jobs", json=body, headers={**auth, **headers})
