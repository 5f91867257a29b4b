"""Reward `code_tests`: run the response's code against the row's tests in the python graders' sandbox.

The code is the last fenced block tagged ```python (or `py`, `python3`) of the response, else the whole
response. The row's `ground_truth` is a JSON object::

    {"tests": [...], "entry_point": "add"?, "timeout_s": 2.0?}

Each test is either an assert statement (any Python statements, as a string: `"assert add(1, 2) == 3"`),
run after the code in the code's namespace, where `candidate` is the `entry_point` function when one is
named (HumanEval's `check(candidate)`); or a stdin/stdout pair `{"input": "1 2\\n", "output": "3\\n"}`:
the code runs afresh as `__main__` with that stdin, and passes when what it prints equals `output`
line by line, trailing whitespace and trailing blank lines ignored (`input`/`output` may also be lists
of lines). `sys.exit(0)` ends a program normally. The reward is tests passed / tests.

Every sample runs in a fresh sandboxed process of its own (engine/rewards/sandbox.py: rlimits, user, net
and mount namespaces, a size-capped tmpfs, Landlock, seccomp, an audit hook): no fork or exec, no
network, writes only to its own tmpfs, so a fork bomb or a 10 GB write fails fast inside it. A sample
whose tests take longer than its timeout (`options.timeout_s`, default 5 s, or the row's `timeout_s`;
each capped by the deployment's python-grader limits) is killed and scores 0.0; it counts in
`reward/timeouts`. A row without tests, or a sandbox that failed, scores 0.0 and counts in
`reward/errors`. Samples run `options.parallel` (default 2) at a time per reward worker.

The harness runs in the same interpreter as the code it tests, so code written to cheat (an object
whose `__eq__` is always true, or one that reaches the harness's frames) can pass assert tests; the
result carries a per-sample secret so a line forged on the protocol pipe does not count.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from engine.errors import ConfigError
from engine.rewards.sandbox import Limits, Outcome, run_python

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_PARALLEL = 2
MAX_PARALLEL = 32
MAX_TESTS = 1000
OPTIONS_PARAM = "method.reward.options"
_TIMEOUT_MARKS = ("exceeded the wall-clock limit", "exceeded the CPU time limit")
"""How engine.rewards.sandbox words a sample it stopped for time (tests pin the wording)."""
_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:python3?|py)[ \t]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:python3?|py)[ \t]*\n", re.MULTILINE)

HARNESS = r'''
import io, sys

_REAL = (sys.stdin, sys.stdout, sys.stderr)


def _lines(value):
    text = "\n".join(value) if isinstance(value, list) else str(value)
    out = [line.rstrip() for line in text.split("\n")]
    while out and not out[-1]:
        out.pop()
    return out


def _program(code, stdin):
    """Run `code` as a program on `stdin`; what it printed, or None when it failed."""
    stdout = io.StringIO()
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), stdout, io.StringIO()
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        if e.code not in (None, 0):
            return None
    except BaseException:
        return None
    finally:
        sys.stdin, sys.stdout, sys.stderr = _REAL
    return stdout.getvalue()


def _asserts(code, tests, entry_point):
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), io.StringIO(), io.StringIO()
    try:
        try:
            exec(code, namespace)
        except BaseException:
            return 0
        if entry_point is not None:
            if not callable(namespace.get(entry_point)):
                return 0
            namespace["candidate"] = namespace[entry_point]
        passed = 0
        for test in tests:
            try:
                exec(compile(test, "<test>", "exec"), namespace)
            except BaseException:
                continue
            passed += 1
        return passed
    finally:
        sys.stdin, sys.stdout, sys.stderr = _REAL


def grade(sample, item):
    key = item.pop("key")  # not left where the code under test could read it back from the item
    tests = item["tests"]
    try:
        code = compile(sample["code"], "<solution>", "exec")
    except BaseException:
        return float(key * (len(tests) + 1))
    if tests and isinstance(tests[0], str):
        passed = _asserts(code, tests, item.get("entry_point"))
    else:
        passed = 0
        for test in tests:
            printed = _program(code, "\n".join(test["input"]) + "\n" if isinstance(test["input"], list)
                               else str(test["input"]))
            passed += printed is not None and _lines(printed) == _lines(test["output"])
    return float(key * (len(tests) + 1) + passed)
'''
"""Runs inside the sandbox (standard library only). Its result is `key * (tests + 1) + passed`: the parent
checks the per-sample `key`, so only a number this harness computed counts."""


def extract_code(response: str) -> str:
    """The last ```python fenced block (closed, else one left open by a cut-off response), else the
    whole response."""
    blocks = _FENCE.findall(response)
    if blocks:
        return blocks[-1]
    opened = list(_OPEN_FENCE.finditer(response))
    return response[opened[-1].end():] if opened else response


class BadRow(ValueError):
    """A row's `ground_truth` is not a usable tests object."""


def parse_tests(ground_truth: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """`{"tests", "entry_point", "timeout_s"}` from a row's ground truth; raises BadRow."""
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except ValueError:
            raise BadRow("ground_truth is not JSON") from None
    if not isinstance(ground_truth, Mapping):
        raise BadRow('ground_truth must be an object {"tests": [...]}')
    tests = ground_truth.get("tests")
    if not isinstance(tests, list) or not tests or len(tests) > MAX_TESTS:
        raise BadRow(f"ground_truth.tests must be a list of 1 to {MAX_TESTS} tests")
    if all(isinstance(t, str) for t in tests):
        pass
    elif not all(isinstance(t, Mapping) and "input" in t and "output" in t for t in tests):
        raise BadRow('ground_truth.tests: all assert strings, or all {"input", "output"} objects')
    entry_point = ground_truth.get("entry_point")
    if entry_point is not None and not (isinstance(entry_point, str) and entry_point.isidentifier()):
        raise BadRow("ground_truth.entry_point must be a function name")
    timeout = ground_truth.get("timeout_s")
    if timeout is not None and not _positive(timeout):
        raise BadRow("ground_truth.timeout_s must be a positive number")
    return {"tests": [t if isinstance(t, str) else {"input": t["input"], "output": t["output"]} for t in tests],
            "entry_point": entry_point, "timeout_s": timeout}


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class Counts:
    """One batch's tally: `samples`, those that `timeouts` stopped, those not scored for `errors`."""

    samples: int = 0
    timeouts: int = 0
    errors: int = 0


def check_options(options: Mapping[str, Any]) -> tuple[float, int]:
    """(`timeout_s`, `parallel`) from the job's reward options; ConfigError names the bad one."""
    timeout = options.get("timeout_s", DEFAULT_TIMEOUT_S)
    if not _positive(timeout):
        raise ConfigError("must be a positive number of seconds", param=f"{OPTIONS_PARAM}.timeout_s")
    parallel = options.get("parallel", DEFAULT_PARALLEL)
    if isinstance(parallel, bool) or not isinstance(parallel, int) or not 1 <= parallel <= MAX_PARALLEL:
        raise ConfigError(f"must be an integer from 1 to {MAX_PARALLEL}", param=f"{OPTIONS_PARAM}.parallel")
    unknown = sorted(set(options) - {"timeout_s", "parallel"})
    if unknown:
        raise ConfigError("code_tests takes the options timeout_s and parallel",
                          param=f"{OPTIONS_PARAM}.{unknown[0]}")
    return float(timeout), parallel


def deployment_limits(grading: Mapping[str, Any] | None) -> Limits:
    """The sandbox's limits: the deployment's python-grader limits (`grading["python"]`, which the
    worker sets), or the defaults when the engine runs without a worker (no `grading`). A deployment
    that refuses python graders refuses code_tests too: the code is the policy's, which a tenant steers."""
    if grading is None:
        return Limits()
    if grading.get("python") is None:
        raise ConfigError("code_tests runs the policy's code, and this deployment does not run python code "
                          "(KEEL_ALLOW_PYTHON_GRADERS)", code="python_graders_disabled",
                          param="method.reward.function")
    return Limits.from_dict(dict(grading["python"]))


class CodeTests:
    """Scores batches: one sandboxed process per sample, `parallel` at a time (a thread each)."""

    def __init__(self, options: Mapping[str, Any] | None = None, grading: Mapping[str, Any] | None = None) -> None:
        self.timeout_s, self.parallel = check_options(options or {})
        self.limits = deployment_limits(grading)
        self.pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="code-tests")

    def score(self, responses: Sequence[str], ground_truths: Sequence[Any]) -> tuple[list[float], Counts]:
        """A score per response (tests passed / tests) and the batch's `Counts`."""
        results = list(self.pool.map(self._one, responses, ground_truths))
        problems = [why for _, kind, why in results if kind == "error"]
        if problems:
            log.warning("code_tests: %d of %d samples not scored, e.g. %s", len(problems), len(results), problems[0])
        return [s for s, _, _ in results], Counts(len(results), sum(k == "timeout" for _, k, _ in results),
                                                 len(problems))

    def _one(self, response: str, ground_truth: Any) -> tuple[float, str | None, str]:
        try:
            row = parse_tests(ground_truth)
        except BadRow as e:
            return 0.0, "error", str(e)
        timeout = min(row["timeout_s"] or self.timeout_s, self.limits.wall_s, self.limits.cpu_s)
        key = secrets.randbelow(1 << 30) + 1  # key * (tests + 1) + passed stays an exact float
        item = {"tests": row["tests"], "entry_point": row["entry_point"], "key": key}
        limits = replace(self.limits, wall_s=timeout, cpu_s=timeout, max_restarts=0)
        outcome: Outcome = run_python(HARNESS, [{"code": extract_code(response)}], [item], limits)[0]
        if outcome.error is not None:
            if any(mark in outcome.error for mark in _TIMEOUT_MARKS):
                return 0.0, "timeout", outcome.error
            return 0.0, "error", outcome.error
        tests = len(row["tests"])
        value = round(outcome.score)
        if outcome.score != value or value // (tests + 1) != key:
            return 0.0, "error", "the result did not come from the harness"
        return (value % (tests + 1)) / tests, None, ""

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def code_tests_reward(response: str, ground_truth: str | None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                      **_: Any) -> float:
    """Reward function `code_tests` for one response, under the default sandbox limits. The PPO Reward
    role scores whole batches with `CodeTests` instead (the deployment's limits, `parallel` at a time)."""
    scorer = CodeTests({"timeout_s": timeout_s, "parallel": 1})
    try:
        return scorer.score([response], [ground_truth])[0][0]
    finally:
        scorer.close()


def reward_metrics(outputs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """`reward/timeouts` and `reward/errors` (fractions of the step's samples) from the Reward role's
    `compute_scores` outputs that carry `counts` (code_tests); {} when none does."""
    counts = [o["counts"] for o in outputs if o.get("counts") is not None]
    samples = sum(c.samples for c in counts)
    if not samples:
        return {}
    return {"reward/timeouts": sum(c.timeouts for c in counts) / samples,
            "reward/errors": sum(c.errors for c in counts) / samples}
