"""The official `tinker` client against the embedded stack, `keel up` as `make run` starts it (SQLite,
the embedded broker, a local Ray, a host zone far from UTC): supervised steps that learn, a sampler
save, sampling from it with a string stop and log-probs, and the run's checkpoints listed."""

from __future__ import annotations

import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
import tinker
from tinker import types

from bench.embedded import keel_up

TZ = "Asia/Kolkata"
"""UTC+05:30: a naive local time read as UTC would be 5.5 h off."""


@pytest.fixture(scope="module")
def embedded():
    """`keel up` on a fresh KEEL_HOME with the demo model under its default model root."""
    from engine.demo import build_demo_assets

    home = Path(tempfile.mkdtemp(prefix="keel-tinker-embedded-"))
    try:
        assets = build_demo_assets(home / "models" / "keel-demo")
        with keel_up(home, tz=TZ) as stack:
            yield {"url": stack.url, "key": f"tml-{stack.key}", "model": assets["small_model"], "stack": stack}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_train_save_sample_on_the_embedded_stack(embedded):
    with tinker.ServiceClient(base_url=embedded["url"], api_key=embedded["key"]) as service:
        tc = service.create_lora_training_client(base_model=embedded["model"], rank=8, seed=0).result()
        tokenizer = tc.get_tokenizer()
        ids = tokenizer.encode("the cat sat on the mat")
        data = [types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                            loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)})]
        losses = []
        for _ in range(4):
            fb = tc.forward_backward(data, "cross_entropy")
            tc.optim_step(types.AdamParams(learning_rate=1e-2))
            losses.append(fb.result().metrics["loss:sum"])
        assert losses[-1] < 0.9 * losses[0], losses

        path = tc.save_weights_for_sampler("embedded").result().path
        assert path == f"tinker://{tc.model_id}/sampler_weights/embedded"
        sampler = service.create_sampling_client(model_path=path).result()
        prompt = types.ModelInput.from_ints(tokenizer.encode("the cat"))
        out = sampler.sample(prompt, num_samples=2, sampling_params=types.SamplingParams(
            max_tokens=6, temperature=1.0, seed=3, stop=["\n\nUser:"])).result()
        assert len(out.sequences) == 2
        for seq in out.sequences:
            assert 0 < len(seq.tokens) <= 6 and len(seq.logprobs) == len(seq.tokens)
            assert all(lp <= 0.0 for lp in seq.logprobs)

        rest = tinker.RestClient(base_url=embedded["url"], api_key=embedded["key"])
        listed = rest.list_checkpoints(tc.model_id).result().checkpoints
        assert [c.tinker_path for c in listed] == [path]
        info = rest.get_training_run(tc.model_id).result()
        assert info.last_sampler_checkpoint.tinker_path == path
        # UTC through SQLite and a non-UTC host: the checkpoint's time is within minutes of now
        assert abs((datetime.now(UTC) - listed[0].time).total_seconds()) < 600
