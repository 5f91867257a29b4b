"""The committed OpenAPI snapshot and generated SDK match the live app (regenerate with `make sdk`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_snapshot_matches_the_live_schema():
    from api.main import create_app

    live = json.dumps(create_app().openapi(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert (ROOT / "sdk/openapi.json").read_text() == live, "sdk/openapi.json is stale: run `make sdk`"


def test_regenerating_changes_nothing():
    # A subprocess: the generator shells out to ruff and imports the app fresh, as `make sdk` does.
    proc = subprocess.run([sys.executable, "-m", "sdk.generate", "--check"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the committed SDK differs from a fresh generation:\n{proc.stdout}{proc.stderr}"


def test_sdk_imports_without_heavy_modules():
    code = ("import sys, keel_client, keel_client.api, keel_client.models; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'ray', 'transformers', 'api', 'core', 'engine', 'workers')))")
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT / "tests", capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert callable(__import__("keel_client").stream_events)


def test_sdk_models_parse_every_method_with_all_defaults():
    """The generated models read what the API writes: every method's fully defaulted spec round-trips."""
    from keel_client.models import JobCreate

    from api.schemas.jobs import JobCreate as ApiJobCreate

    methods = [{"type": "sft"}, {"type": "reward_model"}, {"type": "rm_distill", "teacher": "model-x"},
               {"type": "ppo", "reward": {"function": "gsm8k"}}, {"type": "ppo", "reward": {"model": "model-y"}}]
    for method in methods:
        spec = ApiJobCreate.model_validate({"model": "org/name", "training_file": "file-x", "method": method})
        wire = spec.model_dump(mode="json")
        parsed = JobCreate.from_dict(wire)
        assert type(parsed.method).__name__.lower().replace("method", "") == method["type"].replace("_", "")
        assert parsed.to_dict() == wire
