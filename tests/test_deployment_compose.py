"""docker-compose.yml starts what it claims to: settings are real Settings fields, every Ray node has
explicit resources, volumes, Redis AOF, shutdown grace, the GPU variant, `keel serve` and the API's way to it."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from deployment_files import COMPOSE, ENTRYPOINT, PYPROJECT, RAY_ENV, ROOT, SERVICES, SETTINGS, option


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
    assert keel_env["KEEL_RAY_ADDRESS"] == f"ray-head:{option(head_args, 'port')}"
    for name in RAY_NODES:
        env = _environment(name)
        assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN"] == worker_env["RAY_AUTH_TOKEN"], name


def test_every_ray_node_has_explicit_resources_and_the_worker_is_one():
    for name in RAY_NODES:
        args, beside = _ray_start(name)
        assert int(option(args, "num-cpus")) >= 0 and int(option(args, "num-gpus")) >= 0, name
        assert "--block" in args or beside is not None, name
        if name != "ray-head":
            address = option(args, "address")
            assert address in (None, _environment("worker")["KEEL_RAY_ADDRESS"]), name
            assert address is not None or beside is not None, name  # the entrypoint adds KEEL_RAY_ADDRESS
        assert SERVICES[name].get("shm_size"), name
        assert SERVICES[name].get("init") is True, name
    # The head is only a Ray node: no CPUs for job actors, no Keel process.
    head_args, _ = _ray_start("ray-head")
    assert "--head" in head_args and option(head_args, "num-cpus") == "0"
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
        assert int(option(args, "num-gpus")) == device["count"] >= 1
        assert service["image"] != SERVICES["worker"]["image"]
    for name in set(SERVICES) - set(gpu):
        assert "devices" not in str(SERVICES[name].get("deploy", {})), name


def test_compose_serve_joins_the_jobs_cluster_and_the_api_reaches_the_heads_proxy():
    ray_args, command = _ray_start("serve")
    assert command[:2] == ["keel", "serve"] and option(command, "host") == "0.0.0.0"
    assert option(ray_args, "num-cpus") == "0" and option(ray_args, "num-gpus") == "0"
    assert _environment("serve")["KEEL_RAY_ADDRESS"] == _environment("worker")["KEEL_RAY_ADDRESS"]
    # Serve keeps a proxy on the head whatever the replicas do, on `keel serve`'s port.
    url = urlsplit(_environment("api")["KEEL_SERVE_URL"])
    heads = [name for name in RAY_NODES if "--head" in _ray_start(name)[0]]
    assert [url.hostname] == heads and int(option(command, "port") or url.port) == url.port
    assert _environment("serve")["KEEL_SERVE_URL"] == _environment("api")["KEEL_SERVE_URL"]
