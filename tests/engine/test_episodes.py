"""engine.rollout.episodes: token in, token out. The ids the generator is fed at every turn are a prefix of
the ids trained, and decode to the chat template's rendering of the whole transcript (no re-tokenization
drift); loss masks, turn ends, per-turn rewards, truncation, failures, seeds, log-probs; and the loop
driven by the real HFRollout on the demo model."""

from __future__ import annotations

import threading
import time

import pytest

from engine.data import prompt_token_ids
from engine.environments.base import EnvironmentFailure, Step
from engine.environments.building import EnvironmentContext, make_environment
from engine.environments.tool_calls import format_tool_call
from engine.errors import ConfigError
from engine.models import load_tokenizer
from engine.rollout.chat_delta import ChatDelta
from engine.rollout.episodes import MultiTurn, run_episodes
from engine.rollout.sampling import SamplingParams, row_seed

PARAMS = SamplingParams(max_new_tokens=256)
LIMITS = MultiTurn()


@pytest.fixture(scope="module")
def tokenizer(demo_assets):
    return load_tokenizer(demo_assets["model"])


class Scripted:
    """The rollout backend's interface with scripted responses: episode `e`'s turn `t` answers
    `scripts[e][t]` (token ids), whatever the sampler would have drawn. Records every call."""

    def __init__(self, prompts, scripts, log_probs=True):
        self.prompts, self.scripts, self.log_probs = [list(p) for p in prompts], scripts, log_probs
        self.calls: list[dict] = []
        self.eos_token_ids = [2]
        self.last_log_probs = None

    def generate(self, prompts, seeds, params):
        out, lps, episodes = [], [], []
        for ids in prompts:
            e = next(i for i, p in enumerate(self.prompts) if list(ids[:len(p) - 4]) == p[:-4])
            turn = sum(e in call["episodes"] for call in self.calls)
            out.append(list(self.scripts[e][turn]))
            lps.append([-0.5 - 0.01 * k for k in range(len(out[-1]))])
            episodes.append(e)
        self.calls.append({"prompts": [list(p) for p in prompts], "seeds": list(seeds), "params": params,
                           "episodes": episodes})
        self.last_log_probs = lps if self.log_probs else None
        return out


def ids(tokenizer, text, eos=True):
    return tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])


def chats(n):
    return [[{"role": "user", "content": f"Question {i}: what is {i} + 3?"}] for i in range(n)]


def run(tokenizer, scripts, envs, *, limits=LIMITS, max_tokens=2048, params=PARAMS, log_probs=True,
        conversations=None, rows=None):
    conversations = conversations or chats(len(envs))
    prompts = [prompt_token_ids(tokenizer, c) for c in conversations]
    backend = Scripted(prompts, scripts, log_probs)
    rows = rows or [{"prompt": c[-1]["content"], "ground_truth": str(i + 3)} for i, c in enumerate(conversations)]
    episodes = run_episodes(backend.generate, tokenizer, prompts, conversations, envs, rows,
                            [100 + i for i in range(len(envs))], params, limits, max_tokens)
    return episodes, backend, prompts, conversations


def sampled_positions(backend, episode_index, episode):
    """Where each scripted turn's tokens sit in the episode's response (from the fed prompts)."""
    spans = []
    calls = [c for c in backend.calls if episode_index in c["episodes"]]
    for k, call in enumerate(calls):
        fed = call["prompts"][call["episodes"].index(episode_index)]
        start = len(fed) - len(episode.prompt_ids)
        spans.append((start, start + len(backend.scripts[episode_index][k])))
    return spans


def assert_no_drift(tokenizer, backend, episode_index, episode, conversation):
    full = episode.prompt_ids + episode.response_ids
    for call in backend.calls:
        if episode_index in call["episodes"]:
            fed = call["prompts"][call["episodes"].index(episode_index)]
            assert full[:len(fed)] == fed  # what the model saw is exactly what is trained
    transcript = [{"role": m["role"], "content": m["content"]} for m in conversation + episode.messages]
    rendered = tokenizer.apply_chat_template(transcript, tokenize=False)
    decoded = tokenizer.decode(full, skip_special_tokens=False)
    # The template closes the final turn with `<|eos|>\n`: the episode ends at the sampled `<|eos|>`.
    assert rendered == decoded + "\n"


class Counter:
    """An environment that never ends by itself: every turn answers with a user message and `reward`."""

    def __init__(self, reward=0.0, fail_at=None, sleep=0.0, calls_per_turn=0):
        self.reward, self.fail_at, self.sleep, self.calls_per_turn = reward, fail_at, sleep, calls_per_turn
        self.turns, self.closed = 0, False

    def reset(self, row):
        if self.fail_at == "reset":
            raise RuntimeError("broken")
        return []

    def step(self, text):
        time.sleep(self.sleep)
        self.turns += 1
        if self.fail_at == self.turns:
            raise EnvironmentFailure("the server went away")
        return Step(messages=[{"role": "user", "content": f"again {self.turns}"}], reward=self.reward * self.turns,
                    tool_calls=self.calls_per_turn)

    def close(self):
        self.closed = True


def test_tool_call_and_echo_episodes_have_no_drift(tokenizer):
    call = format_tool_call("calculator", {"expression": "3 + 4"})
    scripts = [
        [ids(tokenizer, f"Let me check. {call}"), ids(tokenizer, "It is 7.\n#### 7")],
        [ids(tokenizer, "Hello"), ids(tokenizer, "an")],
        [ids(tokenizer, f"{call}{call}"), ids(tokenizer, f"{call} and then, cut without EOS", eos=False),
         ids(tokenizer, "#### 5")],  # row 2: 2 + 3
    ]
    envs = [make_environment({"type": "tools", "tools": ["calculator"]}, EnvironmentContext()),
            make_environment({"type": "echo_token", "words": ["an"]}, EnvironmentContext()),
            make_environment({"type": "arithmetic"}, EnvironmentContext())]
    episodes, backend, _, conversations = run(tokenizer, scripts, envs)

    tools, echo, arithmetic = episodes
    assert [m["role"] for m in tools.messages] == ["assistant", "tool", "assistant"]
    assert tools.messages[1]["content"] == "7" and tools.messages[0]["tool_calls"][0]["function"]["name"] == "calculator"
    assert (tools.turns, tools.tool_calls, tools.tool_errors, tools.final_reward) == (2, 1, 0, None)
    assert tools.final_text == "It is 7.\n#### 7" and not tools.truncated
    assert echo.messages[1] == {"role": "user", "content": "Say: an"} and echo.final_reward == 1.0
    assert arithmetic.turns == 3 and arithmetic.tool_calls == 3 and arithmetic.final_reward == 1.0
    for i, episode in enumerate(episodes):
        assert episode.failed is None and episode.prompt_ids == backend.prompts[i]
        assert_no_drift(tokenizer, backend, i, episode, conversations[i])
        spans = sampled_positions(backend, i, episode)
        expected = [0] * len(episode.response_ids)
        for start, end in spans:
            expected[start:end] = [1] * (end - start)
        assert episode.loss_mask == expected  # 1 exactly on the sampled tokens
        assert episode.turn_ends == [end - 1 for _, end in spans]
        assert episode.final_span == spans[-1]
        log_probs = [0.0] * len(episode.response_ids)
        for start, end in spans:
            log_probs[start:end] = [-0.5 - 0.01 * k for k in range(end - start)]
        assert episode.sampling_log_probs == pytest.approx(log_probs)
    # The turn cut without EOS was closed by the environment's tokens: `<|eos|>\n`, mask 0.
    cut_end = arithmetic.turn_ends[1]
    assert arithmetic.response_ids[cut_end + 1] == tokenizer.eos_token_id and arithmetic.loss_mask[cut_end + 1] == 0


def test_observation_tokens_come_from_the_template_delta_alone(tokenizer):
    delta = ChatDelta(tokenizer, {tokenizer.eos_token_id})
    assert delta.end_of_turn == "<|eos|>\n"
    message = [{"role": "tool", "name": "calculator", "content": "7"}]
    assert delta.after_turn(tokenizer.eos_token_id, message) == ids(tokenizer, "\nTool: 7\nAssistant:\n", eos=False)
    assert delta.after_turn(5, message) == [tokenizer.eos_token_id] + ids(tokenizer, "\nTool: 7\nAssistant:\n",
                                                                          eos=False)
    # A backend that names no EOS: the special token the end of turn begins with is still recognised; a
    # special token that is not how the template ends a turn (BOS) is closed like a cut turn.
    bare = ChatDelta(tokenizer, set())
    assert bare.closing(tokenizer.eos_token_id) == "\n"
    assert bare.closing(tokenizer.bos_token_id) == "<|eos|>\n" == bare.closing(5)


CHATML = ("{% for m in messages %}<|im_start|>{{ 'user' if m['role'] == 'tool' else m['role'] }}\n"
          "{% if m['role'] == 'tool' %}<tool_response>\n{{ m['content'] }}\n</tool_response>"
          "{% else %}{{ m['content'] }}{% endif %}{{ eos_token }}\n\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""A ChatML-like template (Qwen's shape) without a BOS, tool results in a user turn, two newlines after EOS."""


def test_another_template_has_no_drift_either(demo_assets):
    tokenizer = load_tokenizer(demo_assets["model"])
    tokenizer.chat_template = CHATML
    call = format_tool_call("calculator", {"expression": "2 * 21"})
    scripts = [[ids(tokenizer, call), ids(tokenizer, call + " cut", eos=False), ids(tokenizer, "42")]]
    env = make_environment({"type": "tools", "tools": ["calculator"]}, EnvironmentContext())
    limits = MultiTurn(max_turns=4)
    episodes, backend, _, conversations = run(tokenizer, scripts, [env], limits=limits)
    [episode] = episodes
    assert episode.turns == 3 and [m["role"] for m in episode.messages] == ["assistant", "tool", "assistant",
                                                                              "tool", "assistant"]
    full = episode.prompt_ids + episode.response_ids
    for call_ in backend.calls:
        assert full[:len(call_["prompts"][0])] == call_["prompts"][0]
    transcript = [{"role": m["role"], "content": m["content"]} for m in conversations[0] + episode.messages]
    assert tokenizer.apply_chat_template(transcript, tokenize=False) == tokenizer.decode(full) + "\n\n"


THINKING = CHATML.replace("{% else %}{{ m['content'] }}", "{% else %}{% if m['role'] == 'assistant' and loop.last %}"
                          "<think>\n\n</think>\n\n{% endif %}{{ m['content'] }}")
"""Qwen3's shape: an assistant turn that is the last message carries an empty think block, which it loses
once another message follows (re-rendering the transcript would change earlier tokens)."""


def test_a_template_that_rewrites_the_last_assistant_turn_is_continued_from_a_user_base(demo_assets):
    tokenizer = load_tokenizer(demo_assets["model"])
    tokenizer.chat_template = THINKING
    call = format_tool_call("calculator", {"expression": "2 * 21"})
    scripts = [[ids(tokenizer, call), ids(tokenizer, "42")]]
    env = make_environment({"type": "tools", "tools": ["calculator"]}, EnvironmentContext())
    [episode], backend, prompts, _ = run(tokenizer, scripts, [env])
    assert episode.turns == 2 and episode.failed is None
    assert backend.calls[1]["prompts"][0] == prompts[0] + scripts[0][0] + ids(
        tokenizer, "\n\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|eos|>\n\n<|im_start|>assistant\n",
        eos=False)
    assert episode.prompt_ids + episode.response_ids == backend.calls[1]["prompts"][0] + scripts[0][1]


def test_per_turn_rewards_land_on_turn_ends_and_max_turns_truncates(tokenizer):
    scripts = [[ids(tokenizer, f"turn {t}") for t in range(5)]]
    env = Counter(reward=0.5)
    [episode], backend, _, conversations = run(tokenizer, scripts, [env], limits=MultiTurn(max_turns=3))
    assert episode.truncated and episode.turns == 3 and episode.final_reward is None
    assert episode.turn_rewards == [0.5, 1.0, 1.5]
    assert len(episode.turn_ends) == 3 and all(episode.loss_mask[k] == 1 for k in episode.turn_ends)
    assert episode.final_text == "turn 2" and env.closed
    assert_no_drift(tokenizer, backend, 0, episode, conversations[0])
    # Seeds: turn 0 samples with the episode's own seed (as a single-turn rollout would), then derived ones.
    assert [c["seeds"] for c in backend.calls] == [[100], [row_seed(100, 1)], [row_seed(100, 2)]]


def test_max_tool_calls_truncates(tokenizer):
    scripts = [[ids(tokenizer, "go")] * 5]
    [episode], _, _, _ = run(tokenizer, scripts, [Counter(calls_per_turn=2)], limits=MultiTurn(max_tool_calls=3))
    assert episode.truncated and episode.turns == 2 and episode.tool_calls == 4
    [episode], _, _, _ = run(tokenizer, scripts, [Counter(calls_per_turn=2)],
                             limits=MultiTurn(max_turns=3, max_tool_calls=6))
    assert episode.truncated and episode.turns == 3 and episode.tool_calls == 6  # cut by turns, not calls


def test_the_token_budget_cuts_turns_and_truncates(tokenizer):
    long = ids(tokenizer, "one two three four five six seven eight nine ten", eos=False)
    scripts = [[long, long, long], [ids(tokenizer, "ok")] * 3]
    episodes, backend, _, _ = run(tokenizer, scripts, [Counter(), Counter()], max_tokens=24,
                                  limits=MultiTurn(max_turns=3), params=SamplingParams(max_new_tokens=8))
    first, second = episodes
    assert len(long) > 8  # each turn is cut at 8 tokens, without EOS
    observation = ChatDelta(tokenizer, {2}).after_turn(long[7], [{"role": "user", "content": "again 1"}])
    second_turn = min(8, 24 - 8 - len(observation))  # what is left of the budget after turn 1 and its answer
    assert first.truncated and first.turns == 2 and len(first.response_ids) == 24
    assert first.loss_mask == [1] * 8 + [0] * len(observation) + [1] * second_turn
    assert first.response_ids == long[:8] + observation + long[:second_turn]
    assert first.turn_ends == [7, 23]
    # One call per turn for the whole batch, asking for the most any live episode may still sample.
    assert [c["params"].max_new_tokens for c in backend.calls][:2] == [8, 8]
    assert backend.calls[2]["params"].max_new_tokens == 24 - second.final_span[0] < 8
    assert [c["episodes"] for c in backend.calls] == [[0, 1], [0, 1], [1]]
    assert second.turns == 3 and second.truncated  # the same batch: lengths differ per episode
    assert second.turn_ends != first.turn_ends
    # max_episode_tokens below max_tokens wins.
    [short], _, _, _ = run(tokenizer, scripts[:1], [Counter()], max_tokens=256,
                           limits=MultiTurn(max_episode_tokens=6), params=SamplingParams(max_new_tokens=8))
    assert short.truncated and short.response_ids == long[:6] and short.turns == 1


def test_a_failing_environment_fails_only_its_episode(tokenizer):
    scripts = [[ids(tokenizer, "a")] * 3, [ids(tokenizer, "b")] * 3, [ids(tokenizer, "c")] * 3]
    envs = [Counter(fail_at=2), Counter(fail_at="reset"), Counter()]
    episodes, backend, _, _ = run(tokenizer, scripts, envs, limits=MultiTurn(max_turns=3))
    broken_step, broken_reset, fine = episodes
    assert broken_step.failed == "the server went away" and broken_step.turns == 2
    assert broken_step.response_ids and set(broken_step.loss_mask) == {0}
    assert len(broken_step.turn_rewards) == len(broken_step.turn_ends)
    assert broken_reset.failed == "the environment raised RuntimeError" and broken_reset.response_ids == []
    assert fine.failed is None and fine.turns == 3 and 1 in fine.loss_mask
    assert [c["episodes"] for c in backend.calls] == [[0, 2], [0, 2], [2]]
    assert all(env.closed for env in envs)


def test_env_seconds_and_missing_log_probs(tokenizer):
    scripts = [[ids(tokenizer, "a")] * 2]
    [episode], _, _, _ = run(tokenizer, scripts, [Counter(sleep=0.05)], limits=MultiTurn(max_turns=2),
                             log_probs=False)
    assert episode.env_seconds >= 0.1
    assert episode.sampling_log_probs == [0.0] * len(episode.response_ids)


class Meeting(Counter):
    """Steps only when every environment of the batch is stepping at the same time."""

    def __init__(self, barrier):
        super().__init__()
        self.barrier = barrier

    def step(self, text):
        self.barrier.wait(timeout=10)
        return super().step(text)


def test_environments_of_a_batch_answer_concurrently(tokenizer):
    barrier = threading.Barrier(4)
    scripts = [[ids(tokenizer, "a")] * 2 for _ in range(4)]
    episodes, _, _, _ = run(tokenizer, scripts, [Meeting(barrier) for _ in range(4)], limits=MultiTurn(max_turns=2))
    assert [e.failed for e in episodes] == [None] * 4 and [e.turns for e in episodes] == [2] * 4


def test_an_unknown_tool_format_is_refused(tokenizer):
    with pytest.raises(ConfigError) as caught:
        run(tokenizer, [[ids(tokenizer, "a")]], [Counter()], limits=MultiTurn(tool_format="xml"))
    assert caught.value.param == "rollout.multi_turn.tool_format"


class Greeter(Counter):
    """A first observation at reset (as a remote environment's initial state is)."""

    def reset(self, row):
        return [{"role": "user", "content": "Board: X.O"}]


def test_a_first_observation_extends_the_prompt(tokenizer):
    scripts = [[ids(tokenizer, "move")] * 2]
    [episode], backend, prompts, conversations = run(tokenizer, scripts, [Greeter()], limits=MultiTurn(max_turns=1))
    expected = prompt_token_ids(tokenizer, conversations[0] + [{"role": "user", "content": "Board: X.O"}])
    assert episode.prompt_ids == expected and episode.prompt_ids[:len(prompts[0]) - 3] == prompts[0][:-3]
    assert backend.calls[0]["prompts"] == [expected]
    assert episode.messages[0] == {"role": "user", "content": "Board: X.O"}


# --- the real sampler ----------------------------------------------------------------------------------

def test_hf_rollout_drives_episodes_without_drift(demo_assets, tokenizer, one_thread):
    from transformers import AutoModelForCausalLM

    from engine.rollout.hf import HFRollout
    from engine.rollout.sampling import eos_token_ids

    model = AutoModelForCausalLM.from_pretrained(demo_assets["model"])
    backend = HFRollout(model, tokenizer.pad_token_id, eos_token_ids(tokenizer, model))
    fed, sampled = [], []

    class Recording:  # the backend, recording what each turn was fed and sampled
        eos_token_ids = backend.eos_token_ids

        def generate(self, prompts, seeds, params):
            out = backend.generate(prompts, seeds, params)
            self.last_log_probs = backend.last_log_probs
            fed.append([list(p) for p in prompts])
            sampled.append(out)
            return out

    conversations = chats(6)
    prompts = [prompt_token_ids(tokenizer, c) for c in conversations]
    specs = [{"type": "echo_token"}, {"type": "arithmetic"}, {"type": "tools", "tools": ["calculator"]}] * 2
    envs = [make_environment(s, EnvironmentContext(seed=1)) for s in specs]
    rows = [{"prompt": c[0]["content"], "ground_truth": str(i + 3)} for i, c in enumerate(conversations)]
    episodes = run_episodes(Recording().generate, tokenizer, prompts, conversations, envs, rows, list(range(6)),
                            SamplingParams(max_new_tokens=6), MultiTurn(max_turns=3), 40)
    assert [e.turns for e in episodes[:2]] == [2, 1] and all(e.failed is None for e in episodes)
    assert all(e.final_reward in (0.0, 1.0) for e in episodes[:2])
    for i, episode in enumerate(episodes):
        full = episode.prompt_ids + episode.response_ids
        own = [(p, out) for call, outs in zip(fed, sampled) for p, out in zip(call, outs)
               if p[:len(prompts[i])] == prompts[i]]
        assert len(own) == episode.turns
        observations = iter(m for m in episode.messages if m["role"] != "assistant")
        transcript = list(conversations[i])
        for k, (ids_fed, response) in enumerate(own):
            assert full[:len(ids_fed)] == ids_fed  # fed at turn k: a prefix of what is trained
            start, end = len(ids_fed) - len(episode.prompt_ids), episode.turn_ends[k] + 1
            assert episode.response_ids[start:end] == response[:end - start]
            assert episode.loss_mask[start:end] == [1] * (end - start)
            kept = response[:end - start]
            content = kept[:-1] if kept[-1] == tokenizer.eos_token_id else kept
            transcript.append({"role": "assistant", "content": tokenizer.decode(content)})
            if k + 1 < len(own):
                transcript.append(next(observations))
        rendered, decoded = tokenizer.apply_chat_template(transcript, tokenize=False), tokenizer.decode(full)
        ended = full[-1] == tokenizer.eos_token_id
        assert rendered == decoded + ("\n" if ended else "<|eos|>\n")
        assert sum(episode.loss_mask) == sum(1 + end - (len(fed_) - len(episode.prompt_ids))
                                             for (fed_, _), end in zip(own, episode.turn_ends))
        real = [lp for lp, m in zip(episode.sampling_log_probs, episode.loss_mask) if m]
        assert all(lp < 0 for lp in real)
        assert all(lp == 0.0 for lp, m in zip(episode.sampling_log_probs, episode.loss_mask) if not m)
