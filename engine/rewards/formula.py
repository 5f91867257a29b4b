"""`calculate_output` of a `multi` grader: arithmetic parsed with `ast`, never `eval`.

Allowed: numbers, the graders' names, `+ - * / **` (exponents up to 64), unary signs and calls of
`min`, `max`, `abs`, `round`.
"""

from __future__ import annotations

import ast
from functools import lru_cache

FUNCTIONS = {"min": min, "max": max, "abs": abs, "round": round}
MAX_CHARS = 2000
_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.Pow: lambda a, b: a ** b}
_UNARY = {ast.UAdd: lambda a: +a, ast.USub: lambda a: -a}


@lru_cache(maxsize=256)
def parse_formula(text: str, names: frozenset[str]) -> ast.Expression:
    """The checked syntax tree of `text`; ValueError says what is not allowed."""
    if len(text) > MAX_CHARS:
        raise ValueError(f"at most {MAX_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not a formula: {e.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Expression | ast.Load) or type(node) in _BINARY or type(node) in _UNARY:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            continue
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            continue
        if isinstance(node, ast.Name) and (node.id in names or node.id in FUNCTIONS):
            continue
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
                and not node.keywords and node.args):
            continue
        what = node.id if isinstance(node, ast.Name) else type(node).__name__
        raise ValueError(f"{what!r} is not allowed: use numbers, the graders' names, + - * / **, "
                         "min, max, abs and round")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in FUNCTIONS and not any(
                isinstance(c, ast.Call) and c.func is node for c in ast.walk(tree)):
            raise ValueError(f"{node.id!r} must be called")
    return tree


def evaluate(node: ast.AST, values: dict[str, float]) -> float:
    """The formula's value; ArithmeticError or ValueError when it has none (division by zero...)."""
    if isinstance(node, ast.Expression):
        return evaluate(node.body, values)
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](evaluate(node.operand, values))
    if isinstance(node, ast.BinOp):
        a, b = evaluate(node.left, values), evaluate(node.right, values)
        if isinstance(node.op, ast.Pow) and abs(b) > 64:
            raise ValueError("exponents are limited to +-64")
        return float(_BINARY[type(node.op)](a, b))
    if isinstance(node, ast.Call):
        args = [evaluate(a, values) for a in node.args]
        return float(FUNCTIONS[node.func.id](*args))
    raise ValueError(f"unexpected {type(node).__name__}")
