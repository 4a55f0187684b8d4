"""Seeded perturbations of argument values, and arguments made up from a schema.

Off-policy calls need argument values an agent might plausibly send but the ground truth
did not: a near-miss file name, another id, a negative amount, a flipped flag.

    rng = random.Random(0)
    perturb_value("final_report.pdf", rng)   # e.g. "final_report_old.pdf" or "fianl_report.pdf"
    perturb_value(3, rng)                    # e.g. 8, -5 or 37

Every result differs from the input. Dict keys are never changed, only values: TicketAPI
joins unknown update keys from a `set`, whose order would depend on PYTHONHASHSEED.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from simworld.data.records import JSON

_SUFFIXES = ("_old", "_v2", "_copy", "2")


def perturb_value(value: JSON, rng: random.Random) -> JSON:
    """A different value of the same JSON type (None becomes a string)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return _perturb_int(value, rng)
    if isinstance(value, float):
        return _perturb_float(value, rng)
    if isinstance(value, str):
        return perturb_string(value, rng)
    if isinstance(value, list):
        return _perturb_list(value, rng)
    if isinstance(value, dict):
        return _perturb_dict(value, rng)
    return "unknown"


def _perturb_int(value: int, rng: random.Random) -> int:
    step = rng.randint(1, 9)
    options = [value + step, value - step, -abs(value) - step, value * 10 + step]
    return rng.choice([option for option in options if option != value])


def _perturb_float(value: float, rng: random.Random) -> float:
    delta = round(rng.uniform(1.0, 50.0), 2)
    options = [round(value + delta, 2), round(-abs(value) - delta, 2), value * 10 + delta]
    return rng.choice([option for option in options if option != value] or [value + 1.0])


def perturb_string(text: str, rng: random.Random) -> str:
    """A near miss: one digit changed, two neighbours swapped, a suffix, or the case flipped."""
    if not text:
        return "unknown"
    edits = ["suffix"]
    if any(ch.isdigit() for ch in text):
        edits.append("digit")
    if any(a != b for a, b in itertools.pairwise(text)):
        edits.append("swap")
    if text[0].swapcase() != text[0]:
        edits.append("case")
    edit = rng.choice(edits)
    if edit == "digit":
        positions = [i for i, ch in enumerate(text) if ch.isdigit()]
        i = rng.choice(positions)
        digit = rng.choice([d for d in "0123456789" if d != text[i]])
        return text[:i] + digit + text[i + 1 :]
    if edit == "swap":
        positions = [i for i in range(len(text) - 1) if text[i] != text[i + 1]]
        i = rng.choice(positions)
        return text[:i] + text[i + 1] + text[i] + text[i + 2 :]
    if edit == "case":
        return text[0].swapcase() + text[1:]
    stem, dot, extension = text.rpartition(".")
    suffix = rng.choice(_SUFFIXES)
    return f"{stem}{suffix}.{extension}" if dot and stem else text + suffix


def _perturb_list(value: list[Any], rng: random.Random) -> list[Any]:
    if not value:
        return ["unknown"]
    edit = rng.choice(["drop", "empty", "element"] if len(value) > 1 else ["empty", "element"])
    if edit == "empty":
        return []
    i = rng.randrange(len(value))
    if edit == "drop":
        return value[:i] + value[i + 1 :]
    return [*value[:i], perturb_value(value[i], rng), *value[i + 1 :]]


def _perturb_dict(value: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    if not value:
        return {"unknown": "unknown"}
    key = rng.choice(sorted(value))
    return {**value, key: perturb_value(value[key], rng)}


def synthesize_arguments(schema: dict[str, JSON], rng: random.Random) -> dict[str, JSON]:
    """Values for the required arguments of `schema`, chosen only by their declared type."""
    properties = schema.get("properties", {})
    return {name: _value_for(properties.get(name, {}), rng) for name in schema.get("required", [])}


def _value_for(schema: dict[str, Any], rng: random.Random) -> JSON:
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        return rng.randint(1, 10)
    if kind == "number":
        return float(rng.randint(1, 100))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "example"


__all__ = ["perturb_string", "perturb_value", "synthesize_arguments"]
