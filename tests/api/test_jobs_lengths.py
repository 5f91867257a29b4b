"""A create checked against the model's context window and the training file's rows: lengths left
out follow the window, a changed config.json is read again, rows certainly over a limit are refused."""

from __future__ import annotations

import json
import secrets

from tests.api.job_requests import create, make_file, rm_body


def test_the_context_window_check_reads_the_models_config_again_when_it_changes(client, auth, files, dispatched):
    """`core.model_shape.read_config` remembers a config.json by its (inode, size, mtime): a rewritten one counts."""
    from pathlib import Path

    from core.config import settings

    model = Path(settings.model_roots[0]) / f"context-{secrets.token_hex(4)}"
    model.mkdir(parents=True)
    body = {**rm_body(files), "model": str(model)}  # max_length 256

    def window(n: int, pad: int) -> None:  # each a different size: a new stamp however coarse the clock
        (model / "config.json").write_text(json.dumps({"max_position_embeddings": n, "pad": "x" * pad}))

    window(128, 0)
    for _ in range(2):  # read, then remembered
        r = create(client, auth, body)
        assert (r.status_code, r.json()["code"]) == (422, "context_too_long"), r.text
    window(4096, 10)
    assert create(client, auth, body).status_code == 201
    window(200, 20)
    assert (create(client, auth, body).json()["code"]) == "context_too_long"
    (model / "config.json").unlink()
    assert create(client, auth, body).status_code == 201  # no config: nothing to check against


def _local_model(window: int | None, vocab: dict[str, int] | None = None) -> str:
    """A model directory under the first model root with a config.json naming `window` and, with
    `vocab`, a tokenizer.json holding it."""
    from pathlib import Path

    from core.config import settings

    model = Path(settings.model_roots[0]) / f"lengths-{secrets.token_hex(4)}"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": window} if window else {}))
    if vocab is not None:
        (model / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab},
                                                          "added_tokens": [{"id": 9, "content": "<s>"}]}))
    return str(model)


def test_lengths_left_out_follow_the_models_context_window(client, auth, files, dispatched):
    """A default SFT job on a 512-token model is accepted (it was a 422 context_too_long): the lengths a
    request leaves out are derived from the window; given ones are kept."""
    model = _local_model(512)
    sft = {"model": model, "training_file": files["sft"], "method": {"type": "sft"}}
    r = create(client, auth, sft)
    assert r.status_code == 201, r.text
    data = r.json()["method"]["hyperparameters"]["data"]
    assert (data["max_prompt_length"], data["max_response_length"], data["max_length"]) == (256, 256, None)
    r = create(client, auth, {**sft, "method": {"type": "sft", "hyperparameters": {"data": {"max_prompt_length": 100}}}})
    data = r.json()["method"]["hyperparameters"]["data"]
    assert (data["max_prompt_length"], data["max_response_length"]) == (100, 412)
    r = create(client, auth, {**rm_body(files), "model": model,
                              "method": {"type": "reward_model", "hyperparameters": {}}})
    assert r.status_code == 201, r.text
    assert r.json()["method"]["hyperparameters"]["data"]["max_length"] == 512
    r = create(client, auth, {**rm_body(files), "model": model})  # max_length 256 given: kept
    assert r.json()["method"]["hyperparameters"]["data"]["max_length"] == 256
    big = create(client, auth, {**sft, "model": _local_model(1 << 20)}).json()["method"]["hyperparameters"]["data"]
    assert (big["max_prompt_length"], big["max_response_length"]) == (1024, 2048)  # the engine's defaults
    unknown = create(client, auth, {**sft, "model": _local_model(None)}).json()["method"]["hyperparameters"]["data"]
    assert (unknown["max_prompt_length"], unknown["max_response_length"]) == (1024, 2048)


def test_rows_certainly_over_a_limit_are_refused_at_create_with_truncation_error(client, auth, db, project_key,
                                                                                  dispatched):
    """The file's longest cells (characters) over the most characters a token covers (here 4: "abcd")
    bound the tokens from below; `truncation` other than error, or `filter_overlong_prompts`, accepts."""
    pid = project_key[0]
    model = _local_model(4096, {"a": 0, "ab": 1, "abcd": 2})
    stats = {"prompt": {"max_chars": 400}, "response": {"max_chars": 40}, "chosen": {"max_chars": 40},
             "rejected": {"max_chars": 8}}
    sft_file = make_file(db, pid, "sft", stats=stats, status="processed")
    pairs = make_file(db, pid, "preference", stats=stats, status="processed")

    def sft(validation: str | None = None, **data):
        train = make_file(db, pid, "sft") if validation else sft_file  # (no statistics: nothing known)
        return create(client, auth, {"model": model, "training_file": train, "validation_file": validation,
                                     "method": {"type": "sft", "hyperparameters": {"data": data}}})

    r = sft(max_prompt_length=99)  # 400 characters are at least 100 tokens
    assert (r.status_code, r.json()["code"], r.json()["param"]) == (422, "invalid_file", "training_file"), r.text
    assert "max_prompt_length=99" in r.json()["detail"]
    assert sft(max_prompt_length=100).status_code == 201
    for knob in ({"truncation": "left"}, {"truncation": "right"}, {"truncation": "middle"},
                 {"filter_overlong_prompts": True}):
        assert sft(max_prompt_length=99, **knob).status_code == 201, knob
    r = sft(max_prompt_length=100, max_response_length=10)  # 40 characters + EOS: at least 11 tokens
    assert (r.status_code, r.json()["param"]) == (422, "training_file")
    r = sft(validation=sft_file, max_prompt_length=99)
    assert (r.status_code, r.json()["param"]) == (422, "validation_file")

    def rm(**data):
        return create(client, auth, {"model": model, "training_file": pairs,
                                     "method": {"type": "reward_model", "hyperparameters": {"data": data}}})

    assert rm(max_length=99).json()["param"] == "training_file"
    assert rm(max_length=100).status_code == 201
    assert rm(max_length=99, truncation="left").status_code == 201
    plain = _local_model(4096)  # no tokenizer.json: no bound, the engine decides
    assert create(client, auth, {"model": plain, "training_file": sft_file, "method": {
        "type": "sft", "hyperparameters": {"data": {"max_prompt_length": 99}}}}).status_code == 201
