"""What every dump format provides, and the pieces formats share: the result of a read, a
format's entry in the registry, and JSON-shape checks whose errors name the field path.

A format is a `Format(name, shape, sniff, read, write)`: `shape` describes it in detection
errors; `sniff(record)` says whether a first record looks like it; `read(records)` turns the
located JSON records of a file into Episodes (or BadRecords, never dropping one);
`write(episodes, stream)` streams them out and returns how many it wrote (None for a
read-only format).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO, TypeAlias

from simworld.data.jsonio import BadRecord, RawRecord
from simworld.data.records import JSON, Episode, RecordError

Item: TypeAlias = Episode | BadRecord


@dataclass
class ReadResult:
    """A whole dump read: the episodes, every record that could not be read, the format."""

    episodes: list[Episode]
    bad: list[BadRecord]
    format: str


@dataclass(frozen=True)
class Format:
    """A dump format in the registry; `shape` describes it in detection errors."""

    name: str
    shape: str
    sniff: Callable[[JSON], bool]
    read: Callable[[Iterable[RawRecord | BadRecord]], Iterator[Item]]
    write: Callable[[Iterable[Episode], TextIO], int] | None = None


def read_each(
    parse: Callable[[JSON, str], Episode],
) -> Callable[[Iterable[RawRecord | BadRecord]], Iterator[Item]]:
    """A reader for formats with one episode per record: `parse(value, origin)` builds it or
    raises RecordError, which becomes a BadRecord at the record's location."""

    def read(records: Iterable[RawRecord | BadRecord]) -> Iterator[Item]:
        for record in records:
            if isinstance(record, BadRecord):
                yield record
                continue
            try:
                yield parse(record.value, record.origin)
            except RecordError as exc:
                yield record.bad(str(exc))

    return read


# ---------------------------------------------------------------------------- JSON shapes


def type_name(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def require(record: dict[str, JSON], key: str, path: str = "") -> JSON:
    """`record[key]`, or RecordError naming the missing field."""
    if key not in record:
        raise RecordError(join(path, key), "missing required field")
    return record[key]


def expect_object(value: Any, path: str) -> dict[str, JSON]:
    if not isinstance(value, dict):
        raise RecordError(path, f"expected an object, got {type_name(value)}")
    return value


def expect_list(value: Any, path: str) -> list[JSON]:
    if not isinstance(value, list):
        raise RecordError(path, f"expected an array, got {type_name(value)}")
    return value


def expect_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise RecordError(path, f"expected a string, got {type_name(value)}")
    return value


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def parse_json_text(text: str) -> JSON:
    """`text` parsed as JSON, or None when it is not JSON (NaN and Infinity are not)."""

    def reject(name: str) -> None:
        raise ValueError(name)

    try:
        return json.loads(text, parse_constant=reject)
    except (ValueError, RecursionError):
        return None


def parse_arguments(raw: str) -> dict[str, JSON] | None:
    """A call's argument string parsed, or None when it is not a JSON object."""
    parsed = parse_json_text(raw)
    return parsed if isinstance(parsed, dict) else None


def record_id(record: dict[str, JSON], origin: str) -> str:
    """A record's own `id` (string or integer) when it has one, else its origin."""
    value = record.get("id")
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return origin


__all__ = [
    "Format",
    "Item",
    "ReadResult",
    "expect_list",
    "expect_object",
    "expect_str",
    "join",
    "parse_arguments",
    "parse_json_text",
    "read_each",
    "record_id",
    "require",
    "type_name",
]
