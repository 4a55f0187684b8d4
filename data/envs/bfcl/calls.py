"""BFCL call strings, parsed without `eval` and written back in BFCL's own style.

BFCL's ground truth writes each call as Python source, e.g.
`mv(source='final_report.pdf', destination='temp')` or `cd('archives')`. BFCL itself runs
these through `eval`; here they are parsed with `ast`, and only literal arguments
(strings, numbers, booleans, None, lists, dicts) are accepted:

    >>> parse_call("mv(source='a.txt', destination='tmp')")
    ParsedCall(name='mv', args=(), kwargs={'source': 'a.txt', 'destination': 'tmp'})
    >>> format_call("cd", {"folder": "tmp"})
    "cd(folder='tmp')"

Tuples become lists (JSON has no tuple); sets, bytes and complex numbers are refused.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from simworld.data.records import JSON


@dataclass(frozen=True)
class ParsedCall:
    """One call: the function name, positional arguments, then keyword arguments."""

    name: str
    args: tuple[JSON, ...]
    kwargs: dict[str, JSON]


def parse_call(text: str) -> ParsedCall:
    """Parse `name(arg, key=value, ...)`; ValueError names what is not allowed."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a call: {text!r} ({exc.msg})") from exc
    node = tree.body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a call of a named function: {text!r}")
    args = tuple(_literal(arg, text) for arg in node.args)
    kwargs: dict[str, JSON] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ValueError(f"**-unpacking is not allowed: {text!r}")
        kwargs[keyword.arg] = _literal(keyword.value, text)
    return ParsedCall(node.func.id, args, kwargs)


def format_call(name: str, arguments: dict[str, JSON]) -> str:
    """The call as BFCL writes it: keyword arguments with Python literals."""
    inner = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return f"{name}({inner})"


def _literal(node: ast.expr, text: str) -> JSON:
    try:
        value = ast.literal_eval(node)
    except ValueError as exc:
        raise ValueError(f"argument {ast.unparse(node)!r} of {text!r} is not a literal") from exc
    return _as_json(value, text)


def _as_json(value: Any, text: str) -> JSON:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_as_json(item, text) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise ValueError(f"a dict argument of {text!r} has a non-string key")
        return {key: _as_json(item, text) for key, item in value.items()}
    raise ValueError(f"a {type(value).__name__} argument in {text!r} has no JSON form")


__all__ = ["ParsedCall", "format_call", "parse_call"]
