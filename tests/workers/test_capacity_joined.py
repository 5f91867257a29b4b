"""The capacity publisher never starts a Ray cluster of its own: after `ray.shutdown()` in its process
(a test's own Ray, a worker leaving its cluster) any Ray call from its thread made Ray's auto-init
start a fresh local cluster, under the next `connect()` of that process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import ray
from workers import capacity
print(capacity.publish_once() is None, ray.is_initialized())
"""


def test_publishing_outside_a_cluster_starts_no_ray(database):
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "False"], out.stdout + out.stderr[-2000:]
