"""Graders as an attack surface (issue 27): slow `graders/run` calls hold no request thread and are capped
per key and per deployment, a timed-out call leaves no process or directory behind, quadratic text metrics
take bounded inputs, and the grader's process has a memory limit. The sandbox's own limits (disk quota,
what a grader can see) are tests/engine/test_python_graders.py."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import time

import anyio
import httpx
import pytest
from serving import serve

from api import graders
from api.errors import ApiError
from core.config import settings

SLEEPER = {"type": "python", "name": "slow", "source": "import time\ndef grade(sample, item):\n    time.sleep(3600)\n"}


def descendants(root: int, skip: frozenset[int] = frozenset()) -> dict[int, str]:
    """Every process below `root` but those below (and including) `skip`: pid -> command line."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(name))
    out, stack = {}, [root]
    while stack:
        for pid in parents.get(stack.pop(), []):
            if pid in skip:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            stack.append(pid)
    return out


def sandboxes() -> dict[int, str]:
    return {pid: cmd for pid, cmd in descendants(os.getpid()).items() if "sandboxed.py" in cmd}


def wait_for(condition, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit  # a bound for a stuck test, not a speed target
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


@pytest.fixture
def small_pool_server(app):
    """The API on its own uvicorn with a request thread pool of 3 (the default is 40): 3 calls that each
    held a thread would starve everything else."""
    async def three_threads(scope, receive, send):
        anyio.to_thread.current_default_thread_limiter().total_tokens = 3
        await app(scope, receive, send)

    with serve(three_threads) as url:
        yield url


def test_slow_grader_runs_hold_no_thread_and_are_capped_per_key_and_deployment(
        small_pool_server, auth, other_auth, monkeypatch):
    monkeypatch.setattr(settings, "MAX_GRADER_RUNS_PER_KEY", 3)
    monkeypatch.setattr(settings, "MAX_GRADER_RUNS", 4)
    url = f"{small_pool_server}/v1/fine_tuning/alpha/graders/run"
    body = {"grader": SLEEPER, "model_sample": "x"}
    with httpx.Client(timeout=300) as http, concurrent.futures.ThreadPoolExecutor(4) as pool:
        slow = [pool.submit(http.post, url, json=body, headers=auth) for _ in range(3)]
        try:
            wait_for(lambda: len(sandboxes()) >= 3, "three slow graders running")
            again = http.post(url, json=body, headers=auth)
            assert again.status_code == 429 and again.json()["code"] == "too_many_grader_runs", again.text
            assert "API key" in again.json()["detail"] and int(again.headers["Retry-After"]) >= 1
            # Nothing else waits for them: liveness, another tenant's requests and its own grader run.
            assert http.get(f"{small_pool_server}/healthz").status_code == 200
            assert http.get(f"{small_pool_server}/v1/models", headers=other_auth).status_code == 200
            slow.append(pool.submit(http.post, url, json=body, headers=other_auth))
            wait_for(lambda: len(sandboxes()) >= 4, "the other tenant's grader running")
            full = http.post(url, json=body, headers=other_auth)  # its first run: the deployment is full
            assert full.status_code == 429 and "deployment" in full.json()["detail"], full.text
            assert full.json()["code"] == "too_many_grader_runs" and full.headers["Retry-After"]
            assert not any(f.done() for f in slow)  # all answered while the graders were still running
        finally:
            # End the runs: SIGKILL their grader processes (ours: the server runs in this process). Their
            # sandboxes die with them (PR_SET_PDEATHSIG).
            running = sandboxes()
            for pid, cmd in descendants(os.getpid()).items():
                if "engine.rewards.graders" in cmd:
                    os.kill(pid, signal.SIGKILL)
            assert all(f.result().status_code == 500 for f in slow)
        wait_for(lambda: all(gone(pid) for pid in running), "sandboxes outliving their parent")
        # The slots were given back.
        assert http.post(url, json={"grader": {"type": "string_check", "name": "s", "input": "a", "reference": "a",
                                               "operation": "eq"}, "model_sample": "a"},
                         headers=auth).json()["reward"] == 1.0


def test_a_timed_out_run_leaves_no_process_and_no_directory(monkeypatch):
    monkeypatch.setattr(settings, "PYTHON_GRADER_TIMEOUT_S", 3600.0)  # the call's timeout comes first
    seen: dict[int, str] = {}
    # The session's own processes (its Ray head, once a test before this one asked for it) stay.
    before = frozenset(descendants(os.getpid()))

    def watch() -> None:  # the sandbox and its directory (its cwd), while it runs
        wait_for(lambda: bool(sandboxes()), "the sandbox started")
        for pid in sandboxes():
            seen[pid] = os.readlink(f"/proc/{pid}/cwd")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        watcher = pool.submit(watch)
        with pytest.raises(ApiError) as err:
            asyncio.run(graders.grader_process_async({"op": "run", "grader": SLEEPER, "model_sample": "x"}, timeout=8))
        watcher.result()
    assert err.value.code == "grader_timeout"
    assert seen and all(os.path.basename(d).startswith("keel-grader-") for d in seen.values())
    assert all(gone(pid) for pid in seen), "a sandbox survived the timeout"
    assert not any(os.path.exists(d) for d in seen.values()), "a sandbox directory survived the timeout"
    assert not descendants(os.getpid(), skip=before)


def _similarity(metric: str, words: int) -> dict:
    text = " ".join(f"w{i % 97}" for i in range(words))
    return {"grader": {"type": "text_similarity", "name": "t", "input": "{{sample.output_text}}",
                       "reference": "{{item.reference}}", "evaluation_metric": metric},
            "model_sample": text, "item": {"reference": text}}


def test_quadratic_metrics_refuse_inputs_over_their_limit(client, auth):
    # 8,000 words a side took rouge_l 586 MiB and 18 s; now the sample is not scored, with the reason.
    r = client.post("/v1/fine_tuning/alpha/graders/run", json=_similarity("rouge_l", 8000), headers=auth)
    assert r.status_code == 200, r.text
    errors = r.json()["metadata"]["errors"]
    assert r.json()["reward"] == 0.0 and errors["other_error"] is True and errors["param"] == "grader.input"
    assert "8000 words, more than the 2000" in errors["message"]
    ok = client.post("/v1/fine_tuning/alpha/graders/run", json=_similarity("rouge_1", 8000), headers=auth)
    assert ok.json()["reward"] == pytest.approx(1.0)


def test_the_grader_process_memory_limit(client, auth, monkeypatch):
    body = _similarity("rouge_l", 2000)  # the longest rouge_l takes: tens of MiB for its table
    assert client.post("/v1/fine_tuning/alpha/graders/run", json=body, headers=auth).json()["reward"] == 1.0
    monkeypatch.setattr(settings, "GRADER_MEMORY_MB", 64)
    r = client.post("/v1/fine_tuning/alpha/graders/run", json=body, headers=auth)
    assert r.status_code == 400 and r.json()["code"] == "grader_resources_exceeded", r.text


def test_the_python_grader_disk_quota_setting(client, auth, monkeypatch):
    writer = {"type": "python", "name": "w", "source": (
        "def grade(sample, item):\n"
        "    for i in range(4):\n"
        "        open(f'f{i}', 'wb').write(b'x' * (2 * 1024 * 1024))\n"
        "    return 1\n")}
    body = {"grader": writer, "model_sample": "x"}
    assert client.post("/v1/fine_tuning/alpha/graders/run", json=body, headers=auth).json()["reward"] == 1.0
    monkeypatch.setattr(settings, "PYTHON_GRADER_DISK_MB", 4)
    r = client.post("/v1/fine_tuning/alpha/graders/run", json=body, headers=auth).json()
    assert r["reward"] == 0.0 and "No space left on device" in r["metadata"]["errors"]["message"], r
