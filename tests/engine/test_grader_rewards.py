"""`score_model` graders (engine/rewards/score_model.py) against the demo models, and graders as PPO's
reward: the Reward role scores whole batches with one Grader and loads a score model once per job."""

from __future__ import annotations

import json
import math

import pytest
import torch

from engine.config import JobRequest, ModelConfig, PPOConfig, Resources, build_config
from engine.methods.ppo import PPOTrainer
from engine.rewards import graders
from engine.rewards.score_model import first_number
from engine.runtime.reporting import RecordingReporter

JUDGE_INPUT = [{"role": "developer", "content": "Rate the answer from 0 to 10."},
               {"role": "user", "content": [{"type": "input_text", "text": "{{item.question}}"}]},
               {"role": "assistant", "content": "Answer: {{sample.output_text}}. Score:"}]


@pytest.fixture(scope="module")
def reward_model(demo_assets, tmp_path_factory) -> str:
    """The demo policy with a seeded score head: a reward model with a fixed, non-trivial scalar."""
    from engine.models import load_reward_model, load_tokenizer, save_model

    out = tmp_path_factory.mktemp("grader-rm") / "rm"
    torch.manual_seed(0)
    save_model(load_reward_model(demo_assets["model"], ModelConfig()), load_tokenizer(demo_assets["model"]), out)
    return str(out)


@pytest.fixture(scope="module")
def judge_seven(demo_assets, tmp_path_factory) -> str:
    """The demo policy with a generation config that biases it to answer "7" and stop: a judge whose
    answer is known (the random demo model never says a number)."""
    import shutil

    from transformers import AutoTokenizer, GenerationConfig

    out = tmp_path_factory.mktemp("grader-judge") / "judge"
    shutil.copytree(demo_assets["model"], out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    seven = tokenizer("7", add_special_tokens=False)["input_ids"]
    config = GenerationConfig.from_pretrained(out)
    config.sequence_bias = [[seven, 50.0], [[*seven, tokenizer.eos_token_id], 100.0]]
    config.save_pretrained(out)
    return str(out)


def score_model(model: str, **extra) -> dict:
    return {"type": "score_model", "name": "judge", "model": model, "input": JUDGE_INPUT, **extra}


@pytest.mark.parametrize(("text", "want"), [("Score: 7/10", 7.0), ("-2.5e1 points", -25.0), (".5", 0.5),
                                            ("I give it 10, no 3", 10.0), ("none", None), ("", None)])
def test_the_first_number_is_the_judges_score(text, want):
    assert first_number(text) == want


def test_a_policy_judge_scores_what_greedy_decoding_says(demo_assets):
    """The grader's score is the first number of the judge's greedy output, clamped to `range`: checked
    against transformers' own generate on the same prompt (or, without a number, a parse error)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = score_model("judge", range=[0, 10], sampling_params={"max_completions_tokens": 6})
    grader = graders.Grader(spec, graders.Context(models={"judge": demo_assets["model"]}))
    samples = [graders.sample_of(t) for t in ("7", "seven", "#### 12")]
    items = [{"question": "What is 3 + 4?"}] * 3
    results = grader.score(samples, items)
    assert grader.score(samples, items) == results  # greedy: deterministic

    tokenizer = AutoTokenizer.from_pretrained(demo_assets["model"])
    model = AutoModelForCausalLM.from_pretrained(demo_assets["model"]).eval()
    for sample, result in zip(samples, results):
        messages = [{"role": "system", "content": "Rate the answer from 0 to 10."},
                    {"role": "user", "content": "What is 3 + 4?"},
                    {"role": "assistant", "content": f"Answer: {sample['output_text']}. Score:"}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        said = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        number = first_number(said)
        usage = result.usage["judge"]
        assert usage["prompt_tokens"] == ids.shape[1] and 1 <= usage["completion_tokens"] <= 6
        if number is None:
            assert result.score == 0.0 and result.error["flag"] == "model_grader_parse_error"
            assert graders.errors_object(result.error)["model_grader_parse_error"] is True
        else:
            assert result.error is None and result.score == min(10.0, max(0.0, number))


@pytest.mark.parametrize(("bounds", "want"), [([0, 10], 7.0), ([0, 5], 5.0), ([8, 9.5], 8.0)])
def test_the_judges_number_is_clamped_to_the_range(judge_seven, bounds, want):
    spec = score_model("judge", range=bounds, sampling_params={"max_completions_tokens": 4})
    result = graders.Grader(spec, graders.Context(models={"judge": judge_seven})).score(
        [graders.sample_of("7")], [{"question": "What is 3 + 4?"}])[0]
    assert (result.score, result.error) == (want, None)
    assert result.usage["judge"]["completion_tokens"] == 2  # "7", then EOS


def test_sampling_params_are_honoured(demo_assets):
    context = graders.Context(models={"judge": demo_assets["model"]})
    samples, items = [graders.sample_of("7")] * 6, [{"question": "What is 3 + 4?"}] * 6

    def tokens(**sampling):
        spec = score_model("judge", range=[0, 10], sampling_params=sampling)
        return [r.usage["judge"]["completion_tokens"] for r in graders.Grader(spec, context).score(samples, items)]

    assert max(tokens(max_completions_tokens=2)) <= 2 < max(tokens(max_completions_tokens=12))
    spec = score_model("judge", range=[0, 10], sampling_params={"temperature": 1.5, "seed": 1,
                                                                "max_completions_tokens": 12})
    hot = graders.Grader(spec, context)
    again = [r.error or r.score for r in hot.score(samples, items)]
    assert again == [r.error or r.score for r in hot.score(samples, items)]  # the seed fixes the draw
    greedy = graders.Grader(score_model("judge", range=[0, 10], sampling_params={"max_completions_tokens": 12}),
                            context).score(samples, items)
    assert len({json.dumps(r.error or r.score) for r in greedy}) == 1  # one prompt, one greedy answer
    other = graders.Grader({**spec, "sampling_params": {**spec["sampling_params"], "seed": 2}}, context)
    draws = [json.dumps(r.error or r.score) for r in hot.score(samples, items) + other.score(samples, items)]
    assert len(set(draws)) > 1  # temperature 1.5: the answers vary


def test_score_models_must_be_given_to_the_grader():
    with pytest.raises(graders.GraderError) as err:
        graders.Grader({"type": "multi", "name": "m", "calculate_output": "j", "graders": {"j": score_model("x")}})
    assert err.value.param == "grader.graders.j.model"
    for bad, param in (({"range": [1, 1]}, "grader.range"), ({"sampling_params": {"top_k": 3}},
                                                              "grader.sampling_params.top_k"),
                       ({"input": [{"role": "tool", "content": "x"}]}, "grader.input.0.role"),
                       ({"input": [{"role": "user", "content": {"type": "input_image", "image_url": "x"}}]},
                        "grader.input.0.content")):
        with pytest.raises(graders.GraderError) as err:
            graders.validate({**score_model("x"), **bad})
        assert err.value.param == param, bad


def _request(assets, tmp, grader: dict, grading: dict) -> JobRequest:
    cfg = build_config(PPOConfig, {"data": {"train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
                                   "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1, "optim": {"lr": 1e-4}},
                                   "rollout": {"n": 2}, "algorithm": {"adv_estimator": "grpo"},
                                   "trainer": {"total_training_steps": 2, "test_freq": 2}})
    return JobRequest(job_id="grader-ppo", method="ppo", config=cfg, model_path=assets["model"],
                      training_file=assets["prompts_train"], validation_file=assets["prompts_val"],
                      output_dir=str(tmp / "out"), checkpoint_dir=str(tmp / "ckpt"), seed=5,
                      reward={"function": "grader", "options": {"grader": json.dumps(grader)}, "grading": grading},
                      resources=Resources(executor="local"))


@pytest.mark.slow
def test_ppo_with_a_multi_grader_of_rule_python_and_score_model_members(demo_assets, reward_model, tmp_path,
                                                                         monkeypatch):
    """string_check + python + a reward-model score_model, in one PPO job (roles in this process): it
    trains, the scores are the formula's, and the reward model is loaded once for the whole job."""
    import engine.models

    loads: list[str] = []
    real = engine.models.load_reward_model
    monkeypatch.setattr(engine.models, "load_reward_model", lambda path, *a, **k: loads.append(path) or real(
        path, *a, **k))
    grader = {"type": "multi", "name": "all", "calculate_output": "right + 0.5 * length + rm",
              "graders": {
                  "right": {"type": "string_check", "name": "right", "input": "{{sample.output_text}}",
                            "reference": "{{item.ground_truth}}", "operation": "like"},
                  "length": {"type": "python", "name": "length",
                             "source": "def grade(sample, item):\n    return min(1.0, len(sample['output_text']) / 20)\n"},
                  "rm": {"type": "score_model", "name": "rm", "model": "model-rm", "range": [0, 1],
                         "input": [{"role": "user", "content": "{{item.ground_truth}}"}]}}}
    reporter = RecordingReporter()
    result = PPOTrainer(_request(demo_assets, tmp_path, grader, {"python": {"cpu_s": 5, "wall_s": 20},
                                                                 "models": {"model-rm": reward_model}}),
                        reporter).fit()
    assert reporter.steps() == [1, 2]
    scores = reporter.series("critic/score/mean")
    # rm in (0, 1) (a sigmoid), length > 0 for a non-empty response: every mean is strictly positive.
    assert all(math.isfinite(s) and s > 0 for s in scores), scores
    assert "val/reward/mean" in result.metrics
    assert loads == [reward_model]  # once per job, not per batch or sample


@pytest.mark.slow
def test_ppo_refuses_a_python_grader_the_deployment_does_not_allow(demo_assets, tmp_path):
    from engine.errors import ConfigError

    grader = {"type": "python", "name": "p", "source": "def grade(sample, item):\n    return 1\n"}
    with pytest.raises(ConfigError) as err:
        PPOTrainer(_request(demo_assets, tmp_path, grader, {"python": None}), RecordingReporter()).fit()
    assert err.value.code == "python_graders_disabled"
    assert err.value.param == "method.reward.options.grader.type"
