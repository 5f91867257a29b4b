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
