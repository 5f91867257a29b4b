"""Issue 27, item 7: the API reads at most `KEEL_MAX_HEADER_BYTES` of request line and headers (a 200 MiB
header had been buffered whole and answered 200), on a real uvicorn with the launcher's settings."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
from serving import serve

from core.config import settings
from keel_cli.server import uvicorn_options

MB = 1024 * 1024


def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def _send_big_header(base: str, size: int) -> bytes:
    """What the server answers to a GET whose one header is `size` bytes (b"" when it just closed)."""
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-send
        try:
            return sock.recv(4096)
        except ConnectionResetError:
            return b""


def test_a_huge_header_is_refused_without_the_server_growing(app):
    assert settings.MAX_HEADER_BYTES < MB
    with serve(app, lifespan="off", **uvicorn_options(settings)) as base:
        assert httpx.get(f"{base}/healthz").status_code == 200  # warm
        before = _rss()
        answer = _send_big_header(base, MB)
        assert answer == b"" or answer.split(b" ", 2)[1] in (b"400", b"431"), answer[:200]
        assert _rss() - before < 16 * MB
        assert httpx.get(f"{base}/healthz", headers={"X-Normal": "a" * 4096}).status_code == 200
