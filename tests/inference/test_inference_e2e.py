"""The official `openai` client against a live Keel whose completions Ray Serve answers (API + Ray + Serve
on loopback; the Celery worker too for the fine-tuned model): greedy chat equals `transformers` greedy
`generate` token for token with log-probs to 1e-4, streaming gives the non-streamed text (its time to
first token in the API's metrics), `n` with a `seed` is reproducible, `stop` cuts where OpenAI cuts,
token ids come back and a `trajectory_id` call is recorded, a prompt over the context window is a 400
naming `messages`, and a model fine-tuned through `/v1/fine_tuning/jobs` answers by its `ft:` name as
its downloaded weights do in `transformers`."""

from __future__ import annotations

import json
import re
import time

import hf_reference
import httpx
import openai
import pytest
from transformers import AutoTokenizer

from core import trajectories
from core.db import session_scope

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("serve_url")]

QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def base(demo_assets):
    """The demo model in `transformers`, and its tokenizer."""
    return hf_reference.load(demo_assets["model"]), AutoTokenizer.from_pretrained(demo_assets["model"])


def _greedy_chat(oai, model: str, max_tokens: int = 12, **kw):
    return oai.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=max_tokens,
                                       logprobs=True, extra_body={"return_token_ids": True}, **kw)


def _assert_matches_transformers(answer, hf_model, max_tokens: int) -> None:
    prompt = answer.model_extra["prompt_token_ids"]
    choice = answer.choices[0]
    ids = choice.model_extra["token_ids"]
    expected = hf_reference.greedy(hf_model, prompt, max_tokens)
    # An answer that ends at the end-of-sequence token carries it (as vLLM's token ids do); `generate` stops there.
    ended = bool(ids) and ids[-1] in hf_reference.eos_ids(hf_model)
    assert (ids[:-1] if ended else ids) == expected and ids
    assert choice.finish_reason == ("stop" if ended else "length")
    served = [t.logprob for t in choice.logprobs.content]
    expected = hf_reference.logprobs(hf_model, prompt, ids)
    assert len(served) == len(ids) and max(abs(a - b) for a, b in zip(served, expected, strict=True)) <= 1e-4
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(prompt), len(ids))
    assert answer.usage.total_tokens == len(prompt) + len(ids)


def test_greedy_chat_is_transformers_greedy_generate(oai, demo_assets, base):
    hf_model, tokenizer = base
    answer = _greedy_chat(oai, demo_assets["model"])
    assert answer.object == "chat.completion" and answer.model == demo_assets["model"]
    assert answer.choices[0].message.role == "assistant"
    # The prompt is the model's chat template with the generation prompt, as `transformers` renders it.
    rendered = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert answer.model_extra["prompt_token_ids"] == rendered
    _assert_matches_transformers(answer, hf_model, 12)
    assert answer.choices[0].message.content == tokenizer.decode(answer.choices[0].model_extra["token_ids"],
                                                                 skip_special_tokens=True)
    assert "keel" not in answer.model_extra  # Keel's own record stays between Serve and the API

    # The legacy endpoint continues a plain prompt, tokenized as `transformers` does.
    text = oai.completions.create(model=demo_assets["model"], prompt="the answer is", temperature=0, max_tokens=8,
                                  extra_body={"return_token_ids": True})
    prompt = tokenizer("the answer is")["input_ids"]
    assert text.object == "text_completion" and text.model_extra["prompt_token_ids"] == prompt
    ids = text.choices[0].model_extra["token_ids"]
    assert ids == hf_reference.greedy(hf_model, prompt, 8)[:len(ids)]


def _series(base_url: str, name: str) -> float:
    """One series of the API's /metrics for the demo base model's chat completions, summed over its other
    labels (0 before its first sample)."""
    text = httpx.get(f"{base_url}/metrics", trust_env=False).text
    return sum(float(m[2]) for m in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.MULTILINE)
               if 'base_model="model"' in m[1] and 'endpoint="chat/completions"' in m[1])


def test_streaming_gives_the_same_text(oai, live_server, demo_assets):
    model = demo_assets["model"]
    first_tokens = _series(live_server, "keel_inference_time_to_first_token_seconds_count")
    whole = oai.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=16)
    chunks = list(oai.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=16,
                                              stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [whole.choices[0].finish_reason]
    # Without include_usage no usage chunk (the API asked Serve for one, for its token count, and drops it).
    plain = list(oai.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=16,
                                             stream=True))
    assert all(c.choices and c.usage is None for c in plain)
    assert "".join(c.choices[0].delta.content or "" for c in plain) == text
    # Both streams' first tokens were timed, and the tokens counted, under the base model's name.
    assert _series(live_server, "keel_inference_time_to_first_token_seconds_count") == first_tokens + 2
    assert _series(live_server, "keel_inference_tokens_total") > 0


def test_n_with_a_seed_is_reproducible(oai, demo_assets):
    def texts(seed: int) -> list[str]:
        r = oai.chat.completions.create(model=demo_assets["model"], messages=QUESTION, n=4, seed=seed,
                                        temperature=1.0, max_tokens=10)
        assert [c.index for c in r.choices] == [0, 1, 2, 3]
        return [c.message.content for c in r.choices]

    first = texts(7)
    assert texts(7) == first
    assert len(set(first)) > 1 and texts(8) != first


def test_stop_strings_cut_where_openai_cuts(oai, demo_assets):
    model = demo_assets["model"]
    full = oai.completions.create(model=model, prompt="the answer is", temperature=0, max_tokens=24).choices[0].text
    # A two-character stop string whose first occurrence is past the start: the text ends just before it.
    at = next(i for i in range(1, len(full) - 2) if full.find(full[i:i + 2]) == i and full[i:i + 2].strip())
    stop = full[at:at + 2]
    cut = oai.completions.create(model=model, prompt="the answer is", temperature=0, max_tokens=24, stop=[stop, "\x01"])
    assert (cut.choices[0].text, cut.choices[0].finish_reason) == (full[:at], "stop")
    streamed = oai.completions.create(model=model, prompt="the answer is", temperature=0, max_tokens=24, stop=stop,
                                      stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == full[:at]


def test_a_trajectory_id_records_the_calls_token_ids(oai, project_key, demo_assets):
    trajectory = f"episode-{time.monotonic_ns()}"
    answer = oai.chat.completions.create(model=demo_assets["model"], messages=QUESTION, max_tokens=6, n=2, seed=1,
                                         extra_body={"trajectory_id": trajectory, "return_token_ids": True})
    list(oai.chat.completions.create(model=demo_assets["model"], messages=QUESTION, max_tokens=4, stream=True,
                                     extra_body={"trajectory_id": trajectory}))
    with session_scope() as db:
        calls = trajectories.calls(db, project_key[0], trajectory)
        rows = [(c.model, c.choice_index, c.prompt_token_ids, c.completion_token_ids, c.logprobs) for c in calls]
    assert [r[:2] for r in rows] == [(demo_assets["model"], 0), (demo_assets["model"], 1), (demo_assets["model"], 0)]
    for row, choice in zip(rows, answer.choices, strict=False):
        assert row[2] == answer.model_extra["prompt_token_ids"] and row[3] == choice.model_extra["token_ids"]
        assert len(row[4]) == len(row[3]) and all(lp <= 0 for lp in row[4])
    assert len(rows[2][3]) == len(rows[2][4]) >= 1
    with session_scope() as db:  # another project never sees them
        assert trajectories.calls(db, "proj-other", trajectory) == []


def test_a_prompt_over_the_context_window_is_400_naming_messages(oai, demo_assets):
    long = [{"role": "user", "content": "one two three four " * 400}]
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model=demo_assets["model"], messages=long, max_tokens=4)
    assert (caught.value.param, caught.value.code) == ("messages", "context_length_exceeded")


def test_a_fine_tuned_model_answers_by_its_ft_name(oai, live_server, project_key, tmp_path, demo_assets,
                                                   celery_worker):
    import pyarrow.parquet as pq

    rows = pq.read_table(demo_assets["sft_train"]).to_pylist()[:32]
    chat = [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["response"]}]}
            for r in rows]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chat))
    train = oai.files.create(file=path.open("rb"), purpose="fine-tune")
    job = oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=train.id, suffix="serve", seed=1,
                                      method={"type": "supervised", "supervised": {"hyperparameters": {
                                          "n_epochs": 1, "batch_size": 16, "learning_rate_multiplier": 300}}})
    deadline = time.monotonic() + 600
    while (job := oai.fine_tuning.jobs.retrieve(job.id)).status not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, job.status
        time.sleep(0.5)
    assert job.status == "succeeded", job.error
    name = job.fine_tuned_model
    assert name.startswith("ft:")
    answer = _greedy_chat(oai, name)
    assert answer.model == name
    downloaded = hf_reference.load(hf_reference.download(live_server, project_key[1], name, tmp_path / "ft"))
    _assert_matches_transformers(answer, downloaded, 12)

