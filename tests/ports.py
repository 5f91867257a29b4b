"""Free loopback ports for the servers the tests start: the one helper they share."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free a moment ago. Every socket stays bound until all are
    chosen: binding and closing one at a time may hand the same port out twice (Ray refused to start
    when two of its components were given one port)."""
    with ExitStack() as held:
        socks = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    return free_ports(1)[0]
