"""Webhooks as the Standard Webhooks spec (standardwebhooks.com) has them, shared by the API (which
checks URLs and makes secrets) and the workers (which sign and send).

- secret: `whsec_` + base64 of 32 random bytes; the HMAC key is the decoded bytes.
- headers: `webhook-id` (the delivery id, the same on every retry), `webhook-timestamp` (Unix seconds
  of this attempt) and `webhook-signature`: `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")).
- URLs that resolve to a non-public address are refused unless `KEEL_WEBHOOK_ALLOW_PRIVATE`, at creation
  and again at each delivery, which then connects to exactly the address it checked (DNS rebinding).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import socket
from typing import Any
from urllib.parse import urlsplit

from core.config import settings

SECRET_PREFIX = "whsec_"
EVENT_TYPES = ("job.succeeded", "job.failed", "job.cancelled", "job.warning", "job.checkpoint", "job.paused")


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header value."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def webhook_type(event_type: str, data: dict[str, Any]) -> str | None:
    """The webhook event a job event becomes (None: not one webhooks carry)."""
    if event_type == "job.done":
        status = data.get("status")
        return f"job.{status}" if status in ("succeeded", "failed", "cancelled") else None
    if event_type in ("job.warning", "job.checkpoint"):
        return event_type
    if event_type == "job.status" and data.get("status") == "paused":  # the pause is complete
        return "job.paused"
    return None


class UnsafeUrl(ValueError):
    """The URL is malformed, does not resolve, or resolves to an address webhooks may not reach."""


def check_url(url: str) -> tuple[str, str, int]:
    """The URL's (host, first allowed address, port); UnsafeUrl when it may not be used."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeUrl("must be an absolute http:// or https:// URL")
    if parts.username or parts.password:
        raise UnsafeUrl("must not carry credentials")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UnsafeUrl("has an invalid port") from exc
    host = parts.hostname
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnsafeUrl(f"host {host!r} does not resolve") from exc
    addresses = [info[4][0] for info in infos]
    if not addresses:
        raise UnsafeUrl(f"host {host!r} does not resolve")
    if not settings.WEBHOOK_ALLOW_PRIVATE:
        for address in addresses:  # every address: a resolver may hand out any of them
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            if getattr(ip, "ipv4_mapped", None) is not None:
                ip = ip.ipv4_mapped
            if not ip.is_global or ip.is_multicast:
                raise UnsafeUrl(f"host {host!r} resolves to a non-public address ({ip}); "
                                "the deployment allows public addresses only")
    return host, addresses[0], port
