"""Agentic reinforcement fine-tuning on the OpenAI route, with the official client against a live Keel:
rows carrying `tools` become a PPO job with `rollout.multi_turn.enable` and a per-row `tools` environment;
Keel's own fields under Keel's names (`hyperparameters.multi_turn`, `environment`); bad tool shapes and
episode fields are 400s naming the field; an episode's grader sample (`output_tools`, `messages`)."""

from __future__ import annotations

import json
import time

import openai
import pytest
from openai_support import jsonl

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALCULATOR = {"type": "function", "function": {"name": "calculator"}}
ROWS = [{"messages": [{"role": "user", "content": "What is 17 * 23? Use the calculator."}],
         "tools": [CALCULATOR], "answer": "391"},
        {"messages": [{"role": "user", "content": "Is it raining in Paris?"}],
         "tools": [WEATHER, CALCULATOR], "answer": "no"}]
GRADER = {"type": "string_check", "name": "answer", "input": "{{sample.output_text}}", "reference": "{{item.answer}}",
          "operation": "ilike"}


def _method(**reinforcement) -> dict:
    return {"type": "reinforcement", "reinforcement": {"grader": GRADER, **reinforcement}}


def test_rows_with_tools_become_a_multi_turn_ppo_job(oai, tmp_path, demo_assets):
    train = oai.files.create(file=jsonl(tmp_path, "agentic.jsonl", ROWS).open("rb"), purpose="fine-tune")
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method=_method(
        hyperparameters={"batch_size": 2, "multi_turn": {"max_turns": 3, "max_tool_calls": 2}}))
    try:
        resolved = job.to_dict()["method"]["reinforcement"]["hyperparameters"]["multi_turn"]
        assert (resolved["enable"], resolved["max_turns"], resolved["max_tool_calls"]) == (True, 3, 2)
        keel = oai.get(f"/jobs/{job.id}", cast_to=object)
        assert keel["method"]["type"] == "ppo" and keel["method"]["reward"]["function"] == "grader"
        turns = keel["method"]["hyperparameters"]["rollout"]["multi_turn"]
        assert (turns["enable"], turns["max_turns"], turns["max_tool_calls"]) == (True, 3, 2)
        assert keel["method"].get("environment") is None  # every row names its own
        converted = [json.loads(line) for line in oai.files.content(keel["training_file"]).text.splitlines()]
        assert [r["environment"] for r in converted] == [{"type": "tools", "tools": r["tools"]} for r in ROWS]
        assert json.loads(converted[1]["ground_truth"])["answer"] == "no"  # the grader's item, as before
    finally:
        oai.fine_tuning.jobs.cancel(job.id)


def test_an_environment_serves_rows_without_tools(oai, tmp_path, demo_assets):
    """Keel's `environment` (a job-wide spec) with rows that carry no tools, and with rows that partly do."""
    plain = [{"messages": [{"role": "user", "content": "Play."}], "answer": "maple"}]
    mixed = oai.files.create(file=jsonl(tmp_path, "mixed.jsonl", [ROWS[0], *plain]).open("rb"), purpose="fine-tune")
    for rows in (plain, [ROWS[0], *plain]):
        train = oai.files.create(file=jsonl(tmp_path, "env.jsonl", rows).open("rb"), purpose="fine-tune")
        job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method=_method(
            environment={"type": "echo_token"}))
        try:
            keel = oai.get(f"/jobs/{job.id}", cast_to=object)
            assert keel["method"]["environment"] == {"type": "echo_token"}
            assert keel["method"]["hyperparameters"]["rollout"]["multi_turn"]["enable"] is True
            assert job.to_dict()["method"]["reinforcement"]["environment"] == {"type": "echo_token"}
        finally:
            oai.fine_tuning.jobs.cancel(job.id)
    with pytest.raises(openai.BadRequestError) as err:  # the row without tools would have no environment
        oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=mixed.id, method=_method())
    assert err.value.param == "training_file" and "1 of 2 rows" in err.value.message
    agentic = oai.files.create(file=jsonl(tmp_path, "tools.jsonl", ROWS).open("rb"), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError) as err:  # validation rows run as episodes too
        oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=agentic.id, validation_file=mixed.id,
                                    method=_method())
    assert err.value.param == "validation_file" and "1 of 2 rows" in err.value.message


@pytest.mark.parametrize(("tools", "param"), [
    ({"type": "function"}, "tools"),
    (["calculator"], "tools[0]"),
    ([{"type": "code_interpreter"}], "tools[0].type"),
    ([{"type": "function", "function": {"name": "get weather"}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"description": "no name"}}], "tools[0].function.name"),
    ([CALCULATOR, CALCULATOR], "tools[1].function.name"),
    ([{"type": "function", "function": {"name": "f", "parameters": "{}"}}], "tools[0].function.parameters"),
    ([{"type": "function", "function": {"name": "f", "parameter": {}}}], "tools[0].function.parameter"),
])
def test_bad_tools_are_refused_at_upload_naming_the_field(oai, tmp_path, tools, param):
    rows = [ROWS[0], {**ROWS[1], "tools": tools}]
    with pytest.raises(openai.BadRequestError) as err:
        oai.files.create(file=jsonl(tmp_path, "bad-tools.jsonl", rows).open("rb"), purpose="fine-tune")
    assert err.value.param == param and "line 2" in err.value.message.lower()


@pytest.mark.parametrize(("rows", "reinforcement", "param"), [
    (ROWS, {"hyperparameters": {"multi_turn": {"max_turns": 0}}},
     "method.reinforcement.hyperparameters.multi_turn.max_turns"),
    (ROWS, {"hyperparameters": {"multi_turn": {"turns": 2}}}, "method.reinforcement.hyperparameters.multi_turn.turns"),
    (ROWS, {"hyperparameters": {"multi_turn": {"max_episode_tokens": 5000}}},  # over data.max_response_length
     "method.reinforcement.hyperparameters.multi_turn.max_episode_tokens"),
    (ROWS, {"environment": {"type": "chess"}}, "method.reinforcement.environment.type"),
    (ROWS, {"environment": {"type": "openenv", "url": "http://169.254.169.254/"}}, "method.reinforcement.environment.url"),
    ([{"messages": [{"role": "user", "content": "q"}], "answer": "a"}],
     {"hyperparameters": {"multi_turn": {"enable": True}}}, "method.reinforcement.hyperparameters.multi_turn"),
])
def test_bad_episode_fields_are_refused_naming_the_field(oai, tmp_path, demo_assets, rows, reinforcement, param):
    train = oai.files.create(file=jsonl(tmp_path, "rows.jsonl", rows).open("rb"), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method=_method(**reinforcement))
    assert err.value.param == param and err.value.code


def test_an_episode_sample_gives_graders_its_tool_calls_and_transcript():
    """`{{sample.output_text}}` is the final turn; `output_tools` (OpenAI's name) every call of the episode;
    `messages` (Keel's) the transcript, as JSON."""
    from engine.rewards.graders import Grader, sample_of

    transcript = [
        {"role": "assistant", "content": "", "tool_calls": [{"name": "calculator", "arguments": {"expression": "17*23"}}]},
        {"role": "tool", "name": "calculator", "content": "391"},
        {"role": "assistant", "content": "391"}]
    sample = sample_of("391", transcript)
    assert sample["output_tools"] == [{"id": "call_0_0", "type": "function", "function": {
        "name": "calculator", "arguments": json.dumps({"expression": "17*23"})}}]
    grader = Grader({"type": "multi", "name": "m", "calculate_output": "answer + used + saw",
                     "graders": {"answer": {**GRADER, "operation": "eq"},
                                 "used": {"type": "string_check", "name": "used", "operation": "eq",
                                          "input": "{{sample.output_tools.0.function.name}}", "reference": "calculator"},
                                 "saw": {"type": "string_check", "name": "saw", "operation": "like",
                                         "input": "{{sample.messages}}", "reference": "\"role\": \"tool\""}}})
    assert grader.score([sample], [{"answer": "391"}])[0].score == 3.0
    single = grader.score([sample_of("391")], [{"answer": "391"}])[0]  # no episode: the fields are missing
    assert single.score == 0.0 and single.error["param"].endswith("input")


def test_the_reward_role_grades_an_episode_with_its_transcript(demo_assets):
    """The PPO Reward role gives a `grader` the episode's sample: the final turn as `output_text` (not the
    tool results before it), the tool calls and the transcript."""
    from engine.config import PPOConfig, build_config
    from engine.models import load_tokenizer
    from engine.roles.batch import build_batch
    from engine.roles.episode_batch import tensors
    from engine.roles.reward import Reward
    from engine.rollout.episodes import Episode

    tokenizer = load_tokenizer(demo_assets["model"])
    call = {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"17*23\"}"}}
    first, final = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("call it", "391"))
    episodes = [Episode(response_ids=first + final, loss_mask=[1] * (len(first) + len(final)),
                        sampling_log_probs=[0.0] * (len(first) + len(final)),
                        turn_ends=[len(first) - 1, len(first) + len(final) - 1], turn_rewards=[0.0, 0.0],
                        final_text="391", final_span=(len(first), len(first) + len(final)), turns=2, tool_calls=calls,
                        messages=[{"role": "assistant", "content": "call it", "tool_calls": [call] * calls},
                                  {"role": "tool", "name": "calculator", "content": "391"},
                                  {"role": "assistant", "content": "391"}])
                for calls in (1, 0)]
    responses = [e.response_ids for e in episodes]
    batch = build_batch([[1, 2]] * 2, responses, prompt_width=2, response_width=len(responses[0]),
                        pad_id=tokenizer.pad_token_id)
    batch.update(tensors(episodes, len(responses[0])))
    grader = {"type": "multi", "name": "m", "calculate_output": "answer + used",
              "graders": {"answer": {**GRADER, "operation": "eq"},
                          "used": {"type": "string_check", "name": "used", "operation": "like",
                                   "input": "{{sample.output_tools}}", "reference": "calculator"}}}
    role = Reward(build_config(PPOConfig, {}), tokenizer_path=demo_assets["model"],
                  functions={}, function="grader", options={"grader": json.dumps(grader)})
    out = role.compute_scores(batch, [{"ground_truth": json.dumps({"answer": "391"})}] * 2)
    assert out["scores"].tolist() == [2.0, 1.0]


@pytest.mark.slow
def test_an_agentic_job_runs_to_success(oai, tmp_path, demo_assets, celery_worker):
    """The whole way: rows with tools -> a multi-turn GRPO job on the demo model that trains its episodes and
    reports the episode metrics (one step of two rows, two samples each, a few tokens a turn)."""
    train = oai.files.create(file=jsonl(tmp_path, "agentic-run.jsonl", ROWS).open("rb"), purpose="fine-tune")
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, method={
        **_method(hyperparameters={"n_epochs": 1, "batch_size": 2, "compute_multiplier": 0.5,
                                   "multi_turn": {"max_turns": 2, "max_tokens_per_turn": 6}}),
        "keel_overrides": ["data.max_response_length=16"]})
    deadline = time.monotonic() + 600
    while (done := oai.fine_tuning.jobs.retrieve(job.id)).status not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, done.status
        time.sleep(1)
    assert done.status == "succeeded", done.error
    values = [e.data["values"] for e in oai.fine_tuning.jobs.list_events(job.id, limit=100).data
              if e.type == "metrics"]
    assert values and all(v["episode/turns/mean"] >= 1 and "episode/tool_calls/mean" in v for v in values)
