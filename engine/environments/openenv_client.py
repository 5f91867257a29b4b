"""The wire side of `engine.environments.openenv`: sessions with an OpenEnv server, the address check at
connect time, and the worker's pool of sessions and HTTP clients.

A small client of OpenEnv's documented routes, not `openenv-core`'s own `EnvClient`: that one is async,
and the package pulls in Gradio, FastMCP and container providers a training worker has no use for. What it
speaks (openenv-core 0.3, `openenv.core.env_server.http_server`):
- WebSocket `/ws`: one environment instance per connection; the client sends `{"type": "reset", "data":
  {...}}` / `{"type": "step", "data": <action>}` and gets `{"type": "observation", "data": {"observation":
  {...}, "reward": r, "done": d}}` or `{"type": "error", "data": {"message", "code"}}`. A connection
  outlives episodes (a new `reset` starts the next one), so the pool keeps them.
- HTTP `POST /reset` (the reset arguments as the body), `POST /step` (`{"action": {...}}`), same answer
  without the envelope; `GET /schema` (`{"action": <JSON schema>, ...}`). openenv-core's own servers make
  a fresh environment per HTTP call, so HTTP suits single-turn environments or servers that keep state.

Every connection goes to the address the check approved (DNS rebinding cannot redirect it); proxies from
the environment are not used.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection, connect

from engine.environments.base import EnvironmentFailure

MAX_IDLE_SESSIONS = 32
"""Idle sessions kept per server (and allow-list); more are closed when their episode ends."""
IDLE_S = 60.0
"""An idle session older than this is closed rather than reused (the server may have reaped it)."""
MAX_CLIENTS = 16
"""HTTP clients kept (one per server); the least recently used beyond is closed."""
MAX_MESSAGE_BYTES = 16 * 2**20
_RETRYABLE_WS_CODES = frozenset({"CAPACITY_REACHED", "SESSION_ERROR", "FACTORY_ERROR"})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

T = TypeVar("T")


class Retryable(EnvironmentFailure):
    """A failure a repeated idempotent call may not meet (the server unreachable, slow, busy)."""


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return ip.is_global and not ip.is_multicast


def non_public(address: str) -> bool:
    """Whether an address (as getaddrinfo gives it) or the IPv4 address it carries is not public."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    found = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        found += [a for a in (ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())) if a is not None]
        if ip in _NAT64:
            found.append(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF))
    return not all(_public(a) for a in found)


class Server:
    """One OpenEnv server (its base URL), as this job may reach it."""

    def __init__(self, url: str, allowed_hosts: tuple[str, ...], timeout_s: float) -> None:
        parts = urlsplit(url)
        self.url = url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path.rstrip("/")
        self.allowed = self.host in {h.strip().strip("[]").lower() for h in allowed_hosts}
        self.key = (self.url, self.allowed)
        self.timeout_s = timeout_s

    def addresses(self) -> list[str]:
        """The addresses to connect to: any the host resolves to when allow-listed, else only public ones."""
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise Retryable(f"host {self.host!r} does not resolve") from exc
        addresses = [info[4][0] for info in infos]
        if not self.allowed:
            for address in addresses:
                if non_public(address):
                    raise EnvironmentFailure(
                        f"host {self.host!r} resolves to a non-public address ({address}); the deployment "
                        "allows public addresses only, or hosts in KEEL_ENV_ALLOWED_HOSTS")
        return list(dict.fromkeys(addresses))

    def open_session(self) -> ClientConnection:
        """A new WebSocket session (`/ws`) on the checked address."""
        ws_url = urlunsplit(("wss" if self.scheme == "https" else "ws", self._netloc(self.host),
                             f"{self.path}/ws", "", ""))
        sock, error = None, None
        for address in self.addresses():  # in the resolver's order, as socket.create_connection tries them
            try:
                sock = socket.create_connection((address, self.port), timeout=self.timeout_s)
                break
            except OSError as exc:
                error = exc
        if sock is None:
            raise Retryable(f"cannot connect to {self.url}: {_brief(error or OSError())}")
        try:
            return connect(ws_url, sock=sock, ssl=ssl.create_default_context() if self.scheme == "https" else None,
                           server_hostname=self.host if self.scheme == "https" else None, proxy=None,
                           open_timeout=self.timeout_s, close_timeout=2, max_size=MAX_MESSAGE_BYTES, compression=None,
                           user_agent_header="Keel-OpenEnv/1", legacy=True)  # a connection, not a reconnector
        except (OSError, WebSocketException, TimeoutError) as exc:
            sock.close()
            raise Retryable(f"WebSocket handshake with {self.url}/ws failed: {_brief(exc)}") from exc

    def http(self, client: httpx.Client, method: str, route: str, body: Any = None) -> Any:
        """One HTTP call to `route` on the checked address; the answer's JSON."""
        address = self.addresses()[0]
        pinned = self._netloc(f"[{address}]" if ":" in address else address)
        url = urlunsplit((self.scheme, pinned, f"{self.path}{route}", "", ""))
        extensions = {"sni_hostname": self.host} if self.scheme == "https" else {}
        try:
            response = client.request(method, url, json=body, timeout=self.timeout_s, extensions=extensions,
                                      headers={"host": self._netloc(self.host)})
        except httpx.TimeoutException as exc:
            raise Retryable(f"{method} {route} timed out after {self.timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise Retryable(f"{method} {route} failed: {_brief(exc)}") from exc
        if response.status_code >= 500 or response.status_code == 429:
            raise Retryable(f"{method} {route} answered HTTP {response.status_code}")
        if response.status_code >= 400:
            raise EnvironmentFailure(f"{method} {route} answered HTTP {response.status_code}: "
                                     f"{_clip(response.text)}")
        try:
            return response.json()
        except ValueError as exc:
            raise EnvironmentFailure(f"{method} {route} answered with no JSON") from exc

    def _netloc(self, host: str) -> str:
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        default = 443 if self.scheme == "https" else 80
        return shown if self.port == default else f"{shown}:{self.port}"


def exchange(session: ClientConnection, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Send one message on a session and read its answer's `data` (an observation or state)."""
    try:
        session.send(json.dumps(message))
        raw = session.recv(timeout=timeout_s)
    except TimeoutError as exc:
        raise Retryable(f"{message['type']} timed out after {timeout_s:g} s") from exc
    except (OSError, WebSocketException) as exc:
        raise Retryable(f"{message['type']}: the session was lost ({_brief(exc)})") from exc
    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise EnvironmentFailure(f"{message['type']}: the server answered with no JSON") from exc
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict):
        raise EnvironmentFailure(f"{message['type']}: the server's answer has no data object")
    if answer.get("type") == "error":
        code = str(data.get("code") or "error")
        failure = Retryable if code in _RETRYABLE_WS_CODES else EnvironmentFailure
        raise failure(f"{message['type']}: the server answered {code}: {_clip(str(data.get('message', '')))}")
    return data


def with_retries(call: Callable[[], T], retries: int, on_failure: Callable[[], None] = lambda: None) -> T:
    """`call`, again after a `Retryable` failure up to `retries` times, with a doubling wait (0.25 s, capped
    at 4 s); only for idempotent calls. `on_failure` runs after each failed attempt (drop a session)."""
    for attempt in range(retries + 1):
        try:
            return call()
        except Retryable:
            on_failure()
            if attempt == retries:
                raise
            time.sleep(min(4.0, 0.25 * 2**attempt))
    raise AssertionError("unreachable")


class Pool:
    """What one worker process keeps for its episodes: idle WebSocket sessions per server, one HTTP
    client per server, and each server's action schema."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, bool], list[tuple[float, ClientConnection]]] = {}
        self._clients: dict[str, httpx.Client] = {}
        self._schemas: dict[tuple[str, bool], dict[str, Any]] = {}

    def session(self, server: Server) -> ClientConnection:
        """An idle session of `server` not older than `IDLE_S`, else a new one."""
        stale = []
        try:
            with self._lock:
                idle = self._idle.get(server.key, [])
                while idle:
                    since, session = idle.pop()
                    if time.monotonic() - since <= IDLE_S:
                        return session
                    stale.append(session)
        finally:
            for session in stale:
                _close(session)
        return server.open_session()

    def give_back(self, server: Server, session: ClientConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(server.key, [])
            if len(idle) < MAX_IDLE_SESSIONS:
                idle.append((time.monotonic(), session))
                return
        _close(session)

    def forget(self, server: Server) -> None:
        """Close a server's idle sessions (after one failed: the others likely share its fate)."""
        with self._lock:
            idle = self._idle.pop(server.key, [])
        for _, session in idle:
            _close(session)

    def client(self, server: Server) -> httpx.Client:
        with self._lock:
            client = self._clients.pop(server.url, None)
            if client is None:
                client = httpx.Client(trust_env=False, follow_redirects=False,
                                      limits=httpx.Limits(max_connections=32, max_keepalive_connections=32))
            self._clients[server.url] = client  # most recently used last
            evicted = [self._clients.pop(url) for url in list(self._clients)[:-MAX_CLIENTS]]
        for old in evicted:
            old.close()
        return client

    def schema(self, server: Server, retries: int) -> dict[str, Any]:
        """The server's `GET /schema` answer (fetched once per worker)."""
        with self._lock:
            cached = self._schemas.get(server.key)
        if cached is None:
            cached = with_retries(lambda: server.http(self.client(server), "GET", "/schema"), retries)
            if not isinstance(cached, dict):
                raise EnvironmentFailure("GET /schema answered with no object")
            with self._lock:
                self._schemas[server.key] = cached
        return cached

    def close(self) -> None:
        with self._lock:
            sessions = [s for idle in self._idle.values() for _, s in idle]
            clients = list(self._clients.values())
            self._idle.clear()
            self._clients.clear()
            self._schemas.clear()
        for session in sessions:
            _close(session)
        for client in clients:
            client.close()


POOL = Pool()
"""The worker's pool (one per process, shared by every episode and job it runs)."""


def _close(session: ClientConnection) -> None:
    try:
        session.close()
    except (OSError, WebSocketException, RuntimeError):
        pass  # already gone: nothing to release


def _brief(exc: BaseException) -> str:
    text = str(exc)
    return _clip(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
