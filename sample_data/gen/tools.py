"""The tool of the multi-turn rollouts: a tiny, safe Python expression evaluator.

Expressions are built from a seeded RNG and evaluated by walking a restricted AST (literals,
arithmetic, a few builtins and str methods); nothing is passed to eval(). The REPL-style output is
what the model sees, wrapped in <python_output> tags, as an out-of-distribution tool response.
"""

from __future__ import annotations

import ast
import operator
import random
from collections.abc import Callable
from typing import Any

MAX_OUTPUT = 24  # characters; longer outputs are truncated like a tool with an output limit

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_BUILTINS: dict[str, Callable[..., Any]] = {
    "len": len,
    "abs": abs,
    "min": min,
    "max": max,
    "sorted": sorted,
}
_STR_METHODS = frozenset(
    {"upper", "lower", "title", "strip", "replace", "split", "count", "find", "zfill"}
)
_WORDS = ("alpha", "beta", "queue", "token", "python", "weak ref", "shlex", "spam", "eggs", "a-b-c")


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | str):
        return node.value
    if isinstance(node, ast.List):
        return [_eval(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (not isinstance(right, int) or abs(right) > 8):
            raise ValueError("exponent too large")
        if isinstance(node.op, ast.Mult) and isinstance(left, str | list) and right > 9:
            raise ValueError("repetition too large")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.Call) and not node.keywords:
        args = [_eval(a) for a in node.args]
        func = node.func
        if isinstance(func, ast.Name) and func.id in _BUILTINS:
            return _BUILTINS[func.id](*args)
        if isinstance(func, ast.Attribute) and func.attr in _STR_METHODS:
            target = _eval(func.value)
            if isinstance(target, str):
                return getattr(target, func.attr)(*args)
    raise ValueError(f"unsupported expression node {type(node).__name__}")


def safe_eval(expr: str) -> Any:
    """Evaluate a restricted literal expression (raises on anything outside the whitelist)."""
    return _eval(ast.parse(expr, mode="eval"))


def run_expression(expr: str, limit: int = MAX_OUTPUT) -> str:
    """The REPL output of `expr`: repr of the value, or the exception line, truncated."""
    try:
        out = repr(safe_eval(expr))
    except (ArithmeticError, ValueError, TypeError) as exc:
        out = f"{type(exc).__name__}: {exc}"
    return out if len(out) <= limit else out[: limit - 3] + "..."


def random_expression(rng: random.Random) -> str:
    """A random arithmetic or str expression (as source text)."""
    kind = rng.randrange(6)
    a, b, c = rng.randint(-99, 999), rng.randint(0, 99), rng.randint(1, 9)
    op1, op2 = rng.choice("+-*%"), rng.choice(["+", "-", "*", "//", "%"])
    word = rng.choice(_WORDS)
    if kind == 0:
        return f"{a} {op1} {b}"
    if kind == 1:
        return f"({a} {op1} {b}) {op2} {rng.randint(0, 9)}"
    if kind == 2:
        return f"{c} ** {rng.randint(2, 8)} - {b}"
    if kind == 3:
        method = rng.choice(["upper", "title", "split", "zfill", "find", "count"])
        arg = {"split": "'-'", "zfill": str(c + 8), "find": "'a'", "count": "'e'"}.get(method, "")
        return f"{word!r}.{method}({arg})"
    if kind == 4:
        return f"len({word!r} * {c})"
    return f"{rng.choice(['min', 'max', 'sorted'])}([{a}, {b}, {c}])"


def tool_response(rng: random.Random, echo: bool = False) -> bytes:
    """The bytes inserted after a model turn: the evaluated output in <python_output> tags;
    `echo`: a longer response that also echoes the expression (`>>> expr`), as a REPL does."""
    expr = random_expression(rng)
    if not echo:
        return f"<python_output>\n{run_expression(expr)}\n</python_output>\n".encode()
    out = run_expression(expr, 2 * MAX_OUTPUT)
    return f"<python_output>\n>>> {expr}\n{out}\n</python_output>\n".encode()
