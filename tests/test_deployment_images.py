"""The images start what they claim to (Docker cannot run here): the files each Dockerfile's COPY lines
select (through .dockerignore) are copied, exactly, into a temporary /app, and its entry point is
imported from that copy alone in a subprocess; the API image with torch and ray made unimportable,
and every third-party module it loads must come from its `pip install` line."""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from deployment_files import ENTRYPOINT, ROOT, instructions
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HEAVY = ("torch", "ray", "transformers", "peft", "vllm", "safetensors", "tokenizers")
PROJECT = ("api", "core", "workers", "engine", "keel_cli", "keel_client", "bench")


def _ignore_rules() -> list[tuple[bool, re.Pattern]]:
    """.dockerignore as Docker reads it: patterns from the context root, `**` any depth, `!` re-includes,
    the last matching rule wins, and a rule matching a directory matches everything in it."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = posixpath.normpath(line.lstrip("!").strip("/"))
        regex, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] in "*?":
                regex, i = regex + ("[^/]*" if pattern[i] == "*" else "[^/]"), i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex, i = regex + "[" + pattern[i + 1:end].replace("!", "^", 1) + "]", end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((negate, re.compile(regex + r"\Z")))
    return rules


def _ignored(rel: str, rules) -> bool:
    parts = rel.split("/")
    paths = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for negate, rx in rules:
        if any(rx.match(p) for p in paths):
            excluded = not negate
    return excluded


def context_files() -> set[str]:
    """The build context Docker sends: every file under the repo that .dockerignore keeps."""
    rules = _ignore_rules()
    assert not any(negate for negate, _ in rules), "re-includes would need the walk below not to prune"
    kept = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = Path(dirpath).relative_to(ROOT).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = [d for d in dirnames if not _ignored(prefix + d, rules)]
        kept.update(prefix + f for f in filenames if not _ignored(prefix + f, rules))
    return kept


def image_files(dockerfile: str) -> dict[str, str]:
    """{path in the image: path in the repo} for every file the Dockerfile's COPY lines bring in."""
    context, workdir, files = context_files(), "/", {}
    for instruction, args in instructions(dockerfile):
        if instruction == "WORKDIR":
            workdir = posixpath.join(workdir, args)
        elif instruction in ("COPY", "ADD"):
            parts = json.loads(args) if args.startswith("[") else shlex.split(args)
            assert not any(p.startswith("--from") for p in parts), "multi-stage copies are not modelled"
            *sources, dest = [p for p in parts if not p.startswith("--")]
            into_dir = dest.endswith("/") or len(sources) > 1
            dest = posixpath.normpath(posixpath.join(workdir, dest))
            for source in sources:
                source = posixpath.normpath(source)
                hits = sorted(f for f in context if source == "." or f == source or f.startswith(source + "/"))
                assert hits, f"{dockerfile}: COPY {source}: not in the build context (.dockerignore?)"
                for f in hits:
                    if f == source:
                        files[posixpath.join(dest, posixpath.basename(f)) if into_dir else dest] = f
                    else:
                        files[posixpath.join(dest, f if source == "." else f[len(source) + 1:])] = f
    return files


def materialize(dockerfile: str, tmp_path: Path) -> Path:
    """Copy exactly the image's files into tmp_path/app (the image's /app); returns that directory."""
    app = tmp_path / "app"
    for target, source in image_files(dockerfile).items():
        assert target.startswith("/app/"), f"{dockerfile} copies {source} outside /app: {target}"
        dest = app / target.removeprefix("/app/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / source, dest)
    return app


IMPORT_FROM_COPY = """
import importlib.abc, json, os, sys
app, heavy, project = sys.argv[1], tuple(sys.argv[2].split(",")) if sys.argv[2] else (), sys.argv[3].split(",")
# Only the copy: drop the repo's editable install and any path into the repo; the image's own
# `pip install -e .` puts /app and /app/sdk on the path.
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path_importer_cache.clear()
sys.path[:] = [app, app + "/sdk"] + [p for p in sys.path[1:]
                                     if not p.startswith(os.environ["KEEL_REPO"]) or p.startswith(sys.prefix)]
class NotInImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in heavy:
            raise ModuleNotFoundError(f"No module named {name!r} (not installed in this image)")
sys.meta_path.insert(0, NotInImage())
exec(compile(os.environ["CHECK"], "<check>", "exec"))
outside = sorted(f"{n}: {m.__file__}" for n, m in list(sys.modules.items()) if n.split(".")[0] in project
                 and getattr(m, "__file__", None) and not m.__file__.startswith(app))
loaded = sorted({n.split(".")[0] for n in sys.modules} - set(sys.stdlib_module_names) - set(project))
print(json.dumps({"outside": outside, "loaded": loaded}))
"""


def import_from_copy(app: Path, check: str, heavy: tuple[str, ...] = (), **settings: str) -> dict:
    env = {"PATH": os.environ["PATH"], "HOME": str(app.parent), "KEEL_HOME": str(app.parent / "home"),
           "KEEL_ENV": "test", "KEEL_REPO": str(ROOT), "CHECK": check, **settings}
    out = subprocess.run([sys.executable, "-c", IMPORT_FROM_COPY, str(app), ",".join(heavy), ",".join(PROJECT)],
                         cwd=app, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-6000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["outside"] == [], "imported from outside the image's files: " + ", ".join(result["outside"])
    return result


def _pip_requirements(dockerfile: str) -> list[str]:
    """The requirement strings of the Dockerfile's `pip install` (without flags and `-e .`)."""
    reqs = []
    for instruction, args in instructions(dockerfile):
        if instruction == "RUN":
            for command in re.split(r"&&|;", args):
                words = shlex.split(command)
                if words[:2] == ["pip", "install"]:
                    reqs += [w for w in words[2:] if not w.startswith(("-", "$")) and w != "."]
    return reqs


def _installed_closure(requirements: list[str]) -> set[str]:
    """Distributions these requirements install (as found in this environment), with their extras."""
    seen, stack = set(), [Requirement(r) for r in requirements]
    while stack:
        req = stack.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
                stack.append(sub)
    return {name for name, _ in seen}


API_CHECK = """
from fastapi.testclient import TestClient
from keel_cli.main import app as keel  # the `keel` command: `keel migrate` and `keel api`
keel(["migrate"], standalone_mode=False)  # alembic.ini and migrations/ come from the copy
import api.main
with TestClient(api.main.create_app()) as client:
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
from keel_cli.server import api as serve  # what `keel api` runs: uvicorn with api.main:app
import uvicorn
"""


def not_in_api_image() -> tuple[str, ...]:
    """Top-level modules of every distribution here that the API image's `pip install` line does not bring
    (the base image brings pip, setuptools and wheel): the check below makes them unimportable."""
    installed = _installed_closure(_pip_requirements("docker/api.Dockerfile")) | {"pip", "setuptools", "wheel"}
    absent = {module for module, dists in metadata.packages_distributions().items()
              if not {canonicalize_name(d) for d in dists} & installed and module not in PROJECT}
    assert absent >= {"torch", "ray", "transformers"}
    return tuple(sorted(absent | set(HEAVY)))


def test_api_image_starts_from_its_own_files_without_torch_or_ray(tmp_path, database):
    app = materialize("docker/api.Dockerfile", tmp_path)
    assert not (app / "engine").exists() and not (app / "workers/tasks.py").exists()
    # Production-shaped: PostgreSQL (psycopg) and a Redis broker, as in docker-compose.yml.
    result = import_from_copy(app, API_CHECK, heavy=not_in_api_image(), KEEL_DATABASE_URL=database,
                              **{k: os.environ[k] for k in ("KEEL_BROKER_URL", "KEEL_REDIS_URL",
                                                            "KEEL_QUEUE_NAMESPACE")})
    assert not set(result["loaded"]) & set(HEAVY)


WORKER_CHECK = """
import workers.tasks  # what Celery imports (celery_app imports=workers.tasks), with the engine under it
from workers.celery_app import celery_app
assert "keel.run_job" in celery_app.tasks
from keel_cli.main import app as keel
from keel_cli.server import _worker_argv  # `keel worker` execs: celery -A workers.celery_app worker
assert "workers.celery_app" in _worker_argv(1, "INFO")
import ray  # what job actors import on every Ray node running this image
from engine.runtime.jobs import ENTRY_POINTS, entry_point
for method in ENTRY_POINTS:
    entry_point(method)  # each method's module, with torch, transformers and peft under it
"""


def test_worker_image_holds_the_entrypoint_and_no_state_or_secrets():
    files = set(image_files("docker/worker.Dockerfile"))
    assert ENTRYPOINT in files and os.access(ROOT / "docker/worker-entrypoint.sh", os.X_OK)
    leaked = sorted(f for f in files if re.search(r"/(\.git|\.venv|\.keel|__pycache__|tests|bench/out)/|\.pyc$|"
                                                 r"/\.env$|api_key$|\.pem$|\.key$", f))
    assert leaked == []


@pytest.mark.slow  # imports torch and ray
def test_worker_image_starts_from_its_own_files(tmp_path):
    app = materialize("docker/worker.Dockerfile", tmp_path)
    loaded = import_from_copy(app, WORKER_CHECK)["loaded"]
    assert {"torch", "ray", "celery"} <= set(loaded)


def test_dockerignore_keeps_state_secrets_and_caches_out(tmp_path):
    rules = _ignore_rules()
    for path in (".keel/api_key", ".venv/bin/python", ".git/HEAD", ".env", "certs/tls.key", "a/b/key.pem",
                 "api/__pycache__/main.cpython-311.pyc", "core/x.pyc", "bench/out/gemm.json",
                 ".pytest_cache/v", "keel_rlhf.egg-info/PKG-INFO", "tests/conftest.py", "sub/.keel/keel.db"):
        assert _ignored(path, rules), path
    for path in ("api/main.py", "engine/algos/ppo.py", "docker/worker-entrypoint.sh", "README.md",
                 "pyproject.toml", "sdk/keel_client/__init__.py", "bench/gemm.py", "migrations/env.py"):
        assert not _ignored(path, rules), path


def test_the_dockerfiles_install_what_the_compose_file_runs():
    api_docker = (ROOT / "docker/api.Dockerfile").read_text()
    run = " ".join(args for instr, args in instructions("docker/api.Dockerfile") if instr == "RUN")
    assert not re.search(r"\b(torch|ray|transformers|peft|vllm)\b", run)
    assert "--no-deps" in run and "CMD [\"keel\", \"api\"" in api_docker
    worker_docker = (ROOT / "docker/worker.Dockerfile").read_text()
    assert re.search(r"ARG TORCH_INDEX=\S+/whl/cpu", worker_docker) and "${EXTRAS:+[$EXTRAS]}" in worker_docker
    assert f'CMD ["{ENTRYPOINT}"' in worker_docker
