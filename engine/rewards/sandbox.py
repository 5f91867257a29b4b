"""Running a `python` grader's source: a fresh sandboxed process per batch of samples.

Why a process per batch (not a persistent worker per job): nothing a grader does to its interpreter
(globals, monkey-patching, leaked memory, a file in its temporary directory) survives into the next
training step, a crash costs one batch at most, and the cost is small (about 0.2 s to start and
confine an interpreter, next to a PPO step's seconds). The confinement itself is
engine/rewards/sandboxed.py (the child's side); this module starts it, feeds it the batch, enforces the
per-sample time limits from outside, and turns what came back into one `Outcome` per sample.

Limits (`Limits`): per sample, `cpu_s` CPU seconds (read from /proc while it runs) and `wall_s` seconds
of wall clock, enforced by killing the process; per process, RLIMIT_CPU of `cpu_s` per sample plus one
sample's worth for start-up (the kernel's backstop), RLIMIT_AS of `memory_mb`, RLIMIT_FSIZE of
`file_mb`, RLIMIT_NOFILE of `open_files`, and all files together `disk_mb` and `files` (the size of its
temporary directory's tmpfs, in the mount namespace sandboxed.py makes).

Nothing outlives a batch: the sandbox gets SIGKILL when the process that started it ends (however that
ends: PR_SET_PDEATHSIG), and each process removes, once, the directories of sandboxes whose starting
process died before its cleanup ran (`keel-grader-<pid>-...` in the temporary directory). A sample whose process is killed scores nothing (its
`Outcome` carries the reason) and a fresh process continues with the rest of the batch; after
`max_restarts` kills in one batch the remaining samples are not graded (the grader is not usable).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandboxed.py")
_STARTUP_S = 20.0
"""Wall-clock allowance for starting and confining the interpreter and running the module's top level."""
_LOGGED: set[str] = set()


@dataclass(frozen=True)
class Limits:
    """What one sandboxed grader may use (the deployment's settings, `KEEL_PYTHON_GRADER_*`)."""

    cpu_s: float = 10.0
    """CPU seconds per sample."""
    wall_s: float = 30.0
    """Wall-clock seconds per sample."""
    memory_mb: int = 2048
    """Address space of the process (RLIMIT_AS): an allocation beyond it is a MemoryError."""
    file_mb: int = 100
    """Largest file the grader may write in its temporary directory (RLIMIT_FSIZE)."""
    disk_mb: int = 128
    """All its files together: the size of its temporary directory's tmpfs (ENOSPC beyond)."""
    files: int = 1000
    """Files and directories it may create there (the tmpfs's inodes)."""
    open_files: int = 64
    max_restarts: int = 3

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Limits:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (data or {}).items() if k in fields})


class Outcome(NamedTuple):
    """One sample's result: `score`, or None with `error` (what the grader raised or why it was stopped)
    and `kind`: `runtime` (the grader's code) or `server` (the sandbox could not run it)."""

    score: float | None
    error: str | None = None
    kind: str = "runtime"


def run_python(source: str, samples: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]],
               limits: Limits = Limits(), *, audit_hook: bool = True) -> list[Outcome]:
    """`grade(sample, item)` of `source` for each pair, in sandboxed processes. `audit_hook=False`
    leaves out the Python-level layer (tests check that the kernel layers hold on their own)."""
    outcomes: list[Outcome | None] = [None] * len(samples)
    pending = list(range(len(samples)))
    kills = 0
    while pending:
        done, stopped = _one_process(source, samples, items, pending, limits, audit_hook)
        for i, outcome in done.items():
            outcomes[i] = outcome
        pending = [i for i in pending if outcomes[i] is None]
        if stopped is None:
            break
        kills += 1
        if kills > limits.max_restarts and pending:
            for i in pending:
                outcomes[i] = Outcome(None, f"not graded: the grader exceeded its limits {kills} times in this "
                                            "batch", "runtime")
            pending = []
    return [o if o is not None else Outcome(None, "not graded: the grader process ended early", "server")
            for o in outcomes]


def probe(limits: Limits = Limits()) -> dict[str, str]:
    """Which confinement layers hold on this machine (`python -m engine.rewards.sandbox` prints it):
    each layer's detail, or `unavailable: <why>`."""
    found: dict[str, str] = {}
    _one_process("def grade(sample, item):\n    return 0\n", [{}], [{}], [0], limits, True, found)
    return found


def _one_process(source: str, samples: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]],
                 indices: list[int], limits: Limits, audit_hook: bool,
                 mechanisms: dict[str, str] | None = None) -> tuple[dict[int, Outcome], int | None]:
    """Grade `indices` in one process. Returns (outcomes by index, the index whose sample killed the
    process or None). A process that fails before grading gives every pending index an outcome."""
    _sweep_once()
    temp = tempfile.mkdtemp(prefix=f"keel-grader-{os.getpid()}-")
    request = {"source": source, "indices": indices, "samples": [samples[i] for i in indices],
               "items": [items[i] for i in indices], "audit": audit_hook,
               "limits": {**asdict(limits), "cpu_s": limits.cpu_s * (len(indices) + 1)}}
    stderr_path = os.path.join(temp, "stderr.log")
    out: dict[int, Outcome] = {}
    try:
        with open(stderr_path, "wb") as stderr:
            # -I: no PYTHON* variables, no user site, not the current directory on sys.path. An empty
            # environment: no credentials or settings of the worker reach the grader.
            proc = subprocess.Popen([sys.executable, "-I", CHILD, str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=stderr, cwd=temp, env={}, close_fds=True, start_new_session=True)
        try:
            return _converse(proc, request, indices, limits, out, temp, mechanisms)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    except OSError as e:
        log.error("python grader: could not start the sandbox: %s", e)
        return {i: Outcome(None, "the grader sandbox could not start", "server") for i in indices}, None
    finally:
        _remove(temp)


_swept = False


def _sweep_once() -> None:
    """Remove the sandbox directories of processes that are gone (killed before their cleanup ran),
    once per process: `keel-grader-<pid of the process that made it>-...`."""
    global _swept
    if _swept:
        return
    _swept = True
    root = tempfile.gettempdir()
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            match = _OWNED.fullmatch(entry.name)
            if match and entry.is_dir(follow_symlinks=False) and not _alive(int(match[1])):
                _remove(entry.path)


_OWNED = re.compile(r"keel-grader-(\d+)-\w+")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's
        return True
    return True


def _remove(path: str) -> None:
    """rmtree, also through directories the grader made unreadable (chmod 0)."""
    def unlock(_function, failed, _excinfo) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700)
        with contextlib.suppress(OSError):
            (shutil.rmtree if os.path.isdir(failed) and not os.path.islink(failed) else os.unlink)(failed)

    shutil.rmtree(path, onerror=unlock)


def _converse(proc: subprocess.Popen, request: dict[str, Any], indices: list[int], limits: Limits,
              out: dict[int, Outcome], temp: str, mechanisms: dict[str, str] | None
              ) -> tuple[dict[int, Outcome], int | None]:
    def feed() -> None:  # in a thread: a child that never reads cannot block us past the deadline
        try:
            proc.stdin.write(json.dumps(request).encode())
        except (ValueError, OSError):  # the child is gone (BrokenPipeError)
            pass
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    threading.Thread(target=feed, daemon=True, name="grader-feed").start()
    reader = _Lines(proc.stdout.fileno())
    phase = "starting"  # then "loading" (the module's top level), then grading `current`
    current: int | None = None
    deadline = time.monotonic() + _STARTUP_S + limits.wall_s
    cpu_at_start = 0.0
    why = ""
    while True:
        line = reader.next(min(deadline, time.monotonic() + 0.1))
        if line is None:
            if reader.closed:
                break
            if time.monotonic() >= deadline:
                why = f"exceeded the wall-clock limit of {limits.wall_s:g} s"
                break
            if current is not None and _cpu_seconds(proc.pid) - cpu_at_start > limits.cpu_s:
                why = f"exceeded the CPU time limit of {limits.cpu_s:g} s"
                break
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue  # not ours (the grader can write to the pipe's descriptor): ignored
        if not isinstance(message, dict):
            continue
        if "ready" in message and phase == "starting":
            phase = "loading"
            _log_mechanisms(message["ready"].get("mechanisms") or {})
            if mechanisms is not None:
                mechanisms.update(message["ready"].get("mechanisms") or {})
        elif "setup_error" in message:
            error = f"the grader's source failed to load: {message['setup_error']}"
            return {**out, **{i: Outcome(None, error) for i in indices if i not in out}}, None
        elif message.get("start") in indices:
            phase, current = "grading", message["start"]
            deadline = time.monotonic() + limits.wall_s
            cpu_at_start = _cpu_seconds(proc.pid)
        elif message.get("i") in indices and message["i"] not in out:
            score = message.get("score")
            out[message["i"]] = (Outcome(float(score)) if isinstance(score, int | float) and math.isfinite(score)
                                 else Outcome(None, str(message.get("error") or "no score")[:1200]))
            current = None
        elif message.get("done"):
            return out, None
    if proc.poll() is None:
        proc.kill()
    why = why or _death(proc.wait())
    if phase == "starting":
        log.warning("python grader: the sandbox did not start (%s): %s", why,
                    _tail(os.path.join(temp, "stderr.log")))
        return {i: Outcome(None, f"the grader sandbox failed to start: {why}", "server") for i in indices}, None
    if phase == "loading":
        return {i: Outcome(None, f"the grader's source failed to load: the process {why}") for i in indices}, None
    if current is None:  # between two samples (a thread of the grader's, say): the next one pays
        current = next((i for i in indices if i not in out), None)
        if current is None:
            return out, None
    out[current] = Outcome(None, f"the grader process {why}")
    return out, current


def _death(code: int) -> str:
    if code == -signal.SIGXCPU:
        return "exceeded the CPU time limit (RLIMIT_CPU)"
    if code == -signal.SIGKILL:
        return "was killed (SIGKILL: the CPU limit's hard stop, or out of memory)"
    if code < 0:
        return f"crashed (signal {signal.Signals(-code).name})"
    return f"exited with status {code} while grading"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` (0.0 when /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _tail(path: str, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - limit))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


def _log_mechanisms(mechanisms: dict[str, str]) -> None:
    """Which confinement layers hold, once per process and combination; unavailable ones as warnings."""
    key = json.dumps({k: str(v).startswith("unavailable") for k, v in mechanisms.items()}, sort_keys=True)
    if key in _LOGGED:
        return
    _LOGGED.add(key)
    missing = {k: v for k, v in mechanisms.items() if str(v).startswith("unavailable")}
    if missing:
        log.warning("python grader sandbox: some layers are unavailable here: %s (active: %s)", missing,
                    {k: v for k, v in mechanisms.items() if k not in missing})
    else:
        log.info("python grader sandbox: %s", mechanisms)


class _Lines:
    """Lines from a pipe, with a deadline per read (select), tolerant of partial writes."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer, self.closed = fd, b"", False

    def next(self, until: float) -> str | None:
        while b"\n" not in self.buffer:
            if self.closed:
                return None
            timeout = max(0.0, until - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.closed = True
                if self.buffer:
                    line, self.buffer = self.buffer, b""
                    return line.decode(errors="replace")
                return None
            self.buffer += chunk
            if len(self.buffer) > 16 * 1024 * 1024:  # a grader flooding the pipe: stop listening
                self.closed = True
                return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode(errors="replace")


if __name__ == "__main__":
    print(json.dumps(probe(), indent=2))
