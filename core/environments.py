"""Which remote environments a job may name (`environment: {"type": "openenv", "url": ...}` on a job, or in
a row's `environment` column): the API checks the job's at creation; the engine checks every one again at
connect time (`engine.environments.openenv`), against the same allow-list, which the worker hands it in the
job request (`JobRequest.environment_allowed_hosts`).

A URL passes when it is absolute http(s) without credentials and either its host is one the deployment
allow-lists (`KEEL_ENV_ALLOWED_HOSTS`: its own environment servers, on private addresses) or it passes the
public-address check every tenant URL goes through (`core.addresses.check_url`), whatever
`KEEL_WEBHOOK_ALLOW_PRIVATE` says: the engine re-checks with this allow-list only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core.addresses import UnsafeUrl, check_url, url_parts
from core.config import settings


def allowed_hosts(hosts: Iterable[str] | None = None) -> tuple[str, ...]:
    """The allow-list, normalised as `urlsplit(url).hostname` spells a host (lower case, no IPv6 brackets)."""
    source = settings.ENV_ALLOWED_HOSTS if hosts is None else hosts
    return tuple(dict.fromkeys(h.strip().strip("[]").lower() for h in source if h.strip()))


def check_environment_url(url: str) -> None:
    """UnsafeUrl (a ValueError) saying why a job may not use `url` as a remote environment."""
    parts, _ = url_parts(url)
    if parts.hostname in allowed_hosts():
        return
    try:
        check_url(url, allow_private=False)  # blocking DNS: call it from a sync handler (the thread pool)
    except UnsafeUrl as exc:
        raise UnsafeUrl(f"{exc} (or a host in the deployment's KEEL_ENV_ALLOWED_HOSTS)") from exc


def environment_url_problem(spec: Any) -> tuple[str, str] | None:
    """For a job's `environment` spec: `(field, reason)` when it names a remote environment whose URL a
    job may not use (`field` relative to the spec, e.g. `url`), else None. Other spec errors are the
    schema's to report."""
    if not isinstance(spec, Mapping) or spec.get("type") != "openenv":
        return None
    url = spec.get("url")
    if not isinstance(url, str):
        return "url", "must be an absolute http:// or https:// URL"
    try:
        check_environment_url(url)
    except UnsafeUrl as exc:
        return "url", str(exc)
    return None
