"""engine/rewards/graders.py and core/finetune_files.py on their own: pure Python, no service."""

from __future__ import annotations

import io
import json

import pytest

from core import finetune_files as ft
from engine.rewards import graders
from engine.rewards.rules import get_reward, score_response

CHECK = {"type": "string_check", "name": "c", "input": "{{sample.output_text}}", "reference": "{{item.answer}}",
         "operation": "eq"}


@pytest.mark.parametrize(("operation", "text", "reference", "want"), [
    ("eq", "7", "7", 1.0), ("eq", "7 ", "7", 0.0), ("ne", "8", "7", 1.0), ("ne", "7", "7", 0.0),
    ("like", "it is 7.", "7", 1.0), ("like", "It Is", "it is", 0.0), ("ilike", "It Is", "it is", 1.0),
])
def test_string_check_operations(operation, text, reference, want):
    spec = {**CHECK, "operation": operation}
    assert graders.grade(spec, graders.sample_of(text), {"answer": reference}) == want


def test_text_similarity_metrics_order_close_and_far_answers():
    ref = "the cat sat on the mat"
    for metric in graders.METRICS:
        spec = {"type": "text_similarity", "name": "s", "input": "{{sample.output_text}}",
                "reference": ref, "evaluation_metric": metric}
        same = graders.grade(spec, graders.sample_of(ref), {})
        close = graders.grade(spec, graders.sample_of("the cat sat on the mat again"), {})
        far = graders.grade(spec, graders.sample_of("dogs bark loudly"), {})
        assert same == pytest.approx(1.0, abs=1e-6) or metric in ("meteor", "gleu", "bleu") and same > 0.9, metric
        assert same >= close > far, (metric, same, close, far)


def test_multi_formula_is_arithmetic_only():
    spec = {"type": "multi", "name": "m", "graders": {"a": CHECK, "b": {**CHECK, "operation": "ne"}},
            "calculate_output": "max(a, b) * 2 - abs(-1) + round(0.4) + a ** 2 / 1"}
    graders.validate(spec)
    assert graders.grade(spec, graders.sample_of("7"), {"answer": "7"}) == pytest.approx(2.0)
    for formula, _ in (("__import__('os').system('x')", "call"), ("a.__class__", "attribute"), ("[a]", "list"),
                       ("open('f')", "call"), ("c + 1", "unknown name"), ("min", "bare function"),
                       ("lambda: 1", "lambda"), ("a if b else 1", "conditional")):
        with pytest.raises(graders.GraderError) as err:
            graders.validate({**spec, "calculate_output": formula})
        assert err.value.param == "grader.calculate_output", formula
    with pytest.raises(graders.GraderError):
        graders.grade({**spec, "calculate_output": "a / (b - b)"}, graders.sample_of("7"), {"answer": "7"})


def test_validation_names_the_field():
    cases = [({**CHECK, "type": "label_model"}, "grader.type"), ({**CHECK, "operation": "regex"}, "grader.operation"),
             ({k: v for k, v in CHECK.items() if k != "reference"}, "grader.reference"),
             ({**CHECK, "input": "{{output_text}}"}, "grader.input"), ({**CHECK, "extra": 1}, "grader.extra"),
             ({"type": "text_similarity", "name": "s", "input": "x", "reference": "y", "evaluation_metric": "cosine"},
              "grader.evaluation_metric"),
             ({"type": "python", "name": "p", "source": "def grade(s, i): return 1"}, "grader.type")]
    for spec, param in cases:
        with pytest.raises(graders.GraderError) as err:
            graders.validate(spec)
        assert err.value.param == param, spec


def test_templates_render_nested_fields_and_report_missing_ones():
    item = {"messages": [{"role": "user", "content": "What is 3 + 4?"}], "answer": 7, "meta": {"k": "v"}}
    assert graders.render("{{ item.messages.0.content }}|{{item.answer}}|{{item.meta.k}}", graders.sample_of("x"),
                          item) == "What is 3 + 4?|7|v"
    with pytest.raises(graders.GraderError, match="item.solution is missing"):
        graders.render("{{item.solution}}", graders.sample_of("x"), item)
    assert graders.item_fields({"type": "multi", "name": "m", "calculate_output": "a",
                                "graders": {"a": CHECK}}) == [("answer", "grader.graders.a.reference")]


def test_grader_reward_function_is_registered_for_the_reward_role():
    fn = get_reward("grader")
    options = {"grader": json.dumps(CHECK)}
    assert score_response(fn, "7", json.dumps({"answer": "7"}), **options) == 1.0
    assert score_response(fn, "8", json.dumps({"answer": "7"}), **options) == 0.0
    assert score_response(fn, "7", json.dumps({"other": "7"}), **options) == 0.0  # missing field: 0


def _file(rows: list[dict]) -> io.BytesIO:
    return io.BytesIO("".join(json.dumps(r) + "\n" for r in rows).encode())


def test_chat_rows_become_one_sft_row_per_trained_assistant_turn():
    row = {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "2+3?"},
                        {"role": "assistant", "content": "5"}, {"role": "user", "content": "4+4?"},
                        {"role": "assistant", "content": "wrong", "weight": 0}, {"role": "user", "content": "again"},
                        {"role": "assistant", "content": [{"type": "text", "text": "8"}]}],
           "tools": [{"type": "function", "function": {"name": "add"}}]}
    kind, data = ft.convert(_file([row]))
    out = [json.loads(line) for line in data.splitlines()]
    assert kind == "chat" and [r["response"] for r in out] == ["5", "8"]
    assert out[0]["prompt"][0]["content"].startswith("Tools: ") and out[0]["prompt"][1]["role"] == "system"
    assert [m["content"] for m in out[1]["prompt"]][-3:] == ["4+4?", "wrong", "again"]  # weight 0: context only


def test_reinforcement_rows_carry_the_row_as_ground_truth():
    kind, data = ft.convert(_file([{"messages": [{"role": "user", "content": "q"}], "answer": "7"}]))
    row = json.loads(data)
    assert kind == "reinforcement" and json.loads(row["ground_truth"])["answer"] == "7"
    info = ft.inspect(_file([{"messages": [{"role": "user", "content": "q"}], "answer": "7", "x": 1},
                             {"messages": [{"role": "user", "content": "r"}], "answer": "8"}]))
    assert info.columns == ["messages", "answer"]  # only the fields every row has
