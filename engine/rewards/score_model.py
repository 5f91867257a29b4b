"""`score_model` graders: a Keel model scores each sample, loaded once per process (a job's Reward
worker keeps one `ScoreModels` for the whole job; `graders/run` loads it in its child process).

The model's own config decides the mode:

- a reward model (`*ForSequenceClassification`): the rendered `input` is a conversation; when its last
  message is the assistant's, that message is the response, else the response is `sample.output_text`
  and all messages are the prompt. It is scored as Keel trains reward models (the prompt through the
  chat template with the generation prompt, then the response and EOS), and the scalar r maps into
  `range` [lo, hi] as `lo + (hi - lo) * sigmoid(r)` (a Bradley-Terry reward is a log-odds);
- any other (a causal LM): a judge. The messages go through the tokenizer's chat template (Keel's demo
  template when it has none), the model generates (greedy unless `sampling_params.temperature` > 0;
  `top_p`, `seed` and `max_completions_tokens`, default 128, honoured; `reasoning_effort` ignored), and
  the first number in its output, clamped to `range`, is the score. No number: no score, a
  `model_grader_parse_error`.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
DEFAULT_MAX_TOKENS = 128
_CHUNK = 16
"""Samples per forward / generate call."""


class Judgement(NamedTuple):
    """One sample's score, or None with `error` and its OpenAI error flag in `kind`."""

    score: float | None
    error: str | None = None
    kind: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Loaded(NamedTuple):
    reward: bool
    model: Any
    tokenizer: Any
    window: int


def first_number(text: str) -> float | None:
    m = _NUMBER.search(text)
    if m is None:
        return None
    value = float(m.group(0))
    return value if math.isfinite(value) else None


def is_reward_model(path: str) -> bool:
    """A sequence-classification model (or a LoRA adapter of one) at `path`."""
    adapter = os.path.join(path, "adapter_config.json")
    if os.path.isfile(adapter):
        with open(adapter) as f:
            return json.load(f).get("task_type") == "SEQ_CLS"
    try:
        with open(os.path.join(path, "config.json")) as f:
            architectures = json.load(f).get("architectures") or []
    except (OSError, ValueError):
        return False
    return any(str(a).endswith("ForSequenceClassification") for a in architectures)


class ScoreModels:
    """The models of a job's score_model graders, by the grader's `model` reference.

    Args:
        paths: `model` reference -> a directory (or a URL that `stage` turns into one).
        device: where they run (the Reward worker's device).
        dtype: their compute dtype (the job's `model.dtype`).
        stage: makes a reference local (engine.runtime.artifacts); None: paths are local already.
    """

    def __init__(self, paths: Mapping[str, str], *, device: Any = "cpu", dtype: str = "float32",
                 stage: Callable[[str], str] | None = None) -> None:
        self.paths, self.device, self.dtype, self.stage = dict(paths), device, dtype, stage
        self._loaded: dict[str, _Loaded] = {}

    def load(self, ref: str) -> _Loaded:
        if ref not in self._loaded:
            from engine.config import ModelConfig
            from engine.models import load_policy, load_reward_model, load_tokenizer

            path = self.paths[ref]
            path = self.stage(path) if self.stage is not None else path
            cfg = ModelConfig(dtype=self.dtype, use_remove_padding=False)
            reward = is_reward_model(path)
            model = (load_reward_model if reward else load_policy)(path, cfg, trainable=False).to(self.device)
            config = getattr(model, "config", None)
            window = int(getattr(config, "max_position_embeddings", 0) or 4096)
            self._loaded[ref] = _Loaded(reward, model, load_tokenizer(path), window)
        return self._loaded[ref]

    def score(self, spec: dict[str, Any], conversations: Sequence[list[dict[str, str]]],
              responses: Sequence[str]) -> list[Judgement]:
        """Scores of `conversations` (rendered `input`) by the grader's model, mapped into its range."""
        low, high = spec.get("range") or (0.0, 1.0)
        try:
            loaded = self.load(spec["model"])
        except Exception as e:  # noqa: BLE001 - a model that cannot load: every sample says why
            return [Judgement(None, f"the grader's model could not be loaded: {type(e).__name__}: {e}"[:500],
                              "model_grader_server_error")] * len(conversations)
        out: list[Judgement] = []
        for start in range(0, len(conversations), _CHUNK):
            chunk = slice(start, start + _CHUNK)
            if loaded.reward:
                out.extend(self._rewards(loaded, conversations[chunk], responses[chunk], float(low), float(high)))
            else:
                out.extend(self._judge(loaded, spec.get("sampling_params") or {}, conversations[chunk],
                                       float(low), float(high)))
        return out

    def _rewards(self, loaded: _Loaded, conversations: Sequence[list[dict[str, str]]], responses: Sequence[str],
                 low: float, high: float) -> list[Judgement]:
        import torch

        from engine.data import pad, prompt_token_ids, response_token_ids
        from engine.models import reward_scores

        rows = []
        for messages, response in zip(conversations, responses):
            if messages[-1]["role"] == "assistant":
                messages, response = messages[:-1], messages[-1]["content"]
            answer = response_token_ids(loaded.tokenizer, response)[-loaded.window:]
            prompt = prompt_token_ids(loaded.tokenizer, messages)
            rows.append(prompt[max(0, len(prompt) - (loaded.window - len(answer))):] + answer)
        ids, mask = pad(rows, loaded.tokenizer.pad_token_id)
        with torch.no_grad():
            scores = reward_scores(loaded.model, ids.to(self.device), mask.to(self.device)).float().cpu().tolist()
        return [Judgement(low + (high - low) / (1.0 + math.exp(-r)) if math.isfinite(r) else None,
                          None if math.isfinite(r) else f"the reward model gave {r}",
                          "" if math.isfinite(r) else "model_grader_server_error", len(row), 0)
                for r, row in zip(scores, rows)]

    def _judge(self, loaded: _Loaded, sampling: dict[str, Any], conversations: Sequence[list[dict[str, str]]],
               low: float, high: float) -> list[Judgement]:
        import torch

        from engine.rollout.sampling import eos_token_ids

        tokenizer = loaded.tokenizer
        new_tokens = sampling.get("max_completions_tokens") or DEFAULT_MAX_TOKENS
        room = max(1, loaded.window - new_tokens)
        prompts = [_chat_ids(tokenizer, m)[-room:] for m in conversations]
        width = max(len(p) for p in prompts)
        pad_id = tokenizer.pad_token_id
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        temperature = sampling.get("temperature") or 0.0
        eos = eos_token_ids(tokenizer, loaded.model)
        kwargs: dict[str, Any] = {"max_new_tokens": new_tokens, "pad_token_id": pad_id, "eos_token_id": eos,
                                  "do_sample": temperature > 0}
        if temperature > 0:
            kwargs.update(temperature=float(temperature), top_p=float(sampling.get("top_p") or 1.0), top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        devices = [self.device] if str(self.device).startswith("cuda") else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(sampling.get("seed") or 0))
            generated = loaded.model.generate(input_ids=ids, attention_mask=mask, **kwargs)[:, width:].tolist()
        out = []
        for prompt, tokens in zip(prompts, generated):
            used = next((n + 1 for n, t in enumerate(tokens) if t in eos), len(tokens))
            text = tokenizer.decode(tokens[:used], skip_special_tokens=True)
            value = first_number(text)
            if value is None:
                out.append(Judgement(None, f"the judge's output holds no number: {text[:200]!r}",
                                     "model_grader_parse_error", len(prompt), used))
            else:
                out.append(Judgement(min(high, max(low, value)), None, "", len(prompt), used))
        return out


def _chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The judge's prompt: the chat template with the generation prompt (Keel's demo template when the
    tokenizer has none)."""
    from engine.data import prompt_token_ids

    if getattr(tokenizer, "chat_template", None):
        return prompt_token_ids(tokenizer, messages)
    from engine.demo import CHAT_TEMPLATE

    text = tokenizer.apply_chat_template(messages, chat_template=CHAT_TEMPLATE, add_generation_prompt=True,
                                         tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
