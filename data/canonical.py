"""The canonical form of a tool result or state: what "the same observation" means wherever
simworld compares one with another (eval's metrics, the simulators' shadow mode).

    from simworld.data.canonical import canonical
    canonical('{"b": 1.0, "a": [1, 2]}')                      # '{"a":[1,2],"b":1}'
    canonical('{"token": "x9"}', volatile, reference=False)   # '{"token":"<volatile:string>"}'

JSON texts are re-dumped with sorted keys and no spaces, integral floats written as ints
(RFC 8785: a model that writes 1 for 1.0 said the same number), and the values of volatile
fields (ids, tokens, clock readings: `Episode.volatile`) replaced by a marker of their JSON
type, so they compare by type and format, never by value; on the predicted side
(`reference=False`) the marker also says whether the value fullmatches the field's
pattern. A text that is not JSON is compared trimmed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from simworld.data.records import JSON, Observation, TextObservation, VolatileField


def observation_text(obs: Observation) -> str:
    """The text of a text observation, or the result texts joined by newlines."""
    if isinstance(obs, TextObservation):
        return obs.text
    return "\n".join(result.text for result in obs.results)


def _json_type(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names[type(value)]


def _marker(value: JSON, field: VolatileField, reference: bool) -> str:
    kind = _json_type(value)
    if reference or not field.pattern or re.fullmatch(field.pattern, json.dumps(value)):
        return f"<volatile:{kind}>"
    return f"<volatile:{kind}:malformed>"


def normalize(value: JSON, fields: Mapping[str, VolatileField], reference: bool) -> JSON:
    """`value` with volatile values replaced by markers and integral floats made ints
    (RFC 8785 writes 1.0 as 1: a model that writes 1 for 1.0 said the same number)."""
    if isinstance(value, dict):
        return {
            key: _marker(item, fields[key], reference)
            if key in fields
            else normalize(item, fields, reference)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [normalize(item, fields, reference) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def dumps(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def by_key(volatile: Sequence[VolatileField]) -> dict[str, VolatileField]:
    return {field.key: field for field in volatile}


def parse(text: str) -> tuple[bool, JSON]:
    """(True, the value) for a JSON text, else (False, None); a text nested too deep for
    the parser (a model's runaway output) counts as not JSON."""
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def canonical(text: str, volatile: Sequence[VolatileField] = (), *, reference: bool = True) -> str:
    """The JSON-canonical form of `text` (sorted keys, no spaces, volatile values as
    markers); `text.strip()` when it is not JSON. `reference=False` marks a predicted text,
    whose volatile values are also checked against their field's pattern."""
    ok, value = parse(text)
    if not ok:
        return text.strip()
    return dumps(normalize(value, by_key(volatile), reference))


__all__ = ["by_key", "canonical", "dumps", "normalize", "observation_text", "parse"]
