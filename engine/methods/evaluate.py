"""Evaluation as a job: sample responses to a prompts file, score them, summarise. Nothing is trained
and no output model is written.

    prompts -> per batch of `data.val_batch_size` prompts, split over the workers:
               generate `rollout.n` samples (policy, and `compare_to`) -> scores (reward)
            -> results file + summary metrics

Roles (`engine.roles`): `policy` and, with `compare_to`, `compare` (each a frozen `Sampler`), and
`reward` (PPO's `Reward`: a reward model or rule functions). They are always colocated: worker i of
every role shares one process (Ray's `RoleCluster`, or the in-process `LocalRoleCluster` with
`resources.executor: local`). Workers never talk to each other; each generates and scores its share
of every batch.

Sampling is counter-based (`engine.rollout.sampling.row_seed(seed, prompt, sample)`), so the samples do not
depend on the batch size or the number of workers; `compare_to` gets the same seeds.

Summary metrics, reported once (step 1 of 1: one `job.metrics` event, the job's `latest_metrics`):

- `eval/reward/mean`, `eval/reward/std` (sample std over all samples), `eval/response_length/mean`
  (tokens, EOS included), `eval/reward/<data_source>` when the file has several sources;
- rule rewards: `eval/pass@k` for k = 1, 2, 4, ... up to n, the unbiased estimator of Chen et al.
  (2021); a sample passes when its score is at least `pass_threshold` (1.0: gsm8k's "correct");
- `compare_to`: sample j of the model is judged against sample j of `compare_to` on the same prompt
  by the job's reward (1 win, 0.5 tie, 0 loss): `eval/win_rate`, `eval/win_rate_se` (standard error
  clustered by prompt), `eval/compare/reward/mean`, `eval/compare/response_length/mean`.

The results file, `eval_results.jsonl` in the job's output directory: one JSON object per sample,
prompts in file order and samples in order: `prompt_index`, `sample_index`, `prompt` (as in the
file), `ground_truth`, `data_source`, `response`, `response_length`, `score`, and with `compare_to`
`compare_response`, `compare_response_length`, `compare_score`, `outcome`. Non-finite scores are null.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from typing import Any

from engine.algos.evaluation import mean_pass_at_k, pairwise_outcome, pass_at_k_levels, win_rate
from engine.config import (
    ActorConfig,
    DataConfig,
    EvalConfig,
    JobRequest,
    JobResult,
    ModelConfig,
    PPOConfig,
    ResultFile,
)
from engine.data import PromptExample, load_rows, tokenize_prompts
from engine.errors import Cancelled, ConfigError, Paused
from engine.models import load_tokenizer
from engine.rewards.rules import rule_reward_kwargs
from engine.rollout.sampling import row_seed
from engine.runtime.artifacts import for_request, join
from engine.runtime.cluster import connect
from engine.runtime.reporting import Reporter

RESULTS_NAME = "eval_results.jsonl"
RESULTS_PURPOSE = "eval_results"
STARTUP_TIMEOUT_S = 900.0
"""Reserving resources and loading every role's model."""


def run_eval(request: JobRequest, reporter: Reporter) -> JobResult:
    """Evaluate `request.model_path` on the prompts of `request.training_file`; see the module docstring."""
    return Evaluation(request, reporter).run()


class Evaluation:
    """The driver: owns the prompts, the roles and the collected samples."""

    def __init__(self, request: JobRequest, reporter: Reporter) -> None:
        if not isinstance(request.config, EvalConfig):
            raise ConfigError("run_eval needs an EvalConfig", param="config")
        self.request, self.reporter, self.cfg = request, reporter, request.config
        self.artifacts = for_request(request)
        self.compare = request.compare_to_path is not None
        self.roles: Any = None

    # --- setup ---------------------------------------------------------------------------------

    def _load_prompts(self) -> None:
        req = self.request
        self.rows = load_rows(self.artifacts.stage(req.training_file), "prompts")
        self.tokenizer = load_tokenizer(self.artifacts.stage(req.model_path))
        self.prompts = self._tokenize(self.tokenizer)
        self.shared_vocab = True
        if self.compare:
            self.compare_tokenizer = load_tokenizer(self.artifacts.stage(req.compare_to_path))
            self.compare_prompts = self._tokenize(self.compare_tokenizer)
            self.shared_vocab = self.compare_tokenizer.get_vocab() == self.tokenizer.get_vocab()

    def _tokenize(self, tokenizer: Any) -> list[PromptExample]:
        d = self.cfg.data
        return tokenize_prompts(self.rows, tokenizer, d.max_prompt_length, d.truncation,
                                filter_overlong_prompts=d.filter_overlong_prompts)

    def _reward_kwargs(self) -> dict[str, Any]:
        spec = dict(self.request.reward or {})
        if spec.get("model_path"):
            return {"model_path": spec["model_path"]}
        return rule_reward_kwargs(spec, [p.data_source for p in self.prompts])

    def _reward_config(self) -> PPOConfig:
        """The `PPOConfig` the `Reward` role reads: the dtype, and a token budget that holds a row."""
        d = self.cfg.data
        return PPOConfig(data=DataConfig(max_prompt_length=d.max_prompt_length,
                                         max_response_length=d.max_response_length),
                         model=ModelConfig(dtype=self.cfg.model.dtype),
                         actor=ActorConfig(ppo_max_token_len_per_gpu=max(3072, d.max_prompt_length
                                                                         + d.max_response_length)))

    def _start_roles(self) -> None:
        from engine.roles.remote import RoleSpec
        from engine.roles.reward import Reward
        from engine.roles.sampler import Sampler

        cfg, req, w = self.cfg, self.request, self.request.resources.num_workers
        common = {"seed": req.seed, "artifacts": self.artifacts}
        reward, reward_cfg = self._reward_kwargs(), self._reward_config()
        specs = [RoleSpec("policy", Sampler, (cfg, req.model_path), common, num_workers=w),
                 RoleSpec("reward", Reward, (reward_cfg,), {"tokenizer_path": req.model_path, **reward, **common},
                          num_workers=w)]
        if self.compare:
            specs.append(RoleSpec("compare", Sampler, (cfg, req.compare_to_path), common, num_workers=w))
            if not self.shared_vocab:  # its responses must be decoded with its own tokenizer
                specs.append(RoleSpec("compare_reward", Reward, (reward_cfg,),
                                      {"tokenizer_path": req.compare_to_path, **reward, **common}, num_workers=w))
        if req.resources.executor == "local":
            from engine.roles.local import LocalRoleCluster as Cluster
        else:
            from engine.roles.remote import RoleCluster as Cluster
        resources = dataclasses.replace(req.resources, colocate=True)
        self.roles = Cluster(specs, resources, startup_timeout_s=STARTUP_TIMEOUT_S)
        self.reporter.placement(self.roles.placement())

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> JobResult:
        req, cfg = self.request, self.cfg
        if req.resources.executor == "ray":
            connect(req.ray_address)
        started = time.perf_counter()
        self._load_prompts()
        n, size = cfg.rollout.n, cfg.data.val_batch_size
        batches = math.ceil(len(self.prompts) / size)
        self.reporter.log(f"eval: {len(self.prompts)} prompts x {n} samples in {batches} batch(es), "
                          f"{req.resources.num_workers} worker(s)" + (", with compare_to" if self.compare else ""))
        self._start_roles()
        samples: list[dict[str, Any]] = []
        try:
            for b in range(batches):
                if self.reporter.should_stop():
                    raise Cancelled(f"cancelled after batch {b} of {batches}", data={"batch": b})
                if self.reporter.should_pause():  # no checkpoints: a resumed evaluation starts over
                    raise Paused(f"paused after batch {b} of {batches}", data={"step": None, "batch": b})
                self.reporter.heartbeat(b + 1)  # each batch is a step of the watchdog
                samples += self._batch(range(b * size, min((b + 1) * size, len(self.prompts))))
                self.reporter.log(f"eval batch {b + 1}/{batches}: {len(samples)} samples scored")
        finally:
            self.roles.shutdown()
        metrics = self._summary(samples)
        metrics["timing_s/eval"] = time.perf_counter() - started
        self._write(samples)
        self.reporter.metrics(1, metrics, total_steps=1)
        return JobResult(output_dir=req.output_dir, model_format=None, model_kind=None, metrics=metrics,
                         files=(ResultFile(RESULTS_PURPOSE, RESULTS_NAME, len(samples)),))

    def _batch(self, prompt_indices: range) -> list[dict[str, Any]]:
        """Generate and score every sample of these prompts (one gather); the result rows in order."""
        keys = [(i, j) for i in prompt_indices for j in range(self.cfg.rollout.n)]
        seeds = [row_seed(self.request.seed, i, j) for i, j in keys]
        meta = [{"ground_truth": self.prompts[i].ground_truth, "data_source": self.prompts[i].data_source,
                 "prompt": self.prompts[i].text} for i, _ in keys]
        policy = self._submit("policy", "reward", [self.prompts[i].prompt_ids for i, _ in keys], seeds, meta)
        compare = (self._submit("compare", "reward" if self.shared_vocab else "compare_reward",
                                [self.compare_prompts[i].prompt_ids for i, _ in keys], seeds, meta)
                   if self.compare else [])
        flat = [ref for shard in policy + compare for ref in shard]
        values = iter(self.roles.get(flat))
        ours = self._collect([(next(values), next(values)) for _ in policy], self.tokenizer)
        theirs = self._collect([(next(values), next(values)) for _ in compare], self.compare_tokenizer) \
            if self.compare else []
        rows = []
        for k, (i, j) in enumerate(keys):
            text, length, score = ours[k]
            row = {"prompt_index": i, "sample_index": j, "prompt": self.rows[i]["prompt"],
                   "ground_truth": self.prompts[i].ground_truth, "data_source": self.prompts[i].data_source,
                   "response": text, "response_length": length, "score": score}
            if self.compare:
                other_text, other_length, other_score = theirs[k]
                row.update(compare_response=other_text, compare_response_length=other_length,
                           compare_score=other_score, outcome=pairwise_outcome(score, other_score))
            rows.append(row)
        return rows

    def _submit(self, sampler: str, scorer: str, prompts: list[list[int]], seeds: list[int],
                meta: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
        """Per worker with rows: `(batch ref, scores ref)` of its contiguous share of the rows."""
        workers = len(self.roles[sampler])
        out = []
        for w in range(workers):
            lo, hi = w * len(prompts) // workers, (w + 1) * len(prompts) // workers
            if lo == hi:
                continue
            score = (self.roles[scorer], "compute_scores", (meta[lo:hi],))
            batch, _, scores = self.roles[sampler].submit_then(w, "generate", (prompts[lo:hi], seeds[lo:hi]), [score],
                                                               num_returns=2)
            out.append((batch, scores))
        return out

    @staticmethod
    def _collect(shards: list[tuple[Any, Any]], tokenizer: Any) -> list[tuple[str, int, float]]:
        """(response text, response tokens, score) per row, the shards concatenated in order."""
        out = []
        for batch, scored in shards:
            lengths = batch["response_mask"].sum(-1).tolist()
            for ids, length, score in zip(batch["responses"].tolist(), lengths, scored["scores"].tolist()):
                out.append((tokenizer.decode(ids[:length], skip_special_tokens=True), int(length), float(score)))
        return out

    # --- output --------------------------------------------------------------------------------

    def _summary(self, samples: list[dict[str, Any]]) -> dict[str, float]:
        scores = [s["score"] for s in samples]
        metrics = {
            "eval/reward/mean": statistics.fmean(scores),
            "eval/reward/std": statistics.stdev(scores) if len(scores) > 1 else 0.0,
            "eval/response_length/mean": statistics.fmean(s["response_length"] for s in samples),
            "eval/num_prompts": float(len(self.prompts)),
            "eval/num_samples": float(len(samples)),
        }
        sources = sorted({s["data_source"] for s in samples if s["data_source"]})
        if len(sources) > 1:
            for source in sources:
                metrics[f"eval/reward/{source}"] = statistics.fmean(
                    s["score"] for s in samples if s["data_source"] == source)
        if not (self.request.reward or {}).get("model_path"):  # pass@k: rule rewards only
            n, threshold = self.cfg.rollout.n, self.cfg.pass_threshold
            correct = [0] * len(self.prompts)
            for s in samples:
                correct[s["prompt_index"]] += s["score"] >= threshold
            for k in pass_at_k_levels(n):
                metrics[f"eval/pass@{k}"] = mean_pass_at_k(correct, n, k)
        if self.compare:
            rate, se = win_rate([s["outcome"] for s in samples], [s["prompt_index"] for s in samples])
            metrics.update({
                "eval/win_rate": rate, "eval/win_rate_se": se,
                "eval/compare/reward/mean": statistics.fmean(s["compare_score"] for s in samples),
                "eval/compare/response_length/mean": statistics.fmean(s["compare_response_length"]
                                                                      for s in samples)})
        return metrics

    def _write(self, samples: list[dict[str, Any]]) -> None:
        with self.artifacts.writing_file(join(self.request.output_dir, RESULTS_NAME)) as path, \
                open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps({k: _finite(v) for k, v in s.items()}, ensure_ascii=False) + "\n" for s in samples)


def _finite(value: Any) -> Any:
    """JSON has no NaN or inf: such scores are written as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value
