"""Webhooks as the Standard Webhooks spec (standardwebhooks.com) has them, shared by the API (which
checks URLs and makes secrets) and the workers (which sign and send).

- secret: `whsec_` + base64 of 32 random bytes; the HMAC key is the decoded bytes.
- headers: `webhook-id` (the delivery id, the same on every retry), `webhook-timestamp` (Unix seconds
  of this attempt) and `webhook-signature`: `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")).
- URLs go through `core.addresses.check_url` (public addresses only unless `KEEL_WEBHOOK_ALLOW_PRIVATE`),
  at creation and again at each delivery, which then connects to exactly the address it checked (DNS rebinding).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

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
