"""engine.rewards.rules: the built-in rule rewards, the registry and entry points."""

from __future__ import annotations

import math
from importlib.metadata import EntryPoint

import pytest

from engine.errors import ConfigError, DataError
from engine.rewards import rules as rewards
from engine.rewards.rules import (
    extract_gsm8k_answer,
    get_reward,
    register_reward,
    resolve_rule_rewards,
    score_response,
    unregister_reward,
)


@pytest.mark.parametrize(("response", "truth", "expected"), [
    ("3 + 4 = 7\n#### 7", "7", 1.0),
    ("#### 8", "7", 0.0),
    ("no answer here", "7", 0.0),
    ("#### 1,234", "1234", 1.0),
    ("#### $1,234", "1234", 0.0),  # VERL's strict rule: no `$` after `#### `
    ("#### -7$42", "-742", 0.0),  # the answer is `-7`: `$` ends the number
    ("#### -7$42", "-7", 1.0),
    ("#### 42.", "42", 0.0),  # the trailing `.` is part of the number
    ("#### 42.", "42.", 1.0),
    ("#### -3", "-3", 1.0),
    ("#### 5 then again #### 7", "7", 1.0),  # the last answer counts
    ("#### 7 then again #### 5", "7", 0.0),
])
def test_gsm8k(response, truth, expected):
    assert rewards.gsm8k(response, truth) == expected


@pytest.mark.parametrize(("response", "truth", "expected"), [
    ("so the answer is 7", "7", 1.0),
    ("3 then 1,234.", "1,234.", 1.0),
    ("it is 5 .", "5", 1.0),  # a lone `.` is skipped
    ("#### 8", "8", 1.0),
    ("no number", "7", 0.0),
])
def test_gsm8k_flexible(response, truth, expected):
    assert rewards.gsm8k_flexible(response, truth) == expected


def _verl_strict(solution: str, truth: str) -> float:
    """VERL's `gsm8k.compute_score(method="strict")`, written from its definition."""
    import re

    found = re.findall("#### (\\-?[0-9\\.\\,]+)", solution[-300:])
    if not found:
        return 0
    return 1.0 if found[-1].replace(",", "").replace("$", "") == truth else 0.0


def test_gsm8k_equals_verl_strict_on_random_strings():
    import random

    rng = random.Random(0)
    alphabet = "0123456789-.,$# x\n"
    for _ in range(5000):
        response = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        if rng.random() < 0.7:
            response = response[:rng.randint(0, len(response))] + "#### " + response
        truth = "".join(rng.choice("0123456789-.") for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.5 and (answer := extract_gsm8k_answer(response)) is not None:
            truth = answer
        assert rewards.gsm8k(response, truth) == _verl_strict(response, truth), (response, truth)


def test_gsm8k_reads_only_the_last_300_characters():
    response = "#### 7" + " padding" * 50
    assert len(response) > 300
    assert extract_gsm8k_answer(response) is None
    assert rewards.gsm8k(response, "7") == 0.0


def test_gsm8k_format_score_and_score_are_configurable():
    assert rewards.gsm8k("#### 8", "7", format_score=0.1) == 0.1
    assert rewards.gsm8k("nothing", "7", format_score=0.1) == 0.0
    assert rewards.gsm8k("#### 7", "7", score=2.0) == 2.0


def test_exact_match_regex_and_length_penalty():
    assert rewards.exact_match("  Paris \n", "Paris") == 1.0
    assert rewards.exact_match("paris", "Paris") == 0.0
    assert rewards.exact_match("paris", "Paris", ignore_case=True) == 1.0
    assert rewards.exact_match("x", None) == 0.0
    assert rewards.regex("The answer is 42.", None, pattern=r"\b42\b") == 1.0
    assert rewards.regex("The answer is 42.", r"answer is \d+") == 1.0  # ground truth as the pattern
    assert rewards.regex("THE ANSWER", None, pattern="answer", flags="i") == 1.0
    assert rewards.regex("nothing", None, pattern="answer") == 0.0
    assert rewards.length_penalty("", None, num_tokens=0, max_tokens=10) == 0.0
    assert rewards.length_penalty("", None, num_tokens=10, max_tokens=10) == -1.0
    assert rewards.length_penalty("", None, num_tokens=6, max_tokens=10, target_length=4, coef=2.0) == pytest.approx(
        -2.0 * 2 / 6)


def test_registry_aliases_and_per_row_choice():
    assert get_reward("openai/gsm8k") is rewards.gsm8k
    fns = resolve_rule_rewards({"function": "exact_match"}, ["anything", None])
    assert fns == {"exact_match": rewards.exact_match}
    fns = resolve_rule_rewards({}, ["gsm8k", "openai/gsm8k", "gsm8k"])
    assert fns == {"gsm8k": rewards.gsm8k, "openai/gsm8k": rewards.gsm8k}
    with pytest.raises(DataError) as err:
        resolve_rule_rewards({"function": "data_source"}, ["gsm8k", None])
    assert err.value.param == "data_source"
    with pytest.raises(DataError):
        resolve_rule_rewards({}, ["no-such-source"])
    with pytest.raises(ConfigError) as err:
        resolve_rule_rewards({"function": "no-such-reward"}, [])
    assert err.value.param == "reward.function"


def test_register_a_python_function():
    @register_reward("test_shout", aliases=("test/shout",))
    def shout(response, ground_truth, **info):
        return sum(c.isupper() for c in response) / max(1, len(response))

    try:
        assert get_reward("test_shout") is shout
        assert get_reward("test/shout") is shout
        assert score_response(shout, "AB", None, prompt="p") == 1.0
        assert "test_shout" in rewards.available()
    finally:
        unregister_reward("test_shout")
    with pytest.raises(ConfigError):
        get_reward("test_shout")


def test_entry_point_group(monkeypatch):
    ep = EntryPoint(name="test_ep_reward", value="engine.rewards.rules:exact_match", group="keel.rewards")
    monkeypatch.setattr(rewards, "entry_points", lambda group: [ep] if group == "keel.rewards" else [])
    try:
        assert get_reward("test_ep_reward") is rewards.exact_match
        assert "test_ep_reward" in rewards.available()
    finally:
        unregister_reward("test_ep_reward")


def test_score_response_coerces_to_float():
    assert score_response(lambda r, g, **_: 1, "", None) == 1.0
    assert math.isnan(score_response(lambda r, g, **_: "not a number", "", None))
