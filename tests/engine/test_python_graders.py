"""`python` graders: user code in a sandboxed process (engine/rewards/sandbox.py, sandboxed.py).

Each escape is tried twice where the kernel layers are available: with the audit hook (the refusal
names the event) and without it, against the kernel layers alone (namespaces, Landlock, seccomp)."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import threading

import pytest

from engine.rewards import graders, sandbox
from engine.rewards.rules import rule_reward_kwargs
from engine.rewards.sandbox import Limits, run_python

ON = graders.Context(python=Limits(cpu_s=5, wall_s=20))


def python_grader(source: str) -> dict:
    return {"type": "python", "name": "py", "source": source}


@pytest.fixture(scope="module")
def layers() -> dict[str, str]:
    return sandbox.probe()


def kernel_layers(layers: dict[str, str]) -> bool:
    return all(not layers[k].startswith("unavailable") for k in ("namespaces", "filesystem", "landlock", "seccomp"))


def test_a_python_grader_scores_samples_and_reads_item_fields():
    source = ("def grade(sample, item):\n"
              "    return float(sample['output_text'].strip() == str(item['answer'])) + item['bonus']\n")
    grader = graders.Grader(python_grader(source), ON)
    results = grader.score([graders.sample_of("7"), graders.sample_of("8")],
                           [{"answer": 7, "bonus": 0.5}, {"answer": 7, "bonus": 0.25}])
    assert [r.score for r in results] == [1.5, 0.25]
    assert [r.error for r in results] == [None, None] and results[0].scores == {"py": 1.5}


def test_the_sandbox_is_an_empty_temporary_directory_with_no_environment():
    source = ("import os\n"
              "def grade(sample, item):\n"
              "    open('scratch.txt', 'w').write('x' * 10)\n"
              "    assert len(open('scratch.txt').read()) == 10\n"
              "    raise RuntimeError(f'{os.getcwd()}|{\",\".join(sorted(os.environ))}')\n")
    out = run_python(source, [{}], [{}], ON.python)[0]
    assert out.score is None and out.error.startswith("RuntimeError: ")
    cwd, environ = out.error.removeprefix("RuntimeError: ").split(" (line")[0].split("|")
    # Nothing of the worker's environment; LC_CTYPE is Python's own locale coercion (PEP 538).
    assert os.path.basename(cwd).startswith("keel-grader-") and environ in ("", "LC_CTYPE")
    assert not os.path.exists(cwd)  # removed afterwards


@pytest.mark.parametrize("value", ["float('nan')", "float('inf')", "'0.5'", "None", "[1]"])
def test_a_grade_that_is_not_a_finite_number_scores_zero_with_the_error_recorded(value):
    result = graders.Grader(python_grader(f"def grade(sample, item):\n    return {value}\n"), ON).score(
        [graders.sample_of("x")], [{}])[0]
    assert result.score == 0.0 and result.error["flag"] == "python_grader_runtime_error"
    assert "not a finite number" in result.error["message"]
    errors = graders.errors_object(result.error)
    assert errors["python_grader_runtime_error"] is True and "finite" in errors["python_grader_runtime_error_details"]


def test_an_infinite_loop_is_stopped_by_the_cpu_limit_and_the_batch_goes_on():
    source = ("def grade(sample, item):\n"
              "    while item['spin']:\n"
              "        pass\n"
              "    return 1\n")
    outcomes = run_python(source, [{}] * 3, [{"spin": False}, {"spin": True}, {"spin": False}],
                          Limits(cpu_s=0.5, wall_s=120))
    assert [o.score for o in outcomes] == [1.0, None, 1.0]
    assert "CPU time limit" in outcomes[1].error


def test_a_sleeping_grader_is_stopped_by_the_wall_clock_limit():
    source = "import time\ndef grade(sample, item):\n    time.sleep(60)\n    return 1\n"
    outcomes = run_python(source, [{}] * 2, [{}] * 2, Limits(cpu_s=5, wall_s=1, max_restarts=0))
    assert "wall-clock limit of 1 s" in outcomes[0].error
    assert outcomes[1].error.startswith("not graded")  # max_restarts=0: the grader is given up on


def test_an_infinite_loop_at_import_fails_every_sample():
    outcomes = run_python("while True:\n    pass\n", [{}] * 2, [{}] * 2, Limits(cpu_s=0.5, wall_s=2))
    assert all(o.score is None and "failed to load" in o.error for o in outcomes)


def test_allocating_4_gib_is_a_memory_error():
    source = "def grade(sample, item):\n    block = bytearray(4 * 1024 ** 3)\n    return len(block)\n"
    out = run_python(source, [{}], [{}], Limits(memory_mb=1024))[0]
    assert out.score is None and out.error.startswith("MemoryError")


def test_file_size_and_open_file_limits():
    big = "def grade(sample, item):\n    open('big', 'wb').write(b'x' * (3 * 1024 * 1024))\n    return 1\n"
    assert run_python(big, [{}], [{}], Limits(file_mb=1))[0].error.startswith("OSError")  # EFBIG
    assert run_python(big, [{}], [{}], Limits(file_mb=8))[0].score == 1.0
    many = "def grade(sample, item):\n    files = [open(f'f{i}', 'w') for i in range(40)]\n    return len(files)\n"
    assert "Too many open files" in run_python(many, [{}], [{}], Limits(open_files=16))[0].error
    assert run_python(many, [{}], [{}], Limits(open_files=64))[0].score == 40.0


ESCAPES = {
    "read /etc/passwd": "return len(open('/etc/passwd').read())",
    "read the project": f"return len(open({os.path.abspath(__file__)!r}).read())",
    "write outside": "open('/tmp/keel-grader-escape.txt', 'w').write('x'); return 1",
    "connect": "import socket\n    s = socket.socket(); s.connect(('127.0.0.1', item['port'])); return 1",
    "os.system": "import os\n    if os.system('touch /tmp/keel-grader-escape.txt'):\n        raise OSError('no shell')\n"
                 "    return 1",
    "subprocess": "import subprocess\n    subprocess.run(['true']); return 1",
    "fork": "import os\n    return 1 if os.fork() else 0",
    "ctypes": "import ctypes\n    return ctypes.CDLL(None).getpid()",
    "signal another process": "import os, signal\n    os.kill(item['pid'], signal.SIGKILL); return 1",
}


@pytest.mark.parametrize("audit_hook", [True, False], ids=["audit-hook", "kernel-only"])
@pytest.mark.parametrize("name", list(ESCAPES))
def test_escapes_are_refused(name, audit_hook, layers):
    if not audit_hook and not kernel_layers(layers):
        pytest.skip(f"kernel layers unavailable here: {layers}")
    if name == "ctypes" and not audit_hook:
        pytest.skip("ctypes is refused by the audit hook only (seccomp still stops what it would call)")
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[object] = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
    thread.start()
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        source = "def grade(sample, item):\n    " + ESCAPES[name] + "\n"
        item = {"port": listener.getsockname()[1], "pid": bystander.pid}
        out = run_python(source, [{}], [item], Limits(cpu_s=5, wall_s=20), audit_hook=audit_hook)[0]
        assert bystander.poll() is None  # still alive
    finally:
        listener.close()
        bystander.kill()
        bystander.wait()
    assert out.score is None, (name, out)
    if audit_hook:
        assert "refused by the grader sandbox" in out.error, out.error
    else:
        # FileNotFoundError: outside the sandbox's own root the path does not exist at all
        assert out.error.startswith(("PermissionError", "OSError", "FileNotFoundError")), out.error
    assert not accepted and not os.path.exists("/tmp/keel-grader-escape.txt")


def test_os_system_without_the_hook_cannot_start_a_shell(layers):
    if not kernel_layers(layers):
        pytest.skip(f"kernel layers unavailable here: {layers}")
    source = "import os\ndef grade(sample, item):\n    return os.system('true')\n"
    out = run_python(source, [{}], [{}], Limits(), audit_hook=False)[0]
    assert out.score != 0.0  # the shell never ran: system() reports failure (no fork, no exec)


def test_the_probe_reports_every_layer(layers):
    assert set(layers) == {"rlimits", "namespaces", "filesystem", "landlock", "seccomp", "audit_hook"}
    assert layers["audit_hook"] == "on" and layers["rlimits"].startswith("cpu=")


def test_python_graders_are_refused_unless_the_deployment_allows_them():
    spec = python_grader("def grade(sample, item):\n    return 1\n")
    with pytest.raises(graders.GraderError) as err:
        graders.Grader({"type": "multi", "name": "m", "calculate_output": "p", "graders": {"p": spec}})
    assert (err.value.code, err.value.param) == ("python_graders_disabled", "grader.graders.p.type")
    answer = graders.run({"op": "validate", "grader": spec})
    assert answer["error"]["code"] == "python_graders_disabled" and answer["error"]["param"] == "grader.type"
    assert graders.run({"op": "validate", "grader": spec, "python": {}})["grader"] == spec
    # In a job: the driver refuses it before starting any role.
    from engine.errors import ConfigError

    options = {"grader": json.dumps(spec)}
    with pytest.raises(ConfigError) as err:
        rule_reward_kwargs({"function": "grader", "options": options, "grading": {"python": None}}, [None])
    assert err.value.param == "method.reward.options.grader.type" and err.value.code == "python_graders_disabled"
    kwargs = rule_reward_kwargs({"function": "grader", "options": options, "grading": {"python": {"cpu_s": 1}}},
                                [None])
    assert kwargs["grading"] == {"python": {"cpu_s": 1}}


@pytest.mark.parametrize(("source", "message"), [
    ("def grade(sample, item)\n    return 1", "not valid Python: line 1"),
    ("def other(sample, item):\n    return 1\n", "must define grade(sample, item)"),
    ("async def grade(sample, item):\n    return 1\n", "not async"),
    ("x = '" + "a" * (256 * 1024) + "'\n", "at most 256 KiB"),
])
def test_python_source_is_checked_at_validation(source, message):
    with pytest.raises(graders.GraderError, match=re.escape(message)) as err:
        graders.validate(python_grader(source), allow_python=True)
    assert err.value.param == "grader.source"
    graders.validate({**python_grader("grade = max\n"), "image_tag": "2025-05-08"}, allow_python=True)


def own_root(layers: dict[str, str]) -> None:
    if layers["filesystem"].startswith("unavailable"):
        pytest.skip(f"no mount namespace here: {layers['filesystem']}")


def test_all_files_together_are_capped(layers):
    """15 files of 10 MiB (each under RLIMIT_FSIZE) into a 16 MiB quota: the writes stop at the quota."""
    own_root(layers)
    source = ("def grade(sample, item):\n"
              "    written = 0\n"
              "    try:\n"
              "        for i in range(15):\n"
              "            with open(f'f{i}', 'wb', buffering=0) as f:\n"
              "                for _ in range(10):\n"
              "                    f.write(b'x' * (1024 * 1024))\n"
              "                    written += 1\n"
              "    except OSError as e:\n"
              "        raise RuntimeError(f'{e.strerror} after {written} MiB') from None\n"
              "    return written\n")
    for audit_hook in (True, False):
        out = run_python(source, [{}], [{}], Limits(disk_mb=16, file_mb=10), audit_hook=audit_hook)[0]
        written = int(re.search(r"No space left on device after (\d+) MiB", out.error or "")[1])
        assert 8 <= written <= 16, out
    assert run_python(source, [{}], [{}], Limits(disk_mb=200, file_mb=10))[0].score == 150  # the knob


def test_files_are_capped_in_number(layers):
    own_root(layers)
    source = ("def grade(sample, item):\n"
              "    n = 0\n"
              "    try:\n"
              "        while n < 5000:\n"
              "            open(f'e{n}', 'w').close()\n"
              "            n += 1\n"
              "    except OSError as e:\n"
              "        raise RuntimeError(f'{e.strerror} after {n}') from None\n")
    out = run_python(source, [{}], [{}], Limits(files=50), audit_hook=False)[0]
    made = int(re.search(r"No space left on device after (\d+)", out.error)[1])
    assert 40 <= made <= 50, out


def test_only_the_read_roots_and_the_directory_exist_for_the_grader(layers):
    """Kernel layers alone (no audit hook): stat of what is outside the read roots fails (no /proc, no
    project, no home: they do not exist in the sandbox's root), and so does reading /proc/1/environ."""
    own_root(layers)
    source = ("import os\n"
              "def grade(sample, item):\n"
              "    seen = []\n"
              "    for p in item['paths']:\n"
              "        try:\n"
              "            os.stat(p)\n"
              "            seen.append(p)\n"
              "        except OSError:\n"
              "            pass\n"
              "    try:\n"
              "        seen.append(open('/proc/1/environ').read()[:20])\n"
              "    except OSError:\n"
              "        pass\n"
              "    raise RuntimeError(repr(seen))\n")
    # (The directories on the way to a read root, e.g. /etc for /etc/ld.so.cache, exist, holding only that.)
    paths = ["/proc", "/proc/1", "/proc/self/environ", "/sys", "/home", "/etc/passwd", "/etc/hostname", "/var",
             "/run", os.path.abspath(__file__), os.path.dirname(os.path.abspath(__file__)), sandbox.CHILD]
    out = run_python(source, [{}], [{"paths": paths}], Limits(), audit_hook=False)[0]
    assert ast.literal_eval(out.error.removeprefix("RuntimeError: ").rsplit(" (line", 1)[0]) == [], out.error


def test_stale_sandbox_directories_are_swept(monkeypatch):
    import tempfile

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has any more
    stale = tempfile.mkdtemp(prefix=f"keel-grader-{gone.pid}-")
    os.makedirs(os.path.join(stale, "locked", "deeper"))
    os.chmod(os.path.join(stale, "locked"), 0)
    mine = tempfile.mkdtemp(prefix=f"keel-grader-{os.getpid()}-")  # a live process's: kept
    try:
        monkeypatch.setattr(sandbox, "_swept", False)
        assert run_python("def grade(sample, item):\n    return 1\n", [{}], [{}])[0].score == 1.0
        assert not os.path.exists(stale) and os.path.exists(mine)
    finally:
        os.rmdir(mine)


def test_the_sandbox_dies_with_the_process_that_started_it():
    """SIGKILL to the starting process (no cleanup runs): the sandbox gets SIGKILL too."""
    import sys
    import time

    script = ("from engine.rewards.sandbox import run_python, Limits\n"
              "run_python('import time\\ndef grade(s, i):\\n    time.sleep(3600)\\n', [{}], [{}], Limits(wall_s=3600))\n")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    try:
        deadline = time.monotonic() + 60
        child = None
        while child is None and time.monotonic() < deadline:
            with open(f"/proc/{parent.pid}/task/{parent.pid}/children") as f:
                child = next((int(p) for p in f.read().split()), None)
            time.sleep(0.05)
        assert child is not None
        parent.kill()
        parent.wait()
        while time.monotonic() < deadline and os.path.exists(f"/proc/{child}"):
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{child}"), "the sandbox outlived its parent"
    finally:
        parent.kill()
        parent.wait()
