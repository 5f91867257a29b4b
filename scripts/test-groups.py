"""Run the test suite as a few pytest sessions at once and fail when any of them fails.

Each session is a group of test folders. Sessions never collide: each makes its own database, queue
namespace, KEEL_HOME, Ray cluster and Celery worker (tests/conftest.py). Most of the suite's time
is spent waiting on processes it starts (API servers, workers, Ray, a browser), so groups overlap
well even on two cores. A folder of tests/ that no group names joins the last group, so a new folder
is never skipped.

    python scripts/test-groups.py [pytest args...]    # e.g. -m "not slow"

Each group's output goes to .keel/test-logs/<group>.log and is printed whole when the group ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

# Balanced by the durations of a full run (`pytest --durations`): in-process training in one, the
# API's many short tests in another, the end-to-end and fault tests (mostly waiting on jobs) in a third,
# and the protocol rooms driven by their real clients (openai, tinker, inference on Ray Serve; the
# embedded `keel up` stacks), which mostly wait on live stacks, in a fourth.
GROUPS: dict[str, list[str]] = {
    "engine": ["engine", "bench", "core", "cli", "cluster"],
    "api": ["api", "security", "fuzz", "sdk", "test_architecture.py",
            "test_deployment_images.py", "test_deployment_compose.py", "test_deployment_k8s.py",
            "test_deployment_entrypoint.py", "test_monitoring_deployment.py", "storage"],
    "workers": ["workers", "faults", "trainers"],
    "protocols": ["openai", "tinker", "inference", "serving", "embedded",
                  # Long PPO runs moved out of `engine`, the longest group, to the one that mostly waits.
                  "engine/test_ppo_async.py", "engine/test_async_parity.py", "engine/test_distill_policy.py"],
}


def entries() -> list[str]:
    """Folders of tests/ that hold test modules, and its top-level test modules."""
    return sorted(p.name for p in TESTS.iterdir()
                  if (p.is_dir() and any(p.rglob("test_*.py"))) or (p.name.startswith("test_") and p.suffix == ".py"))


def plan() -> dict[str, list[str]]:
    named = {e for paths in GROUPS.values() for e in paths}
    missing = [e for paths in GROUPS.values() for e in paths if not (TESTS / e).exists()]
    if missing:
        raise SystemExit(f"test-groups: no such test path: {missing}")
    groups = {name: list(paths) for name, paths in GROUPS.items()}
    last = list(groups)[-1]
    groups[last] += [e for e in entries() if e not in named]
    return groups


def ignores(groups: dict[str, list[str]], name: str) -> list[str]:
    """`--ignore` for each test module another group runs from inside one of this group's folders."""
    folders = {p for p in groups[name] if "/" not in p}
    return [f"--ignore={Path('tests') / p}" for other, paths in groups.items() if other != name
            for p in paths if "/" in p and p.split("/")[0] in folders]


def main(argv: list[str]) -> int:
    logs = ROOT / ".keel" / "test-logs"
    logs.mkdir(parents=True, exist_ok=True)
    running: dict[str, tuple[subprocess.Popen, Path, float]] = {}
    groups = plan()
    for name, paths in groups.items():
        log = logs / f"{name}.log"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--durations=15", *argv,
               *ignores(groups, name), *(str(Path("tests") / p) for p in paths)]
        print(f"[{name}] {' '.join(cmd[1:])}", flush=True)
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
        running[name] = (proc, log, time.monotonic())
    failed = []
    while running:
        for name, (proc, log, started) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            print(f"\n===== group {name}: exit {proc.returncode} after {time.monotonic() - started:.0f} s =====",
                  flush=True)
            sys.stdout.write(log.read_text(errors="replace"))
            sys.stdout.flush()
            # 5: nothing collected (a marker filter that leaves a group empty) is not a failure.
            if proc.returncode not in (0, 5):
                failed.append(name)
        time.sleep(1)
    print(f"\ntest groups failed: {', '.join(failed)}" if failed else "\nall test groups passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
