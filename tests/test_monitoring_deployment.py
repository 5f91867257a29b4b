"""docker-compose.yml's `monitoring` profile and deploy/monitoring/: Prometheus scrapes the API and every
worker where they really serve metrics, Grafana is provisioned with that Prometheus and the Keel
dashboard, and every metric the dashboard plots is one the code exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
MONITORING = ROOT / "deploy" / "monitoring"
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PROFILE = {name: s for name, s in SERVICES.items() if "monitoring" in s.get("profiles", [])}


def _mounts(service: dict) -> dict[str, str]:
    """Bind mounts of files from the repository: {container path: repository path}."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            out[target] = source
    return out


def test_the_profile_holds_prometheus_and_grafana_only_and_nothing_else_needs_them():
    assert set(PROFILE) == {"prometheus", "grafana"}
    for name, service in PROFILE.items():
        assert service["profiles"] == ["monitoring"], name
        _image, _, tag = service["image"].partition(":")
        assert tag and tag != "latest", f"{name}: pin the image version"
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} must listen on the host's loopback only"
        for source in _mounts(service).values():
            assert (ROOT / source).exists(), f"{name} mounts {source}, which is not in the repository"
            assert source.startswith("./deploy/monitoring"), source
    for name, service in SERVICES.items():
        if name not in PROFILE:
            depends = service.get("depends_on", {})
            assert not set(depends) & set(PROFILE), f"{name} must run without the monitoring profile"
    for volume in ("prometheus-data", "grafana-data"):
        assert volume in COMPOSE["volumes"]


def _prometheus_config() -> dict:
    mounts = _mounts(PROFILE["prometheus"])
    config_arg = next(a for a in PROFILE["prometheus"]["command"] if a.startswith("--config.file="))
    path = config_arg.split("=", 1)[1]
    assert path in mounts, "the config Prometheus reads is the one in deploy/monitoring"
    return yaml.safe_load((ROOT / mounts[path]).read_text())


def test_prometheus_scrapes_the_api_and_every_worker_where_they_listen():
    jobs = {job["job_name"]: job for job in _prometheus_config()["scrape_configs"]}
    api = jobs["keel-api"]
    assert api["metrics_path"] == "/metrics"
    api_command = SERVICES["api"]["command"]
    api_port = api_command[api_command.index("--port") + 1]
    assert api["static_configs"][0]["targets"] == [f"api:{api_port}"]

    worker = jobs["keel-worker"]
    env = SERVICES["worker"]["environment"]
    port = int(env["KEEL_WORKER_METRICS_PORT"])
    assert port > 0 and env["KEEL_WORKER_METRICS_HOST"] == "0.0.0.0"  # reachable from the prometheus container
    sd = worker["dns_sd_configs"][0]
    assert sd["names"] == ["worker"] and sd["type"] == "A" and sd["port"] == port  # every scaled worker
    assert "worker" in SERVICES


def test_grafana_is_provisioned_with_that_prometheus_and_the_dashboard():
    mounts = _mounts(PROFILE["grafana"])
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert len(sources) == 1 and sources[0]["type"] == "prometheus"
    assert sources[0]["url"] == "http://prometheus:9090" and "prometheus" in PROFILE
    providers = yaml.safe_load((provisioning / "dashboards" / "keel.yml").read_text())["providers"]
    dashboards_dir = providers[0]["options"]["path"]
    assert dashboards_dir in mounts, "the provider reads the mounted dashboards directory"
    dashboards = sorted((ROOT / mounts[dashboards_dir]).glob("*.json"))
    assert [d.name for d in dashboards] == ["keel.json"]
    dashboard = json.loads(dashboards[0].read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {sources[0]["uid"]}
    assert "GF_SECURITY_ADMIN_PASSWORD" in PROFILE["grafana"]["environment"]


def _exported_names() -> set[str]:
    """Every sample name the API and a worker export, from the collectors themselves."""
    from api import metrics as api_metrics
    from workers import metrics as worker_metrics

    api_metrics.REQUESTS.labels("GET", "/x", "200").inc(0)
    api_metrics.LATENCY.labels("GET", "/x").observe(0)
    worker = worker_metrics.WorkerCollector(lambda: {1}, host="nohost")
    names = set()
    for registry in (api_metrics.REGISTRY, worker_metrics.registry(worker)):
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            names |= {family.name} | {s.name for s in family.samples}  # a family without samples too
    return names


def test_every_dashboard_query_uses_metrics_the_code_exports(database):
    dashboard = json.loads((MONITORING / "grafana" / "dashboards" / "keel.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\b(keel_[a-z_]+)", e)}
    exported = _exported_names()
    assert used and used <= exported, used - exported
    # The stated ones are all on the dashboard: API traffic, streams, jobs, queue and each worker figure.
    for name in ("keel_http_requests_total", "keel_http_request_duration_seconds_bucket", "keel_sse_connections",
                 "keel_jobs", "keel_queue_depth", "keel_worker_jobs_running", "keel_worker_step_seconds",
                 "keel_worker_tokens_per_second", "keel_worker_heartbeat_age_seconds"):
        assert name in used, name
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"]
