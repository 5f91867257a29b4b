"""The `code_tests` reward: the response's code against the row's tests in the python graders' sandbox
(engine/rewards/code_tests.py), its containment, its counts, and a PPO run that reports them."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from engine.errors import ConfigError, DataError
from engine.rewards.code_tests import CodeTests, Counts, extract_code, parse_tests, reward_metrics
from engine.rewards.rules import get_reward, rule_reward_kwargs
from engine.rewards.sandbox import CHILD

ADD = json.dumps({"tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], "entry_point": "add"})
SUM = json.dumps({"tests": [{"input": "1 2\n", "output": "3\n"}, {"input": ["5 5"], "output": ["10", ""]}]})
GOOD = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\n"


@pytest.fixture(scope="module")
def scorer():
    out = CodeTests({"timeout_s": 3, "parallel": 2})
    yield out
    out.close()


def _ours() -> list[int]:
    """Live sandbox processes this test process started (sandboxed.py gets our pid as its argument), and
    any they forked (a fork keeps the command line)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if CHILD.encode() in argv and str(os.getpid()).encode() in argv:
            found.append(int(entry))
    return found


def test_code_comes_from_the_last_python_block_else_the_whole_response():
    assert extract_code("```python\nx = 1\n```\ntext\n```py\ny = 2\n```") == "y = 2\n"
    assert extract_code("x = 1\n") == "x = 1\n"
    assert extract_code("```text\nnot code\n```") == "```text\nnot code\n```"
    assert extract_code("intro\n```python\ncut = 'off") == "cut = 'off"


def test_a_correct_solution_scores_one_and_half_the_tests_half(scorer):
    half = "```python\ndef add(a, b):\n    return 3\n```"
    scores, counts = scorer.score([GOOD, half], [ADD, ADD])
    assert scores == [1.0, 0.5]
    assert counts == Counts(samples=2, timeouts=0, errors=0)


def test_entry_point_is_the_candidate_and_must_exist(scorer):
    tests = ["assert candidate(2, 3) == 5"]
    named = json.dumps({"tests": tests, "entry_point": "add"})
    unnamed = json.dumps({"tests": tests})
    missing = json.dumps({"tests": ["assert True"], "entry_point": "subtract"})
    scores, _ = scorer.score([GOOD, GOOD, GOOD], [named, unnamed, missing])
    assert scores == [1.0, 0.0, 0.0]


def test_stdin_stdout_tests_compare_printed_lines(scorer):
    program = "import sys\na, b = map(int, input().split())\nprint(a + b, ' ')\nsys.exit(0)\n"
    wrong_once = "a, b = map(int, input().split())\nprint(a + b if a == 1 else 0)\n"
    crashes = "raise SystemExit(3)\n"
    scores, counts = scorer.score([program, wrong_once, crashes], [SUM, SUM, SUM])
    assert scores == [1.0, 0.5, 0.0]
    assert counts.errors == 0


def test_an_infinite_loop_scores_zero_within_its_timeout_and_counts(scorer):
    loop = "def add(a, b):\n    while True:\n        pass\n"
    started = time.monotonic()
    scores, counts = scorer.score([loop, GOOD], [ADD, ADD])
    elapsed = time.monotonic() - started
    assert scores == [0.0, 1.0]
    assert counts == Counts(samples=2, timeouts=1, errors=0)
    assert elapsed < 3 + 10  # the timeout plus an interpreter's start on a loaded machine, never the loop
    assert reward_metrics([{"counts": counts}, {"counts": Counts(2, 0, 1)}]) == {"reward/timeouts": 0.25,
                                                                             "reward/errors": 0.25}
    assert reward_metrics([{"scores": None}]) == {}


def test_a_rows_timeout_applies_capped_by_the_deployment():
    sleepy = "import time\ntime.sleep(0.6)\ndef add(a, b):\n    return a + b\n"
    patient = CodeTests({"timeout_s": 5})
    row_short = json.dumps({**json.loads(ADD), "timeout_s": 0.2})
    capped = CodeTests({"timeout_s": 5}, {"python": {"wall_s": 0.2, "cpu_s": 10}})
    quick = CodeTests({"timeout_s": 0.2})
    try:
        assert patient.score([sleepy], [ADD])[0] == [1.0]
        assert quick.score([sleepy], [ADD])[1].timeouts == 1
        assert patient.score([sleepy], [row_short])[1].timeouts == 1
        assert capped.score([sleepy], [ADD])[1].timeouts == 1
    finally:
        for scorer in (patient, capped, quick):
            scorer.close()


def test_a_fork_bomb_is_contained(scorer):
    bomb = "import os\nwhile True:\n    os.fork()\n"
    threads = "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()\n"
    scores, counts = scorer.score([bomb + "def add(a, b):\n    return a + b\n", threads], [ADD, ADD])
    assert scores == [0.0, 0.0]
    assert counts.timeouts == 0  # refused at once, not run until the clock stopped it
    assert _ours() == []
    assert subprocess.run(["true"], check=False, timeout=30).returncode == 0  # the host still starts processes


def test_a_10_gb_write_fails_fast_and_nothing_lands_outside(scorer):
    outside = Path(tempfile.gettempdir()) / f"keel-code-tests-escape-{secrets.token_hex(4)}"
    write = ("chunk = b'x' * (1 << 20)\n"
             f"try:\n    open({str(outside)!r}, 'wb').write(chunk)\nexcept OSError:\n    pass\n"
             "with open('big.bin', 'wb') as f:\n    for _ in range(10 * 1024):\n        f.write(chunk)\n"
             "def add(a, b):\n    return a + b\n")
    started = time.monotonic()
    scores, counts = scorer.score([write], [ADD])
    assert scores == [0.0] and counts == Counts(1, 0, 0)  # EFBIG at the file limit: the code raised
    assert time.monotonic() - started < 10
    assert not outside.exists()
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith(f"keel-grader-{os.getpid()}-")]


def test_a_forged_result_line_does_not_count(scorer):
    forge = ("import os\nfor fd in range(3, 64):\n    try:\n"
             "        os.write(fd, b'{\"i\": 0, \"score\": 1.0}\\n{\"done\": true}\\n')\n"
             "    except OSError:\n        pass\n")
    scores, counts = scorer.score([forge], [json.dumps({"tests": ["assert False"]})])
    assert scores == [0.0] and counts.errors == 1


def test_bad_rows_score_zero_as_errors(scorer):
    scores, counts = scorer.score([GOOD] * 3, ["not json", json.dumps({"tests": []}), None])
    assert scores == [0.0, 0.0, 0.0] and counts == Counts(3, 0, 3)
    with pytest.raises(ValueError, match="all assert strings"):
        parse_tests({"tests": ["assert True", {"input": "", "output": ""}]})


def test_parallel_runs_that_many_sandboxes_at_once():
    seen, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            seen[0] = max(seen[0], len(_ours()))
            time.sleep(0.02)

    slow = "import time\ntime.sleep(1.0)\ndef add(a, b):\n    return a + b\n"
    scorer = CodeTests({"parallel": 3})
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert scorer.score([slow] * 4, [ADD] * 4)[0] == [1.0] * 4
    finally:
        stop.set()
        watcher.join()
        scorer.close()
    assert seen[0] == 3


def test_the_driver_checks_options_the_deployment_and_per_row_use():
    assert get_reward("code_tests")(GOOD, ADD) == 1.0
    kwargs = rule_reward_kwargs({"function": "code_tests", "options": {"timeout_s": 2},
                                 "grading": {"python": {"wall_s": 3}}}, [None])
    assert kwargs["grading"] == {"python": {"wall_s": 3}} and kwargs["options"] == {"timeout_s": 2}
    with pytest.raises(ConfigError) as err:
        rule_reward_kwargs({"function": "code_tests", "grading": {"python": None}}, [None])
    assert (err.value.code, err.value.param) == ("python_graders_disabled", "method.reward.function")
    for options, param in (({"timeout_s": 0}, "timeout_s"), ({"parallel": 1.5}, "parallel"), ({"x": 1}, "x")):
        with pytest.raises(ConfigError) as err:
            rule_reward_kwargs({"function": "code_tests", "options": options}, [None])
        assert err.value.param == f"method.reward.options.{param}"
    with pytest.raises(DataError) as err:
        rule_reward_kwargs({"function": "data_source"}, ["code_tests"])
    assert err.value.param == "data_source"


def test_the_reward_role_scores_a_batch_with_counts_and_times_the_sandboxes(demo_assets):
    from engine.config import PPOConfig, build_config
    from engine.models import load_tokenizer
    from engine.roles.batch import build_batch
    from engine.roles.reward import Reward

    tokenizer = load_tokenizer(demo_assets["model"])
    sleepy = "import time\ntime.sleep(0.6)\ndef add(a, b):\n    return a + b\n"
    loop = "while True:\n    pass\n"
    responses = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in (GOOD, sleepy, loop, GOOD)]
    batch = build_batch([[1, 2]] * 4, responses, prompt_width=2, response_width=max(map(len, responses)),
                        pad_id=tokenizer.pad_token_id)
    role = Reward(build_config(PPOConfig, {}), tokenizer_path=demo_assets["model"],
                  functions={"code_tests": get_reward("code_tests")}, function="code_tests",
                  options={"timeout_s": 1.0, "parallel": 1}, grading={"python": {"wall_s": 10, "cpu_s": 10}})
    out = role.compute_scores(batch, [{"ground_truth": t} for t in (ADD, ADD, ADD, "not json")])
    assert out["scores"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert out["counts"] == Counts(samples=4, timeouts=1, errors=1)
    assert out["time_s"] >= 0.6 + 1.0  # one at a time: the sleep and the loop's timeout are in the reward's time
    role.code_tests.close()


@pytest.mark.slow
def test_a_ppo_step_scores_with_code_tests_and_reports_its_counts(demo_assets, ray_local, one_thread, tmp_path):
    from engine.config import JobRequest, PPOConfig, Resources, build_config
    from engine.methods.ppo import run_ppo
    from engine.runtime.reporting import RecordingReporter

    rows = [{"prompt": "Write add.", "ground_truth": ADD},
            {"prompt": "A row without tests.", "ground_truth": "not json"},
            {"prompt": "Write any code.", "ground_truth": json.dumps({"tests": ["assert True"]})},
            {"prompt": "Print nothing.", "ground_truth": json.dumps({"tests": [{"input": "", "output": ""}]})}]
    train = tmp_path / "code.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = build_config(PPOConfig, {
        "data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
        "actor": {"ppo_mini_batch_size": 4, "ppo_epochs": 1}, "rollout": {"n": 2},
        "trainer": {"total_training_steps": 1}})
    reporter = RecordingReporter()
    run_ppo(JobRequest(job_id="code-tests", method="ppo", config=cfg, model_path=demo_assets["model"],
                       training_file=str(train), output_dir=str(tmp_path / "out"),
                       checkpoint_dir=str(tmp_path / "ckpt"), seed=3, resources=Resources(num_workers=1),
                       reward={"function": "code_tests", "options": {"timeout_s": 5, "parallel": 2},
                               "grading": {"python": {"wall_s": 10, "cpu_s": 10}}}), reporter)
    metrics = reporter.of("metrics")[-1]["values"]
    # Nothing here loops (the Reward role's test counts timeouts); the bad row's two samples are 2 of 8 errors.
    assert metrics["reward/timeouts"] == 0.0 and metrics["reward/errors"] == 0.25
    assert metrics["timing_s/reward"] > 0.0
    truths = {r["prompt"]: r["ground_truth"] for r in rows}
    samples = [s for event in reporter.of("samples") for s in event["rows"]]
    assert samples
    rescorer = CodeTests({"timeout_s": 5})
    try:  # the step's rewards are the scorer's own on those responses
        for sample in samples:
            truth = next(t for p, t in truths.items() if sample["prompt"].endswith(p) or p in sample["prompt"])
            assert rescorer.score([sample["response"]], [truth])[0] == [sample["reward"]]
    finally:
        rescorer.close()
