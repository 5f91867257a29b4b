"""deploy/k8s: every manifest passes the Kubernetes JSON schema (kubernetes-validate, strict), the
RayCluster passes deploy/k8s/schemas (written from KubeRay's CRD) and its pod templates the
PodTemplateSpec schema; settings, resources, mounts and images agree with the API and workers; inference
(serve.yaml) runs `keel serve` on the jobs' RayCluster and the API reaches its ingress."""

from __future__ import annotations

import copy
import json
import re
import textwrap
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import typer.main
import yaml
from deployment_files import ENTRYPOINT, K8S, RAY_ENV, ROOT, SETTINGS, VERSION, option

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


def _pod_templates() -> dict[str, dict]:
    """{name: pod template} of every workload: Deployments, the Job, and the RayCluster's groups."""
    pods = {d["metadata"]["name"]: d["spec"]["template"] for d in K8S if d["kind"] in ("Deployment", "Job")}
    (rc,) = _by_kind("RayCluster")
    pods["ray-head"] = rc["spec"]["headGroupSpec"]["template"]
    pods.update({f"ray-{g['groupName']}": g["template"] for g in rc["spec"]["workerGroupSpecs"]})
    return pods


def _pod_specs() -> dict[str, dict]:
    return {name: template["spec"] for name, template in _pod_templates().items()}


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
    assert option(ray_args, "num-cpus") == str(container["resources"]["limits"]["cpu"])
    assert option(ray_args, "num-gpus") == "0"
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


def _serve_container() -> tuple[dict, list[str], list[str], dict]:
    """keel-serve's container, the `ray start` options before `--`, the command after it, and that
    command's options as `keel serve` parses them."""
    from keel_cli.main import app

    (container,) = _pod_specs()["keel-serve"]["containers"]
    args = container["args"]
    ray_args, command = args[:args.index("--")], args[args.index("--") + 1:]
    assert command[:2] == ["keel", "serve"]
    params = typer.main.get_command(app).commands["serve"].make_context("serve", command[2:]).params
    return container, ray_args, command, params


def test_k8s_serve_runs_keel_serve_on_the_jobs_ray_cluster():
    container, ray_args, _, params = _serve_container()
    assert container["command"] == [ENTRYPOINT] and container["image"] == f"keel-worker:{VERSION}"
    # A Ray node that offers nothing: replicas and job actors go to the worker groups.
    assert option(ray_args, "num-cpus") == "0" and option(ray_args, "num-gpus") == "0"
    assert params["host"] == "0.0.0.0"  # the proxies must accept the API's connections from other pods
    # The same settings as the workers, hence the same KEEL_RAY_ADDRESS: one cluster, so admission
    # (the free resources Ray reports) counts the model replicas.
    refs = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
    assert refs == {"keel-settings", "keel-secrets"}
    env = {e["name"]: e for e in container["env"]}
    entrypoint = (ROOT / ENTRYPOINT.removeprefix("/app/")).read_text()
    for name in env:
        if name.startswith("KEEL_"):
            assert name.removeprefix("KEEL_") in SETTINGS, name
        else:
            assert name in RAY_ENV or name in entrypoint, name
    (rc,) = _by_kind("RayCluster")
    token = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": rc["spec"]["authOptions"]["secretName"], "key": "auth_token"}
    assert env["RAY_AUTH_MODE"]["value"] == rc["spec"]["authOptions"]["mode"]
    assert _named("Deployment", "keel-serve")["spec"]["replicas"] == 1


def test_k8s_api_reaches_the_serve_ingress_on_the_ray_head():
    settings = _named("ConfigMap", "keel-settings")["data"]
    url = urlsplit(settings["KEEL_SERVE_URL"])
    service = _named("Service", "keel-ingress")
    (port,) = service["spec"]["ports"]
    assert url.scheme == "http" and url.hostname == service["metadata"]["name"] and url.port == port["port"]
    # The API reads KEEL_SERVE_URL from the ConfigMap, and nothing overrides it.
    (api,) = _pod_specs()["keel-api"]["containers"]
    assert "keel-settings" in {next(iter(ref.values()))["name"] for ref in api["envFrom"]}
    assert "KEEL_SERVE_URL" not in {e["name"] for e in api.get("env", [])}
    # Only the head always runs a Serve proxy: the Service selects it and nothing else.
    pods = _pod_templates()
    selector = service["spec"]["selector"].items()
    assert [name for name, pod in pods.items() if selector <= pod["metadata"]["labels"].items()] == ["ray-head"]
    # The proxies listen on `keel serve`'s port (KEEL_SERVE_URL's unless --port says otherwise), which the
    # head's named container port and so the Service's target must be.
    *_, params = _serve_container()
    listen = params["port"] or url.port
    (head,) = pods["ray-head"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in head["ports"]}[port["targetPort"]] == listen


@pytest.mark.slow  # imports ray
def test_the_documented_serve_config_builds_the_ingress_application():
    """docs/inference.md's serveConfigV2 (a RayService, or `serve deploy`) names a real application
    builder, and its options are the engine's."""
    import importlib

    from ray import serve
    from ray.serve.schema import ServeDeploySchema

    text = (ROOT / "docs/inference.md").read_text()
    block = re.search(r"```yaml\n( *serveConfigV2:.*?)```", text, re.DOTALL)[1]
    fragment = yaml.safe_load(textwrap.dedent(block))
    config = yaml.safe_load(fragment["serveConfigV2"])
    ServeDeploySchema.model_validate(config)
    (application,) = config["applications"]
    module, attribute = application["import_path"].split(":")
    build = getattr(importlib.import_module(module), attribute)
    deployment = importlib.import_module("engine.serving.deployment")
    assert application["name"] == deployment.INGRESS_APP
    assert set(application["args"]["options"]) <= set(deployment.DEFAULTS)
    assert isinstance(build(application["args"]), serve.Application)
    assert application["route_prefix"] == "/"
    assert config["http_options"]["port"] == urlsplit(_named("ConfigMap", "keel-settings")["data"]["KEEL_SERVE_URL"]).port
