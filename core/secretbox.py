"""Encryption at rest for secrets Keel must use later (webhook signing secrets, project secrets such
as `WANDB_API_KEY`): Fernet (AES-128-CBC + HMAC-SHA256) under a key derived from `KEEL_SECRET_KEY`.
A database dump alone reveals none of them; changing `KEEL_SECRET_KEY` makes them unreadable (set them again)."""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken

from core.config import settings


@lru_cache(maxsize=4)
def _fernet(secret_key: str) -> Fernet:
    # A key of its own, so the API-key HMACs and this encryption never share key material directly.
    digest = hashlib.sha256(b"keel-secretbox-v1:" + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(plaintext: str) -> str:
    return _fernet(settings.SECRET_KEY).encrypt(plaintext.encode()).decode()


def open_sealed(token: str) -> str:
    """The plaintext; ValueError when the deployment secret changed since it was sealed."""
    try:
        return _fernet(settings.SECRET_KEY).decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise ValueError("cannot decrypt: KEEL_SECRET_KEY changed since this secret was stored") from exc
