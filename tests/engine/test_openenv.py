"""engine.environments.openenv against a real OpenEnv server (openenv-core's `create_app`, in a subprocess on
loopback: `tests/openenv_server.py`): episodes over WebSocket sessions from the worker's pool, the spec's
knobs, per-call timeouts, retried resets, the connect-time address check, and a server killed mid-episode."""

from __future__ import annotations

import time

import pytest
from openenv_server import ServerProcess

from engine.environments.base import EnvironmentFailure
from engine.environments.building import EnvironmentContext, make_environment
from engine.environments.openenv_client import POOL
from engine.errors import ConfigError

LOOPBACK = EnvironmentContext(allowed_hosts=("127.0.0.1",))


@pytest.fixture(scope="module")
def server():
    proc = ServerProcess()
    yield proc
    proc.kill()
    POOL.close()


def env(server, context=LOOPBACK, **spec):
    return make_environment({"type": "openenv", "url": server.url, **spec}, context)


def test_an_episode_runs_on_a_pooled_session_and_the_next_episode_reuses_it(server):
    first = env(server, reset_fields=["target"])
    assert first.reset({"target": "cat", "prompt": "hi"}) == [{"role": "user", "content": "Say cat."}]
    missed = first.step("a dog")  # the action field comes from GET /schema: `message`
    assert (missed.done, missed.reward, missed.messages) == (False, 0.0, [{"role": "user", "content": "No. Say cat."}])
    hit = first.step("a cat")
    assert (hit.done, hit.final_reward, hit.reward, hit.messages) == (True, 1.0, None, [])
    session = first._session
    first.close()

    second = env(server, reset_fields=["target"])
    assert second.reset({"target": "owl"}) == [{"role": "user", "content": "Say owl."}]
    assert second._session is session  # the same connection, a fresh episode on the server
    assert second.step("owl").final_reward == 1.0
    second.close()


def test_the_spec_fields_reach_the_server(server):
    fixed = env(server, reset_args={"target": "elk", "turns": 1}, action_field="message", observation_field="prompt",
                observation_role="tool")
    assert fixed.reset({}) == [{"role": "user", "content": "Say elk."}]
    last = fixed.step("no")  # turns=1: the first step ends it
    assert (last.done, last.final_reward) == (True, 0.0)
    fixed.close()

    mapped = env(server, reset_fields={"target": "ground_truth"})  # the server's argument: the row's field
    assert mapped.reset({"ground_truth": "fox", "target": "no"}) == [{"role": "user", "content": "Say fox."}]
    mapped.close()

    as_tool = env(server, observation_role="tool")
    as_tool.reset({})
    assert as_tool.step("no").messages == [{"role": "tool", "content": "No. Say yes."}]
    as_tool.close()

    for spec in ({"action_field": "text"}, {"action_args": {"extra": 1}}):  # the action says what it carries
        bad = env(server, **spec)
        bad.reset({})
        with pytest.raises(EnvironmentFailure, match="VALIDATION_ERROR"):
            bad.step("yes")
        bad.close()
    with pytest.raises(EnvironmentFailure, match="no field 'nothing'"):
        env(server, observation_field="nothing").reset({})


def test_http_transport_posts_reset_and_step(server):
    idle = len(POOL._idle.get((server.url, True), []))
    over_http = env(server, transport="http", reset_args={"target": "yes"})
    assert over_http.reset({}) == [{"role": "user", "content": "Say yes."}]
    assert over_http.step("yes").final_reward == 1.0
    over_http.close()
    assert over_http._session is None and len(POOL._idle.get((server.url, True), [])) == idle


def test_a_slow_reset_is_retried_and_a_slow_step_is_not(server):
    slow_once = env(server, timeout_s=1.0, retries=2, reset_args={"key": "once", "first_reset_delay_s": 3.0})
    assert slow_once.reset({}) == [{"role": "user", "content": "Say yes."}]
    slow_once.close()
    assert server.resets()["once"] == 2

    always = env(server, timeout_s=0.5, retries=1, reset_args={"key": "always", "reset_delay_s": 2.0})
    with pytest.raises(EnvironmentFailure, match="timed out after 0.5 s"):
        always.reset({})
    always.close()
    assert server.resets()["always"] == 2  # one try and one retry

    slow_step = env(server, timeout_s=1.0, retries=3, reset_args={"step_delay_s": 3.0})
    slow_step.reset({})
    began = time.monotonic()
    with pytest.raises(EnvironmentFailure, match="step timed out"):
        slow_step.step("yes")
    assert time.monotonic() - began < 2.5  # never repeated
    slow_step.close()


def test_the_address_is_checked_at_connect_time(server):
    with pytest.raises(EnvironmentFailure, match="non-public address"):
        env(server, EnvironmentContext()).reset({})
    localhost = server.url.replace("127.0.0.1", "localhost")
    only_the_address = make_environment({"type": "openenv", "url": localhost}, LOOPBACK)
    with pytest.raises(EnvironmentFailure, match="non-public address"):  # the host as named is what counts
        only_the_address.reset({})
    named = make_environment({"type": "openenv", "url": localhost}, EnvironmentContext(allowed_hosts=("LocalHost",)))
    assert named.reset({}) == [{"role": "user", "content": "Say yes."}]
    named.close()


@pytest.mark.parametrize(("spec", "param"), [
    ({"url": "ftp://x"}, "environment.url"), ({"timeout_s": 0}, "environment.timeout_s"),
    ({"retries": -1}, "environment.retries"), ({"transport": "grpc"}, "environment.transport"),
    ({"reset_fields": "target"}, "environment.reset_fields"), ({"colour": "red"}, "environment.colour"),
])
def test_a_bad_spec_is_a_config_error(spec, param):
    with pytest.raises(ConfigError) as caught:
        make_environment({"type": "openenv", "url": "http://127.0.0.1:1", **spec}, LOOPBACK)
    assert (caught.value.code, caught.value.param) == ("invalid_environment", param)


def test_a_server_killed_mid_episode_fails_that_episode_only(server):
    victim = ServerProcess()
    doomed, other = env(victim), env(server)
    doomed.reset({})
    other.reset({})
    assert not doomed.step("no").done
    victim.kill()
    began = time.monotonic()
    with pytest.raises(EnvironmentFailure, match="session was lost"):
        doomed.step("no")
    assert time.monotonic() - began < 5
    doomed.close()
    assert other.step("yes").final_reward == 1.0
    other.close()
    fresh = env(victim, retries=1)
    with pytest.raises(EnvironmentFailure, match="cannot connect"):
        fresh.reset({})


class KillsBeforeSecondStep:
    """An OpenEnv episode whose server is SIGKILLed after the first turn's answer (mid-episode)."""

    def __init__(self, inner, victim) -> None:
        self.inner, self.victim, self.steps = inner, victim, 0

    def reset(self, row):
        return self.inner.reset(row)

    def step(self, text):
        self.steps += 1
        if self.steps == 2:
            self.victim.kill()
        return self.inner.step(text)

    def close(self):
        self.inner.close()


def test_run_episodes_with_the_demo_policy_fails_only_the_killed_servers_episode(server, demo_assets, one_thread):
    from engine.config import ModelConfig
    from engine.models import load_policy, load_tokenizer
    from engine.rollout.backends import make_rollout
    from engine.rollout.episodes import MultiTurn, run_episodes
    from engine.rollout.sampling import SamplingParams

    tokenizer = load_tokenizer(demo_assets["model"])
    rollout = make_rollout("hf", load_policy(demo_assets["model"], ModelConfig()), tokenizer=tokenizer, model_path="",
                           dtype="float32", lora_rank=0, max_model_len=256, seed=0)
    victim = ServerProcess()
    spec = {"reset_fields": ["target"], "reset_args": {"turns": 3}}
    environments = [KillsBeforeSecondStep(env(victim, **spec), victim), env(server, **spec), env(server, **spec)]
    rows = [{"target": "qqqq", "prompt": f"Question {i}?"} for i in range(3)]
    conversations = [[{"role": "user", "content": r["prompt"]}] for r in rows]
    prompts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True) for c in conversations]
    episodes = run_episodes(rollout.generate, tokenizer, prompts, conversations, environments, rows, [1, 2, 3],
                            SamplingParams(max_new_tokens=6, temperature=1.0), MultiTurn(max_turns=3), 96)

    doomed, *others = episodes
    assert doomed.failed is not None and "session was lost" in doomed.failed
    assert doomed.turns == 2 and set(doomed.loss_mask) == {0}  # a failed episode trains nothing
    for e in others:
        assert e.failed is None and e.turns == 3 and not e.truncated  # turns=3: the server ends it
        assert e.final_reward == 0.0  # the last step's reward is the outcome
        assert e.messages[0] == {"role": "user", "content": "Say qqqq."}  # reset's observation
        observations = [m for m in e.messages if m["role"] == "user"]
        assert [m["content"] for m in observations[1:]] == ["No. Say qqqq."] * 2
        assert e.turn_rewards == [0.0, 0.0, 0.0]
        assert 0 in e.loss_mask[:e.turn_ends[-1]] and e.loss_mask[e.turn_ends[-1]] == 1  # observations: mask 0
