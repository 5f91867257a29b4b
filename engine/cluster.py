"""Connecting to Ray: an existing cluster by address, or a private local one on loopback."""

from __future__ import annotations

import os

# Without these, a local Ray advertises the host's non-loopback address and phones home.
_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Initialise Ray once per process: join `address` if given, else start a loopback-only local Ray."""
    for key, value in _LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, namespace="keel", log_to_driver=False)
    else:
        # address="local": always a private cluster, never one that happens to run on this machine.
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 2, include_dashboard=False,
                 _node_ip_address="127.0.0.1", namespace="keel", log_to_driver=False)
