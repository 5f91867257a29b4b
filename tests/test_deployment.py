"""The deployment files start what they claim to (Docker and Kubernetes cannot run here).

- Each image: the files its COPY lines select (through .dockerignore) are copied, exactly, into a temporary
  /app, and its entry point is imported from that copy alone in a subprocess; the API image with torch and
  ray made unimportable, and every third-party module it loads must come from its `pip install` line.
- docker-compose.yml: settings are real Settings fields, every Ray node has explicit resources, volumes,
  Redis AOF, shutdown grace, the GPU variant.
- deploy/k8s: every manifest passes the Kubernetes JSON schema (kubernetes-validate, strict), the RayCluster
  passes deploy/k8s/schemas (written from KubeRay's CRD) and its pod templates the PodTemplateSpec schema.
- docker/worker-entrypoint.sh really joins a Ray cluster as a node and stops cleanly (slow).
"""

from __future__ import annotations

import copy
import json
import os
import posixpath
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from importlib import metadata
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.common import free_port
from core.config import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
K8S = [doc for path in sorted((ROOT / "deploy/k8s").glob("*.yaml"))
       for doc in yaml.safe_load_all(path.read_text()) if doc]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
SETTINGS = set(Settings.model_fields)
RAY_ENV = {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"}
"""The non-KEEL variables a Keel container may set: Ray's own."""
HEAVY = ("torch", "ray", "transformers", "peft", "vllm", "safetensors", "tokenizers")
PROJECT = ("api", "core", "workers", "engine", "keel_cli", "keel_client", "bench")
ENTRYPOINT = "/app/docker/worker-entrypoint.sh"


# --- the images: what the Dockerfiles copy ----------------------------------------------------------

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


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / dockerfile).read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines
            if line and not line.startswith("#")]


def image_files(dockerfile: str) -> dict[str, str]:
    """{path in the image: path in the repo} for every file the Dockerfile's COPY lines bring in."""
    context, workdir, files = context_files(), "/", {}
    for instruction, args in _instructions(dockerfile):
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
    for instruction, args in _instructions(dockerfile):
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
    run = " ".join(args for instr, args in _instructions("docker/api.Dockerfile") if instr == "RUN")
    assert not re.search(r"\b(torch|ray|transformers|peft|vllm)\b", run)
    assert "--no-deps" in run and "CMD [\"keel\", \"api\"" in api_docker
    worker_docker = (ROOT / "docker/worker.Dockerfile").read_text()
    assert re.search(r"ARG TORCH_INDEX=\S+/whl/cpu", worker_docker) and "${EXTRAS:+[$EXTRAS]}" in worker_docker
    assert f'CMD ["{ENTRYPOINT}"' in worker_docker


# --- docker-compose.yml --------------------------------------------------------------------------

def _environment(name: str) -> dict[str, str]:
    return {k: str(v) for k, v in SERVICES[name].get("environment", {}).items()}


def _ray_start(name: str) -> tuple[list[str], list[str] | None]:
    """(the options of the service's `ray start`, the command run beside it or None)."""
    service = SERVICES[name]
    if service.get("entrypoint") == [ENTRYPOINT]:
        args = service["command"]
        cut = args.index("--")
        return args[:cut], args[cut + 1:]
    assert service["command"][:2] == ["ray", "start"], name
    return service["command"][2:], None


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}":
            return args[i + 1]
    return None


RAY_NODES = [name for name, s in SERVICES.items() if s.get("image", "").startswith("keel-worker")]


def _seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert parts and duration, duration
    return sum(int(v) * units[u] for v, u in zip(parts.groups(), "hms") if v)


def test_compose_services_start_in_order_with_health_checks():
    assert {"postgres", "redis", "migrate", "api", "worker", "ray-head", "ray-worker"} <= set(SERVICES)
    for name in ("postgres", "redis", "api", "ray-head"):
        assert "healthcheck" in SERVICES[name], name
    assert SERVICES["migrate"]["command"] == ["keel", "migrate"] and SERVICES["migrate"]["restart"] == "no"
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        assert SERVICES[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    for name in RAY_NODES:
        if name != "ray-head":
            assert SERVICES[name]["depends_on"]["ray-head"]["condition"] == "service_healthy", name
    assert SERVICES["api"]["image"] == "keel-api"
    assert SERVICES["migrate"]["build"]["dockerfile"] == "docker/api.Dockerfile"
    assert SERVICES["worker"]["build"]["dockerfile"] == "docker/worker.Dockerfile"
    assert {"worker", "ray-head", "ray-worker"} <= set(RAY_NODES)


def test_compose_builds_its_own_images_and_never_pulls_them():
    built = {s["image"] for s in SERVICES.values() if "build" in s}
    assert {"keel-api", "keel-worker"} <= built
    for name, service in SERVICES.items():
        if service.get("image") in built and "build" not in service:
            assert service.get("pull_policy") == "never", name  # not a registry's image of that name


def test_compose_environment_names_real_settings_and_points_at_the_services():
    keel_env = _environment("api")
    assert _environment("migrate") == keel_env
    for name in ["api", "migrate", *RAY_NODES]:
        env = _environment(name)
        for key in env:
            known = key.startswith("KEEL_") and key.removeprefix("KEEL_") in SETTINGS
            assert known or key in RAY_ENV, (name, key)
    worker_env = _environment("worker")
    assert {k: v for k, v in worker_env.items() if k.startswith("KEEL_")} == keel_env
    assert "@postgres:5432" in keel_env["KEEL_DATABASE_URL"]
    assert keel_env["KEEL_BROKER_URL"].startswith("redis://redis:6379")
    assert keel_env["KEEL_REDIS_URL"].startswith("redis://redis:6379")
    assert keel_env["KEEL_ENV"] == "production" and "KEEL_SECRET_KEY" in keel_env
    # The Ray address is the head's GCS port, and every Ray process holds the same token.
    head_args, _ = _ray_start("ray-head")
    assert keel_env["KEEL_RAY_ADDRESS"] == f"ray-head:{_option(head_args, 'port')}"
    for name in RAY_NODES:
        env = _environment(name)
        assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN"] == worker_env["RAY_AUTH_TOKEN"], name


def test_every_ray_node_has_explicit_resources_and_the_worker_is_one():
    for name in RAY_NODES:
        args, beside = _ray_start(name)
        assert int(_option(args, "num-cpus")) >= 0 and int(_option(args, "num-gpus")) >= 0, name
        assert "--block" in args or beside is not None, name
        if name != "ray-head":
            address = _option(args, "address")
            assert address in (None, _environment("worker")["KEEL_RAY_ADDRESS"]), name
            assert address is not None or beside is not None, name  # the entrypoint adds KEEL_RAY_ADDRESS
        assert SERVICES[name].get("shm_size"), name
        assert SERVICES[name].get("init") is True, name
    # The head is only a Ray node: no CPUs for job actors, no Keel process.
    head_args, _ = _ray_start("ray-head")
    assert "--head" in head_args and _option(head_args, "num-cpus") == "0"
    assert "keel" not in SERVICES["ray-head"]["command"]
    # The Celery worker runs beside its own Ray node, which the entrypoint joins to KEEL_RAY_ADDRESS.
    _, beside = _ray_start("worker")
    assert beside[:2] == ["keel", "worker"]
    script = (ROOT / "docker/worker-entrypoint.sh").read_text()
    assert 'ray start --address="$KEEL_RAY_ADDRESS"' in script and "--block" in script


def test_models_and_artifacts_are_mounted_where_the_settings_point():
    keel_env = _environment("api")
    roots = keel_env["KEEL_MODEL_ROOTS"].split(",")
    for name in ["api", *RAY_NODES]:
        mounts = {}
        for volume in SERVICES[name]["volumes"]:  # SOURCE:TARGET[:MODE]; SOURCE may hold ${VAR:-default}
            source, target, mode = re.fullmatch(r"(.+):(/[^:]*)(?::(ro|rw))?", volume).groups()
            mounts[target] = (source, mode)
        for root in roots:
            assert mounts[root][1] == "ro", (name, root)
        assert mounts[keel_env["KEEL_STORAGE_URL"]][0] == "artifacts", name
    assert "artifacts" in COMPOSE["volumes"]


def test_redis_keeps_queued_jobs_across_restarts():
    command = SERVICES["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(v.split(":")[1] == "/data" and v.split(":")[0] in COMPOSE["volumes"]
               for v in SERVICES["redis"]["volumes"])


def test_worker_gets_time_for_celery_warm_shutdown():
    # Docker's default is 10 s; a warm shutdown lets the running job finish and persist.
    assert _seconds(SERVICES["worker"]["stop_grace_period"]) >= 300
    for name in RAY_NODES:
        assert _seconds(SERVICES[name].get("stop_grace_period", "10s")) >= 30, name  # Ray drains up to 30 s


def test_gpu_variant_builds_cuda_torch_with_the_gpu_extra_and_reserves_the_gpus():
    gpu = [name for name, s in SERVICES.items() if "gpu" in s.get("profiles", [])]
    assert gpu, "no service in the `gpu` profile"
    for name in gpu:
        service = SERVICES[name]
        build = service["build"]
        assert build["dockerfile"] == "docker/worker.Dockerfile"
        assert re.search(r"/whl/cu\d+$", build["args"]["TORCH_INDEX"])  # CUDA torch
        assert build["args"]["EXTRAS"] == "gpu" and "gpu" in PYPROJECT["project"]["optional-dependencies"]
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        args, _ = _ray_start(name)
        assert int(_option(args, "num-gpus")) == device["count"] >= 1
        assert service["image"] != SERVICES["worker"]["image"]
    for name in set(SERVICES) - set(gpu):
        assert "devices" not in str(SERVICES[name].get("deploy", {})), name


# --- Kubernetes ----------------------------------------------------------------------------------

K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
RAYCLUSTER_SCHEMA = json.loads((ROOT / "deploy/k8s/schemas/raycluster-ray.io-v1.json").read_text())


def _by_kind(kind: str) -> list[dict]:
    return [doc for doc in K8S if doc["kind"] == kind]


def _named(kind: str, name: str) -> dict:
    (doc,) = [d for d in _by_kind(kind) if d["metadata"]["name"] == name]
    return doc


def _validate_k8s(doc: dict) -> None:
    if doc["kind"] == "RayCluster":
        jsonschema.Draft202012Validator(RAYCLUSTER_SCHEMA).validate(doc)
        spec = doc["spec"]
        groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
        for template in [g["template"] for g in groups]:
            _validate_k8s({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                           "template": template})
        return
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


def test_manifests_pass_the_kubernetes_and_kuberay_schemas():
    kinds = {doc["kind"] for doc in K8S}
    assert {"RayCluster", "Deployment", "Service", "Job", "ConfigMap", "Secret", "PersistentVolumeClaim"} <= kinds
    jsonschema.Draft202012Validator.check_schema(RAYCLUSTER_SCHEMA)
    for doc in K8S:
        _validate_k8s(doc)


@pytest.mark.parametrize("break_it", [
    lambda d: d["spec"].__setitem__("workerGroupSpec", d["spec"].pop("workerGroupSpecs")),
    lambda d: d["spec"]["workerGroupSpecs"][0]["rayStartParams"].__setitem__("num-cpus", 8),
    lambda d: d["spec"]["workerGroupSpecs"][0].pop("maxReplicas"),
    lambda d: d["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].__setitem__("volumeMount", []),
], ids=["misspelt-field", "int-start-param", "missing-required", "bad-pod-template"])
def test_the_schemas_reject_a_broken_raycluster(break_it):
    broken = copy.deepcopy(_by_kind("RayCluster")[0])
    break_it(broken)
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        _validate_k8s(broken)


def test_the_kubernetes_schema_rejects_a_broken_deployment():
    broken = copy.deepcopy(_named("Deployment", "keel-worker"))
    broken["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate_k8s(broken)


def _pod_specs() -> dict[str, dict]:
    """{name: pod spec} of every workload: Deployments, the Job, and the RayCluster's groups."""
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"]
            for d in K8S if d["kind"] in ("Deployment", "Job")}
    (rc,) = _by_kind("RayCluster")
    pods["ray-head"] = rc["spec"]["headGroupSpec"]["template"]["spec"]
    pods.update({f"ray-{g['groupName']}": g["template"]["spec"] for g in rc["spec"]["workerGroupSpecs"]})
    return pods


def test_k8s_settings_are_real_and_point_at_the_ray_head_service():
    settings = dict(_named("ConfigMap", "keel-settings")["data"])
    secret = _named("Secret", "keel-secrets")["stringData"]
    assert not set(settings) & set(secret)
    for key in {**settings, **secret}:
        assert key.startswith("KEEL_") and key.removeprefix("KEEL_") in SETTINGS, key
    assert settings["KEEL_ENV"] == "production" and "KEEL_SECRET_KEY" in secret and "KEEL_DATABASE_URL" in secret
    (rc,) = _by_kind("RayCluster")
    head_ports = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]
    gcs_port = next(p["containerPort"] for p in head_ports if p["name"] == "gcs")
    assert settings["KEEL_RAY_ADDRESS"] == f"{rc['metadata']['name']}-head-svc:{gcs_port}"  # KubeRay's naming
    for name in ("keel-api", "keel-worker", "keel-migrate"):
        (container,) = _pod_specs()[name]["containers"]
        refs = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
        assert refs == {"keel-settings", "keel-secrets"}, name


def test_k8s_ray_nodes_have_explicit_resources_and_share_the_token():
    (rc,) = _by_kind("RayCluster")
    spec = rc["spec"]
    ray_version = re.search(r"ARG RAY_VERSION=(\S+)", (ROOT / "docker/worker.Dockerfile").read_text())[1]
    assert spec["rayVersion"] == ray_version
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0" and head["rayStartParams"]["num-gpus"] == "0"
    assert head["template"]["spec"]["containers"][0]["image"] == f"keel-worker:{VERSION}"
    for group in spec["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        limits = container["resources"]["limits"]
        assert group["rayStartParams"]["num-cpus"] == str(limits["cpu"]), group["groupName"]
        assert group["rayStartParams"]["num-gpus"] == str(limits.get("nvidia.com/gpu", 0)), group["groupName"]
        gpus = int(group["rayStartParams"]["num-gpus"])
        assert container["image"] == f"keel-worker{'-gpu' if gpus else ''}:{VERSION}", group["groupName"]
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    assert any(int(g["rayStartParams"]["num-gpus"]) for g in spec["workerGroupSpecs"]), "no GPU group"
    # The Celery worker pods: Ray nodes started by the entrypoint, with the cluster's token.
    worker = _pod_specs()["keel-worker"]
    (container,) = worker["containers"]
    assert container["command"] == [ENTRYPOINT] and container["image"] == f"keel-worker:{VERSION}"
    args = container["args"]
    ray_args, beside = args[:args.index("--")], args[args.index("--") + 1:]
    assert beside[:2] == ["keel", "worker"]
    assert _option(ray_args, "num-cpus") == str(container["resources"]["limits"]["cpu"])
    assert _option(ray_args, "num-gpus") == "0"
    env = {e["name"]: e for e in container["env"]}
    assert spec["authOptions"]["mode"] == "token" and env["RAY_AUTH_MODE"]["value"] == "token"
    token = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": spec["authOptions"]["secretName"], "key": "auth_token"}  # KubeRay's key
    assert "auth_token" in _named("Secret", token["name"])["stringData"]
    assert worker["terminationGracePeriodSeconds"] >= 300


def test_k8s_models_are_mounted_read_only_everywhere_jobs_look_for_them():
    roots = _named("ConfigMap", "keel-settings")["data"]["KEEL_MODEL_ROOTS"].split(",")
    storage = _named("ConfigMap", "keel-settings")["data"]["KEEL_STORAGE_URL"]
    claims = {d["metadata"]["name"]: d["spec"] for d in _by_kind("PersistentVolumeClaim")}
    for name, pod in _pod_specs().items():
        if name == "keel-migrate":
            continue
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        for root in roots:
            claim = volumes[mounts[root]["name"]]["persistentVolumeClaim"]["claimName"]
            assert mounts[root].get("readOnly") is True and "ReadOnlyMany" in claims[claim]["accessModes"], name
        claim = volumes[mounts[storage]["name"]]["persistentVolumeClaim"]["claimName"]
        assert "ReadWriteMany" in claims[claim]["accessModes"], name


def test_k8s_api_and_migrate_run_the_api_image():
    api = _named("Deployment", "keel-api")
    (container,) = api["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"keel-api:{VERSION}" and container["command"][:2] == ["keel", "api"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    service = _named("Service", "keel-api")
    assert service["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in container["ports"]}
    (migrate,) = _named("Job", "keel-migrate")["spec"]["template"]["spec"]["containers"]
    assert migrate["image"] == f"keel-api:{VERSION}" and migrate["command"] == ["keel", "migrate"]


# --- the worker entrypoint, for real ------------------------------------------------------------

def _dockerfile_env(dockerfile: str) -> dict[str, str]:
    env = {}
    for instruction, args in _instructions(dockerfile):
        if instruction == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
    return env


DRIVER = """
import os, signal, sys, time, ray
ray.init(address=os.environ["KEEL_RAY_ADDRESS"], log_to_driver=False)
def cpus():
    return ray.cluster_resources().get("CPU", 0)
print("JOINED", cpus(), sorted(n["NodeName"] for n in ray.nodes() if n["Alive"]), flush=True)
def stop(*_):  # the Ray node must still be up while the command shuts down
    print("STOPPING", cpus(), flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(600)
"""


@pytest.mark.slow
def test_worker_entrypoint_joins_the_cluster_as_a_ray_node_and_stops_cleanly(tmp_path):
    """A loopback Ray head, then the entrypoint with the image's environment: its node joins with the
    CPUs it was given, the command runs after it, and SIGTERM stops the command first, then the node."""
    port, short = free_port(), Path(tempfile.mkdtemp(prefix="kd", dir="/tmp"))  # Ray's sockets: <108 bytes
    ray_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), "RAY_USAGE_STATS_ENABLED": "0"}
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "KEEL_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base['PATH']}"
    head_log = (tmp_path / "head.log").open("w")
    head = subprocess.Popen(["ray", "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=0", "--num-gpus=0", "--include-dashboard=false",
                             f"--temp-dir={short / 'head'}", "--block"],
                            env={**base, **ray_env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
                            stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    node_log = tmp_path / "node.log"
    node = None
    try:
        head_text = (tmp_path / "head.log").read_text
        _wait_for(lambda: "Ray runtime started" in head_text(), 60, head, tmp_path / "head.log")
        # Ray rewrites 127.0.0.1 in an address into the host's public IP; a name for loopback keeps it local.
        env = {**base, **_dockerfile_env("docker/worker.Dockerfile"), **ray_env,
               "KEEL_RAY_ADDRESS": f"{_loopback_alias()}:{port}", "RAY_NODE_NAME": "keel-worker-test"}
        node = subprocess.Popen([str(ROOT / "docker/worker-entrypoint.sh"), "--num-cpus=1", "--num-gpus=0",
                                 "--node-ip-address=127.0.0.2", f"--temp-dir={short / 'node'}", "--",
                                 sys.executable, "-c", DRIVER],
                                env=env, stdout=node_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        _wait_for(lambda: re.search(r"^JOINED ", node_log.read_text(), re.MULTILINE), 180, node, node_log)
        joined = next(line for line in node_log.read_text().splitlines() if line.startswith("JOINED"))
        assert joined.startswith("JOINED 1.0") and "keel-worker-test" in joined, joined
        node.send_signal(signal.SIGTERM)  # only the script: as Docker does with PID 1
        assert node.wait(timeout=90) == 0, node_log.read_text()[-3000:]
        log = node_log.read_text()
        # The command stopped while the node was still up...
        assert re.search(r"^STOPPING 1\.0", log, re.MULTILINE), log[-3000:]
        alive = _alive_nodes(env)  # ...then the node left the cluster; the head is still up
        assert len(alive) == 1 and "keel-worker-test" not in alive, log[-3000:]
    finally:
        for proc in (node, head):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        head_log.close()
        shutil.rmtree(short, ignore_errors=True)


def test_worker_entrypoint_refuses_a_node_without_explicit_cpus(tmp_path):
    out = subprocess.run([str(ROOT / "docker/worker-entrypoint.sh"), "--num-gpus=0", "--", "true"],
                         env={"PATH": os.environ["PATH"], "KEEL_RAY_ADDRESS": "ray-head:6379"},
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2 and "--num-cpus is required" in out.stderr


def _loopback_alias() -> str:
    """A host name for 127.0.0.1 other than `localhost` (which Ray rewrites), e.g. this host's name."""
    import socket

    for name in (socket.gethostname(), "localhost.localdomain", "ip6-localhost"):
        try:
            if socket.gethostbyname(name) == "127.0.0.1":
                return name
        except OSError:
            continue
    pytest.skip("no host name resolves to 127.0.0.1 besides localhost")


def _wait_for(condition, timeout: float, proc, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"timed out (exit code {proc.poll()}):\n{log.read_text()[-4000:]}")


def _alive_nodes(env: dict) -> list[str]:
    code = ("import json, os, ray; ray.init(address=os.environ['KEEL_RAY_ADDRESS'], log_to_driver=False, "
            "logging_level='ERROR'); print(json.dumps([n['NodeName'] for n in ray.nodes() if n['Alive']]))")
    alive: list[str] = []
    for _ in range(10):  # the head marks a node dead a moment after it drained
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=120, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        alive = json.loads(out.stdout.strip().splitlines()[-1])
        if "keel-worker-test" not in alive:
            break
        time.sleep(1)
    return alive
