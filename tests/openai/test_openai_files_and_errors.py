"""OpenAI's client against a live Keel: fine-tune uploads (layout detection, errors naming the line and
field as BadRequestError), grader run/validate, the fine-tuning routes' error shapes, /v1/models."""

from __future__ import annotations

import openai
import pytest
from openai_support import jsonl

CHAT = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"},
                      {"role": "assistant", "content": "5", "weight": 0}, {"role": "user", "content": "And 4 + 4?"},
                      {"role": "assistant", "content": "8"}]},
        {"messages": [{"role": "user", "content": "What is 1 + 1?"},
                      {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 1}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "2"},
                      {"role": "assistant", "content": "2"}]}]
DPO = [{"input": {"messages": [{"role": "user", "content": "Hi"}]},
        "preferred_output": [{"role": "assistant", "content": "Hello, happy to help!"}],
        "non_preferred_output": [{"role": "assistant", "content": "Go away."}]}]
RFT = [{"messages": [{"role": "user", "content": "What is 3 + 4?"}], "answer": "7", "level": 1}]
GRADER = {"type": "multi", "name": "m", "calculate_output": "0.5 * exact + 0.5 * sim",
          "graders": {"exact": {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
                                "reference": "{{item.answer}}", "operation": "eq"},
                      "sim": {"type": "text_similarity", "name": "sim", "input": "{{sample.output_text}}",
                              "reference": "{{item.answer}}", "evaluation_metric": "fuzzy_match"}}}


def test_upload_detects_each_layout(oai, tmp_path):
    for name, rows, columns in (("chat.jsonl", CHAT, ["messages"]),
                                ("dpo.jsonl", DPO, ["input", "preferred_output", "non_preferred_output"]),
                                ("rft.jsonl", RFT, ["messages", "answer", "level"])):
        f = oai.files.create(file=jsonl(tmp_path, name, rows).open("rb"), purpose="fine-tune")
        assert (f.object, f.purpose, f.filename, f.status) == ("file", "fine-tune", name, "processed")
        assert f.bytes > 0 and f.created_at > 0
        raw = oai.files.with_raw_response.retrieve(f.id).http_response.json()
        assert raw["columns"] == columns and raw["rows"] == len(rows)


@pytest.mark.parametrize(("rows", "param", "line"), [
    ([CHAT[0], {"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]}],
     "messages[0].role", 2),
    ([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "weight": 2}]}],
     "messages[1].weight", 1),
    ([DPO[0], {"input": {"messages": [{"role": "user", "content": "q"}]}, "preferred_output": "a",
               "non_preferred_output": [{"role": "assistant", "content": "b"}]}], "preferred_output", 2),
    ([CHAT[0], DPO[0]], "file", 2),
    ([{"prompt": "not openai"}], "messages", 1),
])
def test_bad_upload_is_a_bad_request_naming_line_and_field(oai, tmp_path, rows, param, line):
    with pytest.raises(openai.BadRequestError) as err:
        oai.files.create(file=jsonl(tmp_path, "bad.jsonl", rows).open("rb"), purpose="fine-tune")
    assert err.value.param == param
    assert f"line {line}" in err.value.message.lower()
    assert err.value.body["param"] == param and err.value.body["type"] == "invalid_request_error"


def test_graders_run_and_validate(oai):
    r = oai.fine_tuning.alpha.graders.run(grader=GRADER, model_sample="7", item={"answer": "7"})
    assert r.reward == pytest.approx(1.0)
    assert r.metadata.scores["exact"] == 1.0
    r = oai.fine_tuning.alpha.graders.run(grader=GRADER, model_sample="8", item={"answer": "7"})
    assert r.reward == pytest.approx(0.0)
    assert oai.fine_tuning.alpha.graders.validate(grader=GRADER).grader.type == "multi"
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.alpha.graders.validate(grader={**GRADER, "graders": {"x": {"type": "nope", "name": "x"}}})
    assert err.value.param == "grader.graders.x.type"
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.alpha.graders.validate(grader={**GRADER, "calculate_output": "__import__('os')"})
    assert err.value.param == "grader.calculate_output"


def test_job_errors_carry_openai_error_objects(oai, tmp_path, demo_assets):
    chat = oai.files.create(file=jsonl(tmp_path, "chat.jsonl", CHAT).open("rb"), purpose="fine-tune")
    rft = oai.files.create(file=jsonl(tmp_path, "rft.jsonl", RFT).open("rb"), purpose="fine-tune")
    model = demo_assets["model"]
    with pytest.raises(openai.NotFoundError) as err:
        oai.fine_tuning.jobs.retrieve("job-nope")
    assert err.value.param == "job_id" and err.value.code == "not_found"
    with pytest.raises(openai.NotFoundError) as err:
        oai.fine_tuning.jobs.create(model=model, training_file="file-nope")
    assert err.value.param == "training_file"
    with pytest.raises(openai.BadRequestError) as err:  # a chat file for a reinforcement job
        oai.fine_tuning.jobs.create(model=model, training_file=chat.id, method={
            "type": "reinforcement", "reinforcement": {"grader": GRADER}})
    assert err.value.param == "training_file"
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.create(model=model, training_file=rft.id, method={
            "type": "reinforcement", "reinforcement": {"grader": {"type": "label_model", "name": "x"}}})
    assert err.value.param == "method.reinforcement.grader.type"
    missing = {**GRADER["graders"]["exact"], "reference": "{{item.solution}}"}
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.create(model=model, training_file=rft.id, method={
            "type": "reinforcement", "reinforcement": {"grader": missing}})
    assert err.value.param == "method.reinforcement.grader.reference"
    assert "item.solution" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.create(model=model, training_file=chat.id, method={
            "type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 0}}})
    assert err.value.param == "method.supervised.hyperparameters.n_epochs"
    bad = openai.OpenAI(base_url=oai.base_url, api_key="keel_wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.fine_tuning.jobs.list()


def test_models_list_has_openai_fields(oai):
    page = oai.models.list()
    assert page.object == "list" if hasattr(page, "object") else True
    for m in page.data:
        assert m.object == "model" and isinstance(m.created, int) and m.owned_by


def test_a_bad_key_on_models_and_files_carries_the_openai_error(oai):
    """The client's `models` and `files` calls land on Keel's own routes: their problems keep Keel's
    status and carry OpenAI's `error` member too (the client reads `type` and `code` from it)."""
    bad = openai.OpenAI(base_url=oai.base_url, api_key="keel_wrong", max_retries=0)
    for call in (bad.models.list, bad.files.list, lambda: bad.models.retrieve("model-x")):
        with pytest.raises(openai.AuthenticationError) as info:
            call()
        assert info.value.type == "authentication_error" and info.value.code, info.value.body
    with pytest.raises(openai.NotFoundError) as info:
        oai.models.retrieve("model-nothing")
    assert (info.value.type, info.value.code, info.value.param) == ("invalid_request_error", "not_found", "model_id")
