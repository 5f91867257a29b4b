"""engine.methods.evaluate on the demo assets: metrics and the results file, every knob, compare_to with a
reward model, data parallelism on Ray; the pass@k and win-rate estimators on hand-computed cases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from engine.algos.evaluation import (
    mean_pass_at_k,
    pairwise_outcome,
    pass_at_k,
    pass_at_k_levels,
    win_rate,
)
from engine.config import EvalConfig, JobRequest, ModelConfig, Resources, build_config
from engine.errors import Cancelled, DataError, Paused
from engine.methods.evaluate import RESULTS_NAME, run_eval
from engine.rewards.rules import register_reward, unregister_reward
from engine.runtime.reporting import RecordingReporter

TINY = {"data": {"max_prompt_length": 32, "max_response_length": 6, "val_batch_size": 16},
        "rollout": {"n": 4, "temperature": 1.0}}


pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (tests/engine/conftest.py)


@pytest.fixture(scope="module")
def prompts(demo_assets, tmp_path_factory) -> str:
    """The first 12 demo validation prompts, as JSON Lines."""
    import pyarrow.parquet as pq

    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    rows = pq.read_table(demo_assets["prompts_val"]).to_pylist()[:12]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def even_first_token():
    """A rule reward the random model passes about half the time: 1.0 when the response's first
    token id is even."""
    def score(response, ground_truth, *, response_ids, **_):
        return float(bool(response_ids) and response_ids[0] % 2 == 0)

    register_reward("even_first_token")(score)
    yield "even_first_token"
    unregister_reward("even_first_token")


def merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def make_request(assets, prompts: str, tmp: Path, *, config: dict | None = None, reward: dict | None = None,
                 compare_to: str | None = None, resources: Resources | None = None) -> JobRequest:
    return JobRequest(job_id="eval-test", method="eval", config=build_config(EvalConfig, merge(TINY, config or {})),
                      model_path=assets["model"], training_file=prompts, output_dir=str(tmp / "out"),
                      checkpoint_dir=str(tmp / "ckpt"), seed=5, reward=reward or {"function": "gsm8k"},
                      compare_to_path=compare_to, resources=resources or Resources(executor="local"))


def results(request: JobRequest) -> list[dict]:
    lines = (Path(request.output_dir) / RESULTS_NAME).read_text().splitlines()
    return [json.loads(line) for line in lines]


def responses(rows: list[dict]) -> list[str]:
    return [r["response"] for r in rows]


# --- the estimators, by hand -----------------------------------------------------------------------

@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (4, 1, 1, 0.25),          # pass@1 is c / n
    (4, 1, 2, 1 - 3 / 6),     # 1 - C(3,2)/C(4,2)
    (4, 2, 2, 1 - 1 / 6),     # 1 - C(2,2)/C(4,2)
    (4, 3, 2, 1.0),           # fewer failures than k: every draw passes
    (4, 0, 4, 0.0),
    (4, 1, 4, 1.0),
    (5, 2, 4, 1.0),           # n - c = 3 < 4
    (8, 2, 4, 1 - 15 / 70),   # 1 - C(6,4)/C(8,4)
])
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_levels_mean_and_bad_input():
    assert pass_at_k_levels(1) == [1] and pass_at_k_levels(5) == [1, 2, 4] and pass_at_k_levels(8) == [1, 2, 4, 8]
    assert mean_pass_at_k([1, 2], 4, 2) == pytest.approx((0.5 + 5 / 6) / 2)
    for n, c, k in ((4, 5, 1), (4, 1, 0), (4, 1, 5), (4, -1, 1)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        mean_pass_at_k([], 4, 1)


def test_win_rate_and_its_clustered_standard_error_by_hand():
    assert (pairwise_outcome(2.0, 1.0), pairwise_outcome(1.0, 2.0), pairwise_outcome(1.0, 1.0 + 1e-9)) == (1.0, 0.0, 0.5)
    # Two prompts, two pairs each: per-prompt means 0.5 and 0.75, sd 0.1768, se = sd / sqrt(2) = 0.125.
    rate, se = win_rate([1.0, 0.0, 0.5, 1.0], [0, 0, 1, 1])
    assert rate == pytest.approx(0.625) and se == pytest.approx(0.125)
    # One pair per prompt: the plain s / sqrt(N) = 0.5 / 2.
    rate, se = win_rate([1.0, 0.0, 1.0, 1.0], [0, 1, 2, 3])
    assert rate == pytest.approx(0.75) and se == pytest.approx(0.25)
    rate, se = win_rate([1.0, 0.5], [3, 3])
    assert rate == pytest.approx(0.75) and math.isnan(se)
    with pytest.raises(ValueError):
        win_rate([1.0], [0, 1])


# --- runs --------------------------------------------------------------------------------------------

def test_gsm8k_eval_reports_metrics_and_writes_every_sample(demo_assets, prompts, tmp_path):
    reporter = RecordingReporter()
    request = make_request(demo_assets, prompts, tmp_path)
    result = run_eval(request, reporter)
    assert result.model_kind is None and result.model_format is None
    assert [(f.purpose, f.name, f.rows) for f in result.files] == [("eval_results", RESULTS_NAME, 48)]
    (event,) = reporter.of("metrics")  # one summary event
    assert event["step"] == 1 and event["total_steps"] == 1 and event["values"] == result.metrics
    m = result.metrics
    for name in ("eval/reward/mean", "eval/reward/std", "eval/response_length/mean", "eval/pass@1", "eval/pass@2",
                 "eval/pass@4"):
        assert math.isfinite(m[name]), name
    assert "eval/pass@8" not in m and "eval/win_rate" not in m
    rows = results(request)
    assert len(rows) == 12 * 4 and m["eval/num_samples"] == 48 and m["eval/num_prompts"] == 12
    assert [(r["prompt_index"], r["sample_index"]) for r in rows] == [(i, j) for i in range(12) for j in range(4)]
    first = rows[0]
    assert first["prompt"].startswith("What is") and first["data_source"] == "gsm8k" and first["ground_truth"]
    assert all(1 <= r["response_length"] <= 6 for r in rows)
    assert m["eval/reward/mean"] == pytest.approx(sum(r["score"] for r in rows) / 48)
    assert m["eval/response_length/mean"] == pytest.approx(sum(r["response_length"] for r in rows) / 48)
    assert reporter.of("placement")[0]["workers"]


def test_pass_at_k_is_computed_from_the_samples(demo_assets, prompts, tmp_path, even_first_token):
    request = make_request(demo_assets, prompts, tmp_path, reward={"function": even_first_token})
    m = run_eval(request, RecordingReporter()).metrics
    rows = results(request)
    correct = [sum(r["score"] >= 1.0 for r in rows if r["prompt_index"] == i) for i in range(12)]
    assert 0 < sum(correct) < 48  # a real mix of passes and failures
    for k in (1, 2, 4):
        assert m[f"eval/pass@{k}"] == pytest.approx(mean_pass_at_k(correct, 4, k))
    assert m["eval/pass@1"] == pytest.approx(sum(correct) / 48)
    assert m["eval/pass@1"] < m["eval/pass@2"] < m["eval/pass@4"]


def test_pass_threshold_decides_what_passes(demo_assets, prompts, tmp_path, even_first_token):
    request = make_request(demo_assets, prompts, tmp_path, reward={"function": even_first_token},
                           config={"pass_threshold": 0.0})
    m = run_eval(request, RecordingReporter()).metrics
    assert m["eval/pass@1"] == 1.0  # every score (0 or 1) is >= 0
    assert m["eval/reward/mean"] < 1.0


def test_samples_do_not_depend_on_batching_and_temperature_zero_is_greedy(demo_assets, prompts, tmp_path):
    runs = {}
    for name, config in {"b16": {}, "b5": {"data": {"val_batch_size": 5}},
                         "greedy": {"rollout": {"temperature": 0.0}},
                         "top_k1": {"rollout": {"top_k": 1}}, "top_p": {"rollout": {"top_p": 1e-6}}}.items():
        reporter = RecordingReporter()
        request = make_request(demo_assets, prompts, tmp_path / name, config=config)
        run_eval(request, reporter)
        runs[name] = (results(request), reporter)
    # val_batch_size: the same samples, in 3 batches instead of 1.
    assert responses(runs["b5"][0]) == responses(runs["b16"][0])
    batch_logs = [e for e in runs["b5"][1].of("log") if e["message"].startswith("eval batch")]
    assert len(batch_logs) == 3 and len([e for e in runs["b16"][1].of("log") if "eval batch" in e["message"]]) == 1
    # temperature 1 samples differ between the n samples of a prompt; greedy ones are all the same.
    sampled = [{r["response"] for r in runs["b16"][0] if r["prompt_index"] == i} for i in range(12)]
    greedy = [{r["response"] for r in runs["greedy"][0] if r["prompt_index"] == i} for i in range(12)]
    assert any(len(s) > 1 for s in sampled) and all(len(s) == 1 for s in greedy)
    # top_k=1 and a tiny top_p leave only the most likely token: greedy decoding at temperature 1.
    assert responses(runs["top_k1"][0]) == responses(runs["greedy"][0])
    assert responses(runs["top_p"][0]) == responses(runs["greedy"][0])


def test_lengths_and_truncation(demo_assets, prompts, tmp_path):
    request = make_request(demo_assets, prompts, tmp_path, config={"data": {"max_response_length": 2}})
    run_eval(request, RecordingReporter())
    lengths = [r["response_length"] for r in results(request)]
    assert max(lengths) == 2 and lengths.count(2) > 40  # cut at 2 tokens (a few stop at once)
    with pytest.raises(DataError) as err:
        run_eval(make_request(demo_assets, prompts, tmp_path / "short", config={"data": {"max_prompt_length": 4}}),
                 RecordingReporter())
    assert err.value.param == "prompt"
    request = make_request(demo_assets, prompts, tmp_path / "left",
                           config={"data": {"max_prompt_length": 4, "truncation": "left"}})
    run_eval(request, RecordingReporter())
    assert len(results(request)) == 48


def test_model_dtype_is_the_samplers_dtype(demo_assets):
    from engine.roles.sampler import Sampler

    config = build_config(EvalConfig, {"model": {"dtype": "bfloat16"}, "data": {"max_response_length": 3}})
    sampler = Sampler(config, demo_assets["model"])
    assert next(sampler.model.parameters()).dtype == torch.bfloat16
    batch, _ = sampler.generate([[1, 5, 9]], [3])
    assert batch["responses"].shape == (1, 3) and int(batch["response_mask"].sum()) >= 1


def test_cancel_between_batches(demo_assets, prompts, tmp_path):
    class StopAfterFirstBatch(RecordingReporter):
        def should_stop(self):
            return any(e["message"].startswith("eval batch") for e in self.of("log"))

    with pytest.raises(Cancelled):
        run_eval(make_request(demo_assets, prompts, tmp_path, config={"data": {"val_batch_size": 4}}),
                 StopAfterFirstBatch())
    assert not (tmp_path / "out" / RESULTS_NAME).exists()


def test_pause_between_batches(demo_assets, prompts, tmp_path):
    """An evaluation has no checkpoints: it stops between batches and a resumed one starts over."""
    class PauseAfterFirstBatch(RecordingReporter):
        def should_pause(self):
            return any(e["message"].startswith("eval batch") for e in self.of("log"))

    reporter = PauseAfterFirstBatch()
    with pytest.raises(Paused):
        run_eval(make_request(demo_assets, prompts, tmp_path, config={"data": {"val_batch_size": 4}}), reporter)
    assert len([e for e in reporter.of("log") if e["message"].startswith("eval batch")]) == 1
    assert not (tmp_path / "out" / RESULTS_NAME).exists() and reporter.of("metrics") == []


@pytest.fixture(scope="module")
def reward_model(demo_assets, tmp_path_factory) -> str:
    """A reward model with a freshly initialised score head on the demo model (deterministic)."""
    from engine.models import load_reward_model, load_tokenizer, save_model

    out = tmp_path_factory.mktemp("rm") / "rm"
    torch.manual_seed(0)
    save_model(load_reward_model(demo_assets["model"], ModelConfig()), load_tokenizer(demo_assets["model"]), out)
    return str(out)


def test_compare_to_with_a_reward_model(demo_assets, prompts, tmp_path, reward_model):
    request = make_request(demo_assets, prompts, tmp_path, reward={"model_path": reward_model},
                           compare_to=demo_assets["small_model"], config={"rollout": {"n": 2}})
    m = run_eval(request, RecordingReporter()).metrics
    rows = results(request)
    assert len(rows) == 24 and not [k for k in m if k.startswith("eval/pass@")]  # pass@k: rule rewards only
    assert len({r["score"] for r in rows}) > 1  # real reward-model scores
    outcomes = [1.0 if r["score"] > r["compare_score"] + 1e-6 else 0.0 if r["score"] < r["compare_score"] - 1e-6
                else 0.5 for r in rows]
    assert [r["outcome"] for r in rows] == outcomes and 0.0 < m["eval/win_rate"] < 1.0
    rate, se = win_rate(outcomes, [r["prompt_index"] for r in rows])
    assert (m["eval/win_rate"], m["eval/win_rate_se"]) == (pytest.approx(rate), pytest.approx(se))
    assert m["eval/compare/reward/mean"] == pytest.approx(sum(r["compare_score"] for r in rows) / 24)
    assert any(r["response"] != r["compare_response"] for r in rows)
    # Against itself, with the same seeds, every response is the same: all ties.
    request = make_request(demo_assets, prompts, tmp_path / "self", reward={"model_path": reward_model},
                           compare_to=demo_assets["model"], config={"rollout": {"n": 2}})
    m = run_eval(request, RecordingReporter()).metrics
    assert m["eval/win_rate"] == 0.5 and m["eval/win_rate_se"] == 0.0
    assert all(r["response"] == r["compare_response"] for r in results(request))


@pytest.mark.slow
def test_data_parallel_on_ray_gives_the_same_samples(demo_assets, prompts, tmp_path, ray_local, reward_model):
    local = make_request(demo_assets, prompts, tmp_path / "local", reward={"model_path": reward_model},
                         compare_to=demo_assets["small_model"])
    on_ray = make_request(demo_assets, prompts, tmp_path / "ray", reward={"model_path": reward_model},
                          compare_to=demo_assets["small_model"],
                          resources=Resources(num_workers=2, cpus_per_worker=1.0, colocate=False))
    reporter = RecordingReporter()
    a, b = run_eval(local, RecordingReporter()).metrics, run_eval(on_ray, reporter).metrics
    rows_a, rows_b = results(local), results(on_ray)
    assert responses(rows_a) == responses(rows_b)
    assert [r["compare_response"] for r in rows_a] == [r["compare_response"] for r in rows_b]
    for ra, rb in zip(rows_a, rows_b):
        assert rb["score"] == pytest.approx(ra["score"], abs=1e-4)
    assert b["eval/win_rate"] == pytest.approx(a["eval/win_rate"], abs=0.05)
    ranks = {(w["role"], w["rank"]) for w in reporter.of("placement")[0]["workers"]}
    assert ranks == {(role, r) for role in ("policy", "compare", "reward") for r in (0, 1)}


def test_compare_to_with_another_vocabulary_is_decoded_with_its_own_tokenizer(demo_assets, prompts, tmp_path,
                                                                             even_first_token):
    """`compare_to` whose tokenizer differs (here: one added token) gets its own reward worker, which
    decodes its responses with that tokenizer; the samples and scores are those of the original."""
    import shutil

    from engine.models import load_tokenizer

    other = tmp_path / "other_vocab"
    shutil.copytree(demo_assets["small_model"], other)
    tokenizer = load_tokenizer(str(other))
    tokenizer.add_tokens(["<|extra|>"])
    tokenizer.save_pretrained(other)
    runs = {}
    for name, path in (("same", demo_assets["small_model"]), ("other", str(other))):
        reporter = RecordingReporter()
        request = make_request(demo_assets, prompts, tmp_path / name, reward={"function": even_first_token},
                               compare_to=path, config={"rollout": {"n": 2}})
        run_eval(request, reporter)
        runs[name] = (results(request), {w["role"] for w in reporter.of("placement")[0]["workers"]})
    assert runs["same"][1] == {"policy", "compare", "reward"}
    assert runs["other"][1] == {"policy", "compare", "reward", "compare_reward"}
    for key in ("compare_response", "compare_score", "response", "score"):
        assert [r[key] for r in runs["other"][0]] == [r[key] for r in runs["same"][0]], key
