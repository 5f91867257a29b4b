"""`make run` installs the runtime dependencies only (`pip install -e .`): none of the test and bench
tools of `.[dev]` is one of them, and what `keel up` imports (the API, the worker with the engine,
the CLI) works with every one of those tools missing."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

TEST_ONLY_MODULES = {"pytest": "pytest", "pytest-timeout": "pytest_timeout", "hypothesis": "hypothesis",
                     "ruff": "ruff", "schemathesis": "schemathesis", "openapi-python-client": "openapi_python_client",
                     "kubernetes-validate": "kubernetes_validate", "s3fs": "s3fs", "moto": "moto", "wandb": "wandb",
                     "tensorboard": "tensorboard", "mlflow-skinny": "mlflow", "standardwebhooks": "standardwebhooks",
                     "playwright": "playwright", "openai": "openai", "tinker": "tinker", "chz": "chz",
                     "blobfile": "blobfile", "datasets": "datasets", "pyrage": "pyrage", "termcolor": "termcolor",
                     "tiktoken": "tiktoken", "math-verify": "math_verify", "pylatexenc": "pylatexenc",
                     "openenv-core": "openenv"}
"""Each test-only distribution of `.[dev]` and the module it installs."""

RUNTIME_SHARED = {"cloudpickle", "tqdm", "pillow", "aiohttp", "sympy"}
"""Dev dependencies (the Tinker cookbook's) that runtime libraries import too (torch sympy, transformers tqdm
and pillow, Ray cloudpickle and aiohttp): listed for the cookbook's --no-deps install, never blocked."""

_BLOCK = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"test-only module {name!r} imported", name=name)
        return None
sys.meta_path.insert(0, Block())
import api.main, workers.tasks, workers.trainers, workers.sweeper, keel_cli.main, keel_cli.server, keel_cli.demo
import engine.runtime.jobs, engine.demo
api.main.create_app()
print("imported")
"""


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def test_runtime_dependencies_hold_no_test_tool():
    runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    dev = {_name(r) for r in PYPROJECT["project"]["optional-dependencies"]["dev"]}
    assert dev == set(TEST_ONLY_MODULES) | RUNTIME_SHARED, "a new dev dependency: say whether `keel up` may import it"
    assert runtime & dev == set()


def test_make_run_installs_runtime_only():
    makefile = (ROOT / "Makefile").read_text()
    run_prereqs = re.search(r"^run: (.+)$", makefile, re.MULTILINE).group(1).split()
    assert run_prereqs == ["$(VENV)/.installed-runtime"]
    recipe = re.search(r"^\$\(VENV\)/\.installed-runtime:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE).group(1)
    assert "pip install -q -e ." in recipe and "[dev]" not in recipe


def test_keel_up_imports_need_no_test_tool(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "KEEL_HOME": str(tmp_path), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", _BLOCK, ",".join(TEST_ONLY_MODULES.values())], cwd=ROOT, env=env, check=False,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("imported"), proc.stderr[-3000:]
