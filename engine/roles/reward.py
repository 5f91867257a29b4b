"""Reward: a score per response, from a reward model directory or from rule functions.

Verb: `compute_scores`. The score is a scalar per sequence; the driver places it on the last
response token (`token_level_scores`) before the KL penalty and the advantages. A multi-turn episode
(`rollout.multi_turn`) scores its environment's outcome reward when it gave one, else the job's reward on
the final assistant turn (a reward model reads the whole episode).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from engine import packing
from engine.config import PPOConfig
from engine.data import prompt_token_ids, response_token_ids
from engine.models import load_reward_model, load_tokenizer, reward_scores
from engine.rewards.rules import RewardFn, score_response
from engine.roles.base import Role
from engine.roles.batch import Batch, build_batch
from engine.roles.forward import iter_micro_batches
from engine.runtime.artifacts import Artifacts

log = logging.getLogger(__name__)


def _outcome(batch: Batch, scores: torch.Tensor) -> torch.Tensor:
    """A multi-turn episode's environment outcome reward replaces the score where it gave one."""
    final = batch.get("episode_final_reward")
    return scores if final is None else torch.where(torch.isnan(final), scores, final.to(scores.dtype))


class Reward(Role):
    """Scores responses.

    Args:
        config: the job's `PPOConfig`.
        tokenizer_path: the policy's tokenizer (to decode responses).
        model_path: a reward model directory (sequence classification, one label), or None.
        functions: rule functions by name (resolved by the driver, `engine.rewards.rules`), or None.
        function: the name used for every row; None picks `functions[row["data_source"]]` per row.
        options: keyword arguments passed to every rule function (e.g. `format_score`).
        grading: for the `grader` function, the job request's `reward.grading` (python-grader limits,
            score-model paths): the whole batch is scored by one `engine.rewards.graders.Grader`, built once
            (a score_model grader's model loads on first use and stays for the job). For `code_tests`, its
            `python` limits cap the sandboxes (`engine.rewards.code_tests.CodeTests`; None: the defaults).
    """

    def __init__(self, config: PPOConfig, *, tokenizer_path: str, model_path: str | None = None,
                 functions: Mapping[str, RewardFn] | None = None, function: str | None = None,
                 options: Mapping[str, Any] | None = None, grading: Mapping[str, Any] | None = None,
                 rank: int = 0, world_size: int = 1,
                 num_threads: int | None = None, seed: int = 0, use_gpu: bool = False,
                 artifacts: Artifacts | None = None) -> None:
        super().__init__(rank=rank, world_size=world_size, num_threads=num_threads, seed=seed, use_gpu=use_gpu,
                         artifacts=artifacts)
        if (model_path is None) == (functions is None):
            raise ValueError("give exactly one of model_path and functions")
        self.cfg = config
        tokenizer_path = self.artifacts.stage(tokenizer_path)
        model_path = self.artifacts.stage(model_path) if model_path is not None else None
        self.tokenizer = load_tokenizer(tokenizer_path)
        self.functions = dict(functions or {})
        self.function = function
        self.options = dict(options or {})
        self.grader = None
        if function == "grader":
            from engine.rewards.graders import job_grader

            self.grader = job_grader(self.options, grading, device=self.device, dtype=config.model.dtype,
                                     stage=self.artifacts.stage)
        self.code_tests = None
        if function == "code_tests":  # the whole batch at once, sandboxed processes `parallel` at a time
            from engine.rewards.code_tests import CodeTests

            self.code_tests = CodeTests(self.options, grading)
        self.model = None
        if model_path is not None:
            from engine.config import ModelConfig

            rm_cfg = ModelConfig(dtype=config.model.dtype, use_remove_padding=config.model.use_remove_padding)
            self.model = load_reward_model(model_path, rm_cfg, trainable=False).to(self.device)
            has_tokenizer = any(os.path.isfile(os.path.join(model_path, f))
                                for f in ("tokenizer.json", "tokenizer_config.json"))
            self.rm_tokenizer = load_tokenizer(model_path) if has_tokenizer else self.tokenizer
            # Same vocabulary: score the policy's token ids as they are; else re-tokenize the text.
            self.same_vocab = self.rm_tokenizer.get_vocab() == self.tokenizer.get_vocab()

    def compute_scores(self, batch: Batch, meta: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """`scores`: `(batch,)` float32, one per row; `meta[i]` holds the row's `ground_truth`,
        `data_source`, `prompt` (text) and `conversation` (the prompt as given: text or chat list)."""
        start = time.perf_counter()
        if self.code_tests is not None:  # `counts`: the step's reward/timeouts and reward/errors
            values, counts = self.code_tests.score(self._texts(batch), [m.get("ground_truth") for m in meta])
            return {"scores": _outcome(batch, torch.tensor(values, dtype=torch.float32)), "counts": counts,
                    "time_s": time.perf_counter() - start}
        scores = self._model_scores(batch, meta) if self.model is not None else self._rule_scores(batch, meta)
        return {"scores": _outcome(batch, scores), "time_s": time.perf_counter() - start}

    def _responses(self, batch: Batch) -> list[list[int]]:
        """Each row's response ids; of a multi-turn episode, its final assistant turn (what a reward
        function reads: not the tool results before it)."""
        if "episode_final_span" in batch:
            spans = batch["episode_final_span"].tolist()
            return [row[start:end] for row, (start, end) in zip(batch["responses"].tolist(), spans)]
        lengths = batch["response_mask"].sum(-1).tolist()
        return [row[:n] for row, n in zip(batch["responses"].tolist(), lengths)]

    def _texts(self, batch: Batch) -> list[str]:
        return [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in self._responses(batch)]

    def _rule_scores(self, batch: Batch, meta: Sequence[Mapping[str, Any]]) -> torch.Tensor:
        if self.grader is not None:
            return self._grader_scores(batch, meta)
        max_tokens = batch["responses"].shape[1]
        scores = []
        for ids, info in zip(self._responses(batch), meta):
            name = self.function or info.get("data_source")
            fn = self.functions[name]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            scores.append(score_response(fn, text, info.get("ground_truth"), prompt=info.get("prompt", ""),
                                         data_source=info.get("data_source"), response_ids=ids,
                                         num_tokens=len(ids), max_tokens=max_tokens, **self.options))
        return torch.tensor(scores, dtype=torch.float32)

    def _grader_scores(self, batch: Batch, meta: Sequence[Mapping[str, Any]]) -> torch.Tensor:
        from engine.rewards.graders import item_of, sample_of

        texts = self._texts(batch)
        if "episode_transcript" in batch:  # an episode's grader also reads its tool calls and transcript
            from engine.roles.episode_batch import transcript

            samples = [sample_of(t, transcript(batch, i).get("messages", [])) for i, t in enumerate(texts)]
        else:
            samples = [sample_of(t) for t in texts]
        results = self.grader.score(samples, [item_of(m.get("ground_truth")) for m in meta])
        failed = [r.error for r in results if r.error is not None]
        if failed:  # the sample scores 0.0 (OpenAI's behaviour); say why once per batch
            log.warning("grader: %d of %d samples not scored, e.g. %s: %s", len(failed), len(results),
                        failed[0]["param"], failed[0]["message"])
        return torch.tensor([r.score for r in results], dtype=torch.float32)

    @torch.no_grad()
    def _model_scores(self, batch: Batch, meta: Sequence[Mapping[str, Any]]) -> torch.Tensor:
        if not self.same_vocab:
            batch = self._retokenize(batch, meta)
        a = self.cfg.actor
        out = torch.zeros(len(batch["input_ids"]), dtype=torch.float32)
        for index, mb in iter_micro_batches(batch, range(len(batch["input_ids"])), dynamic=a.use_dynamic_bsz,
                                            max_tokens=a.ppo_max_token_len_per_gpu,
                                            size=a.ppo_micro_batch_size_per_gpu, device=self.device,
                                            packed=packing.enabled(self.model)):
            out[index] = reward_scores(self.model, mb["input_ids"], mb["attention_mask"]).cpu()
        return out

    def _retokenize(self, batch: Batch, meta: Sequence[Mapping[str, Any]]) -> Batch:
        prompts, responses = [], []
        for ids, info in zip(self._responses(batch), meta):
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            # The whole conversation (system prompt, earlier turns), not only the last user message.
            prompts.append(prompt_token_ids(self.rm_tokenizer, info.get("conversation") or info.get("prompt", "")))
            responses.append(response_token_ids(self.rm_tokenizer, text))
        return build_batch(prompts, responses, prompt_width=max(len(p) for p in prompts),
                           response_width=max(len(r) for r in responses), pad_id=self.rm_tokenizer.pad_token_id)
