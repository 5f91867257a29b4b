"""Built-in environments: tool-call parsing, the tools environment (calculator, python in the grader
sandbox), and the echo_token / arithmetic games."""

from __future__ import annotations

import json
import time

import pytest

from engine.environments.base import EnvironmentFailure
from engine.environments.building import EnvironmentContext, make_environment
from engine.environments.games import WORDS, Arithmetic, EchoToken, final_number
from engine.environments.tool_calls import format_tool_call, parse_tool_calls
from engine.environments.tools import PythonTool, ToolEnvironment, ToolError, calculate, calculator_tool
from engine.errors import EngineError
from engine.rewards.sandbox import Limits

CONTEXT = EnvironmentContext(seed=5)


def call(name: str, **arguments) -> str:
    return format_tool_call(name, arguments)


# --- parsing ------------------------------------------------------------------------------------------

def test_parses_one_and_several_calls_in_order():
    [only] = parse_tool_calls("Let me compute. " + call("calculator", expression="3 + 4") + " done")
    assert (only.name, only.arguments, only.error) == ("calculator", {"expression": "3 + 4"}, None)

    text = call("calculator", expression="1") + "\n" + call("python", code="print(1)") + call("calculator",
                                                                                              expression="2")
    assert [(c.name, c.arguments) for c in parse_tool_calls(text)] == [
        ("calculator", {"expression": "1"}), ("python", {"code": "print(1)"}), ("calculator", {"expression": "2"})]
    assert parse_tool_calls("no call here") == []


def test_openai_string_arguments_are_read():
    [c] = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"2*3\\"}"}</tool_call>')
    assert c.error is None and c.arguments == {"expression": "2*3"}


@pytest.mark.parametrize("body, error", [
    ('{"name": "calculator", "arguments": {"expression": "1"', "not valid JSON"),
    ('["calculator"]', "must be a JSON object"),
    ('{"arguments": {}}', 'has no "name"'),
    ('{"name": "calculator", "arguments": [1, 2]}', "must be a JSON object"),
    ('{"name": "calculator", "arguments": "{oops"}', "not valid JSON"),
])
def test_unreadable_calls_carry_an_error(body, error):
    [c] = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert c.error is not None and error in c.error


def test_an_unterminated_call_is_an_error():
    [c] = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {"expr')
    assert "unterminated" in c.error


# --- the tools environment ----------------------------------------------------------------------------

def test_tool_environment_answers_calls_and_errors_without_raising():
    env = make_environment({"type": "tools", "tools": ["calculator"]}, CONTEXT)
    assert isinstance(env, ToolEnvironment) and env.reset({"prompt": "x"}) == []
    text = (call("calculator", expression="6 * 7") + "<tool_call>{bad json</tool_call>"
            + call("search", query="x") + call("calculator", expr="1") + call("calculator", expression="1/0"))
    step = env.step(text)
    assert not step.done and step.tool_calls == 5 and step.tool_errors == 4
    assert [m["role"] for m in step.messages] == ["tool"] * 5
    contents = [m["content"] for m in step.messages]
    assert contents[0] == "42"
    assert contents[1].startswith("Error: the tool call is not valid JSON")
    assert contents[2] == "Error: unknown tool 'search' (available: calculator)"
    assert contents[3].startswith('Error: calculator takes {"expression"')
    assert contents[4] == "Error: division by zero"
    final = env.step("The answer is 42.")
    assert final.done and final.final_reward is None and final.tool_calls == 0 and final.messages == []
    env.close()


def test_declared_function_tools_are_answered_with_an_error_and_built_ins_run():
    spec = {"type": "tools", "tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
        {"type": "function", "function": {"name": "calculator"}}]}
    env = make_environment(spec, CONTEXT)
    assert [d["function"]["name"] for d in env.definitions] == ["calculator"]
    step = env.step(call("get_weather", city="Paris") + call("calculator", expression="2 ** 5"))
    assert [m["content"] for m in step.messages] == [
        "Error: the tool 'get_weather' cannot be run in this environment", "32"]
    assert step.tool_errors == 1


@pytest.mark.parametrize("spec", [
    {"type": "tools", "tools": ["shell"]}, {"type": "tools", "tools": []}, {"type": "tools", "tools": [{"x": 1}]},
    {"type": "echo_token", "words": []}, {"type": "echo_token", "words": "in"}, {"type": "nope"},
])
def test_bad_specs_are_refused(spec):
    with pytest.raises(EngineError) as caught:
        make_environment(spec, CONTEXT)
    assert caught.value.code == "invalid_environment"


def test_the_tool_format_comes_from_the_context():
    for kind in ("tools", "arithmetic"):
        with pytest.raises(EngineError) as caught:
            make_environment({"type": kind}, EnvironmentContext(tool_format="xml"))
        assert caught.value.param == "rollout.multi_turn.tool_format"


# --- calculator -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("expression, value", [
    ("3 + 4", "7"), ("2 * (3 + 4) - 5", "9"), ("7 / 2", "3.5"), ("7 // 2", "3"), ("-7 % 3", "2"),
    ("2 ** 10", "1024"), ("0.1 + 0.2", "0.3"), ("-(3)", "-3"), ("2 ** 0.5", "1.41421356237"),
])
def test_calculator_is_right(expression, value):
    assert calculator_tool({"expression": expression}) == value


@pytest.mark.parametrize("expression, error", [
    ("__import__('os').system('id')", "Call is not allowed"), ("x + 1", "Name is not allowed"),
    ("(1).real", "Attribute is not allowed"), ("[1, 2]", "List is not allowed"), ("'a' * 3", "Constant"),
    ("True + 1", "Constant"), ("2 ** 100000", "too large"), ("10 ** 10 ** 10", "too large"),
    ("9 ** 9 ** 9", "too large"), ("2.0 ** 5000", "too large"), ("1 / 0", "division by zero"),
    ("2 ^ 3", r"write \*\*"), ("1 +", "not an arithmetic expression"), ("1" * 300, "longer than"),
    ("(-8) ** 0.5", "not a real number"),
])
def test_calculator_refuses(expression, error):
    started = time.perf_counter()
    with pytest.raises(ToolError, match=error):
        calculate(expression)
    assert time.perf_counter() - started < 0.5


def test_calculator_arguments_must_be_an_expression():
    for arguments in ({}, {"expression": 3}, {"expression": "1", "extra": 2}):
        with pytest.raises(ToolError, match="calculator takes"):
            calculator_tool(arguments)


# --- python ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def python_tool():
    return PythonTool(Limits(cpu_s=20.0, wall_s=1.5, memory_mb=512))


def test_python_runs_code_in_the_sandbox_and_returns_what_it_prints(python_tool):
    assert python_tool({"code": "import math\nprint(sum(range(10)), math.factorial(5))"}) == "45 120\n"
    with pytest.raises(ToolError, match=r"^partial\nZeroDivisionError: division by zero$"):
        python_tool({"code": "print('partial')\n1 / 0"})
    # The sandbox's confinement holds for the tool's code: no network.
    with pytest.raises(ToolError, match="refused by the grader sandbox"):
        python_tool({"code": "import socket\nsocket.create_connection(('127.0.0.1', 5432))"})
    long = python_tool({"code": "print('x' * 5000, end='')"})
    assert long.startswith("[output cut to its end]\n") and long.endswith("x" * 100) and len(long) <= 800
    env = ToolEnvironment({"type": "tools", "tools": ["python"]}, EnvironmentContext(python_limits=python_tool.limits))
    [message] = env.step(call("python", code="print('x' * 5000, end='')")).messages
    assert message["content"] == long  # not cut a second time


def test_an_infinite_loop_is_cut_by_the_wall_limit_and_answered_as_an_error(python_tool):
    env = ToolEnvironment({"type": "tools", "tools": ["python"]}, EnvironmentContext(python_limits=python_tool.limits))
    started = time.perf_counter()
    step = env.step(call("python", code="while True:\n    pass"))
    assert time.perf_counter() - started < 15
    assert step.tool_errors == 1 and not step.done
    [message] = step.messages
    assert message["content"] == "Error: the code exceeded the wall-clock limit of 1.5 s"


def test_python_limits_come_from_the_context():
    env = ToolEnvironment({"type": "tools", "tools": ["python"]}, EnvironmentContext(python_limits={"wall_s": 2.5}))
    assert env.tools["python"].limits == Limits(wall_s=2.5)


# --- games -----------------------------------------------------------------------------------------------

ROWS = [{"prompt": f"What is {a} + {b}?", "ground_truth": str(a + b)} for a in range(4) for b in range(4)]


def test_echo_token_rewards_exactly_when_the_target_is_repeated():
    env = make_environment({"type": "echo_token"}, CONTEXT)
    assert isinstance(env, EchoToken)
    for row in ROWS[:4]:
        assert env.reset(row) == []
        first = env.step("anything at all")
        assert not first.done and first.final_reward is None
        [message] = first.messages
        target = env.target
        assert target in WORDS and message == {"role": "user", "content": f"Say: {target}"}
        assert env.step(f"ok {target}").final_reward == 1.0
        env.reset(row)
        env.step("")
        wrong = next(w for w in ("xyz", "zzz") if target not in w)
        second = env.step(wrong)
        assert second.done and second.final_reward == 0.0 and second.reward is None


def test_echo_token_targets_are_deterministic_in_row_and_seed():
    def targets(seed, words=WORDS):
        env = EchoToken({"words": list(words)}, EnvironmentContext(seed=seed))
        out = []
        for row in ROWS:
            env.reset(row)
            out.append(env.target)
        return out

    assert targets(1) == targets(1)
    assert targets(1) != targets(2)
    assert set(targets(1)) == set(WORDS)  # 16 rows spread over the few words
    assert set(targets(3, ["kiwi", "fig"])) == {"kiwi", "fig"}


def test_arithmetic_rewards_the_right_answer_with_the_calculator_available():
    env = make_environment({"type": "arithmetic"}, CONTEXT)
    assert isinstance(env, Arithmetic)
    env.reset({"prompt": "What is 3 + 4?", "ground_truth": "7"})
    used = env.step(call("calculator", expression="3 + 4"))
    assert not used.done and used.tool_calls == 1 and used.messages[0]["content"] == "7"
    assert env.step("3 + 4 = 7\n#### 7").final_reward == 1.0
    for wrong in ("3 + 4 = 8", "#### 8", "seven", ""):
        env.reset({"prompt": "What is 3 + 4?", "ground_truth": "7"})
        step = env.step(wrong)
        assert step.done and step.final_reward == 0.0
    env.reset({"prompt": "What is 9 - 5?"})  # no ground truth: the prompt's question
    assert env.step("It is 4.").final_reward == 1.0
    env.reset({"prompt": [{"role": "user", "content": "What is 6 * 7?"}]})
    assert env.step("42").final_reward == 1.0
    with pytest.raises(EnvironmentFailure):
        env.reset({"prompt": "Tell me a joke."})


def test_final_number_prefers_the_gsm8k_marker():
    assert final_number("3 + 4 = 7\n#### 7") == 7.0
    assert final_number("#### 12 and then 5") == 12.0
    assert final_number("maybe 2, maybe -3.5") == -3.5
    assert final_number("none") is None


def test_spec_and_tool_definitions_are_json():
    env = ToolEnvironment({"type": "tools"}, CONTEXT)
    assert json.loads(json.dumps(env.definitions))[0]["function"]["name"] == "python"
