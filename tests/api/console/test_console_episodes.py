"""The job page's samples table renders a multi-turn episode (`job.samples` rows with `messages`,
`turn_rewards`, `turns`, `tool_calls`) as a collapsible transcript: each message with its role, tool calls
as name + JSON arguments, tool results, per-turn reward badges and the final score; at 1280x800 and
390x844, without console errors, horizontal overflow or serious axe-core violations."""

from __future__ import annotations

import json
import secrets
from datetime import timedelta

import pytest

from tests.api.console.console_data import VIEWPORTS, _events, _file, _job, _manifest, _metrics, _project
from tests.api.console.test_console_insight import axe_violations, open_job

LONG = "The calculator says 391, so 17 * 23 = 391. " + "Checking once more: " * 12 + "391."
EPISODES = [
    {"prompt": "What is 17 * 23? Use the calculator.", "response": "17 * 23 = 391.", "reward": 1.0,
     "turns": 2, "tool_calls": 1, "turn_rewards": [0.25, 0.0],
     "messages": [
         {"role": "assistant", "content": "Let me compute it.", "tool_calls": [  # OpenAI's shape
             {"id": "call_0", "type": "function",
              "function": {"name": "calculator", "arguments": json.dumps({"expression": "17 * 23"})}}]},
         {"role": "tool", "name": "calculator", "content": "391"},
         {"role": "assistant", "content": LONG}]},
    {"prompt": "Echo the word you are given.", "response": "maple", "reward": 0.0, "turns": 2, "tool_calls": 1,
     "turn_rewards": [0.0, -0.5],
     "messages": [
         {"role": "assistant", "content": "Ready."},
         {"role": "user", "content": "Say: maple"},
         {"role": "assistant", "content": "oak", "tool_calls": [  # Hermes' shape, as parsed from the text
             {"name": "python", "arguments": {"code": "print('x' * 3)"}}]}]},
    {"prompt": "A single-turn row", "response": "plain", "reward": 0.5},
]


@pytest.fixture(scope="module")
def episode_job(database):
    from core.models import utcnow

    project_id, key = _project(f"console-episodes-{secrets.token_hex(4)}")
    file_id = _file(project_id)
    job = _job(project_id, file_id, "/models/base", {"type": "ppo", "reward": {"function": "grader"}},
               status="succeeded", started_at=utcnow() - timedelta(minutes=1), finished_at=utcnow(),
               progress={"step": 2, "total_steps": 2},
               manifest=_manifest(file_id, "ppo", {"rollout": {"multi_turn": {"enable": True, "max_turns": 4}}}))
    events = [("job.status", {"status": "running"})]
    for step in (1, 2):
        events += [("job.metrics", _metrics(step, 2)), ("job.samples", {"step": step, "rows": EPISODES})]
    _events(job, events + [("job.status", {"status": "succeeded"}), ("job.done", {"status": "succeeded"})])
    return key, job


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_episode_samples_show_a_transcript(tabs, episode_job, viewport):
    key, job = episode_job
    tab = tabs(key, viewport)
    page = tab.page
    open_job(tab, job)
    page.wait_for_selector("#samples table[data-step='2']")
    assert page.locator("#samples tr.episode-row").count() == 2  # the single-turn row has none
    first = page.locator("#samples details.episode").first
    summary = first.locator("summary").inner_text()
    assert "Episode 1: 2 turns, 1 tool call" in summary and "score 1" in summary
    assert not first.locator(".transcript").is_visible()  # collapsed until asked
    first.locator("summary").click()
    roles = first.locator(".msg").evaluate_all("els => els.map(e => e.dataset.role)")
    assert roles == ["assistant", "tool", "assistant"]
    call = first.locator(".tool-call")
    assert call.get_attribute("data-tool") == "calculator"
    assert json.loads(call.locator(".tool-args").inner_text()) == {"expression": "17 * 23"}
    assert "tool · calculator" in first.locator(".msg-tool").inner_text()
    assert "391" in first.locator(".msg-tool .msg-text").inner_text()
    badges = first.locator(".msg .reward-badge").all_inner_texts()
    assert badges == ["reward 0.25", "reward 0"]
    assert "Final score 1" in first.locator(".episode-foot").inner_text()

    second = page.locator("#samples details.episode").nth(1)
    second.locator("summary").click()
    assert second.locator(".msg-user").inner_text().endswith("Say: maple")
    hermes = second.locator(".tool-call")
    assert hermes.get_attribute("data-tool") == "python" and "print('x' * 3)" in hermes.inner_text()
    assert second.locator(".reward-badge.r-neg").inner_text() == "reward -0.5"
    assert axe_violations(page) == []
    tab.check("job-episodes", viewport)
