"""Dump formats: readers that turn dumps into Episodes and writers that turn Episodes into
dumps, with the format told from the file when it is not named.

    from simworld.data.formats import read_episodes, write_episodes
    result = read_episodes("dump.jsonl.gz")          # format detected from the first record
    result.episodes, result.bad, result.format       # bad: every record skipped, with its place
    write_episodes(result.episodes, "out.jsonl", format="openai")

Formats (one module each): `simworld` (our transition JSONL, lossless), `openai` (chat
messages + tools), `sharegpt` (LLaMA-Factory conversations), `five-block` (the five-block
world-model records). Hugging Face `datasets` is a bridge, not a file format: see hf.py.

Writing five-block renders prompts, which the world model's serialization owns, and this
layer imports nothing above it: `WRITER_PLUGINS` names such writers as "module:function"
strings, imported only when that format is written. Files may be gzipped (.gz) and may be
one JSON array instead of JSON Lines.

Nothing is dropped silently and nothing is truncated: a record that cannot be read becomes
a BadRecord("dump.jsonl:12", reason), collected by `read_episodes` and yielded in place by
`iter_episodes`; with `strict=True` the first one raises DumpError.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from simworld.data.formats import fiveblock, openai, sharegpt, simworld
from simworld.data.formats.base import Format, Item, ReadResult
from simworld.data.jsonio import BadRecord, DumpError, RawRecord, iter_json, open_write
from simworld.data.records import Episode

_REGISTRY: dict[str, Format] = {
    f.name: f for f in (simworld.FORMAT, fiveblock.FORMAT, openai.FORMAT, sharegpt.FORMAT)
}  # detection tries them in this order: five-block records are also OpenAI-shaped
FORMATS = ("simworld", "openai", "sharegpt", "five-block")
# Writers that live in a layer above this one, as "module:function" (loaded on use).
WRITER_PLUGINS = {"five-block": "simworld.worldmodel.fiveblock:write"}
WRITABLE = tuple(
    name for name in FORMATS if _REGISTRY[name].write is not None or name in WRITER_PLUGINS
)

Writer = Callable[[Iterable[Episode], TextIO], int]


def get_format(name: str) -> Format:
    """The format called `name`; ValueError listing the known ones otherwise."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown format {name!r}; known formats: {', '.join(FORMATS)}")
    return _REGISTRY[name]


def detect_format(path: str | Path) -> str:
    """The format of the dump at `path`, from its first readable record. DumpError says what
    was seen when no format matches (or when there is no readable record)."""
    bad: list[BadRecord] = []
    for record in iter_json(path):
        if isinstance(record, BadRecord):
            bad.append(record)
            continue
        for fmt in _REGISTRY.values():
            if fmt.sniff(record.value):
                name: str = fmt.name
                return name
        raise DumpError(record.location, _unknown(record))
    if bad:
        raise DumpError(
            bad[0].location, f"no readable record to tell the format from: {bad[0].reason}"
        )
    raise DumpError(f"{path}:1", "the dump is empty")


def _unknown(record: RawRecord) -> str:
    value = record.value
    seen = (
        f"an object with keys {sorted(value)}"
        if isinstance(value, dict)
        else f"a JSON {type(value).__name__}"
    )
    shapes = "; ".join(f"{name}: {_REGISTRY[name].shape}" for name in FORMATS)
    return f"cannot tell the dump format: the first record is {seen}. Known formats: {shapes}"


def iter_episodes(
    path: str | Path, format: str | None = None, strict: bool = False
) -> Iterator[Item]:
    """Stream the dump's episodes, with a BadRecord in place of each record that could not be
    read (strict: DumpError at the first one instead)."""
    fmt = get_format(format or detect_format(path))
    for item in fmt.read(iter_json(path)):
        if strict and isinstance(item, BadRecord):
            raise DumpError(item.location, item.reason)
        yield item


def read_episodes(path: str | Path, format: str | None = None, strict: bool = False) -> ReadResult:
    """The whole dump: its episodes, the records skipped (with location and reason), its format."""
    name = format or detect_format(path)
    result = ReadResult(episodes=[], bad=[], format=name)
    for item in iter_episodes(path, name, strict):
        if isinstance(item, BadRecord):
            result.bad.append(item)
        else:
            result.episodes.append(item)
    return result


def write_episodes(episodes: Iterable[Episode], path: str | Path, format: str = "simworld") -> int:
    """Write episodes to `path` as they arrive (gzip when it ends in .gz); returns how many.
    ValueError for a read-only format or an episode the format cannot carry."""
    writer = get_writer(format)
    with open_write(path) as out:
        count: int = writer(episodes, out)
        return count


def get_writer(name: str) -> Writer:
    """The writer of format `name` (a plugin's is imported now); ValueError for a read-only
    or unknown format."""
    fmt = get_format(name)
    if fmt.write is not None:
        return fmt.write
    if name not in WRITER_PLUGINS:
        raise ValueError(f"{name} is read only for now; write one of: {', '.join(WRITABLE)}")
    module, _, function = WRITER_PLUGINS[name].partition(":")
    writer: Writer = getattr(importlib.import_module(module), function)
    return writer


__all__ = [
    "FORMATS",
    "WRITABLE",
    "WRITER_PLUGINS",
    "BadRecord",
    "DumpError",
    "ReadResult",
    "detect_format",
    "get_format",
    "get_writer",
    "iter_episodes",
    "read_episodes",
    "write_episodes",
]
