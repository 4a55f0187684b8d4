"""Dump files on disk: transparent gzip, JSON Lines or one JSON array, and every record with
its location, so a bad one is reported as "dump.jsonl:12: reason" and never dropped silently.

    from simworld.data.jsonio import BadRecord, iter_json, open_write
    for item in iter_json("dump.jsonl.gz"):
        if isinstance(item, BadRecord):
            print(item)              # dump.jsonl.gz:3: invalid JSON: Expecting ',' ... (column 18)
        else:
            item.value               # the parsed record; item.location is "dump.jsonl.gz:4"

Reading sniffs gzip and xz by their magic bytes. A file whose first non-space character is
`[` is one JSON array: each item is a record located as "dump.json:5 (item 3)" (its line and
index).
Anything else is JSON Lines: one record a line, blank lines skipped. Writing compresses when
the name ends in `.gz` (no name or time in the gzip header) or `.xz` (xz keeps neither), so
the same records always give the same bytes. Prefer `.xz` for dumps whose states repeat
across steps: its window spans many lines (the bundled BFCL split is 87 MB as JSON, 6.9 MB
gzipped, 0.5 MB as xz).
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from simworld.data.records import JSON

_GZIP_MAGIC = b"\x1f\x8b"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class BadRecord:
    """A record that could not be read: where (`file:line`) and why."""

    location: str
    reason: str

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


class DumpError(ValueError):
    """A dump could not be read (strict mode stops at the first bad record): the message is
    "file:line: reason"."""

    def __init__(self, location: str, reason: str) -> None:
        self.location = location
        self.reason = reason
        super().__init__(f"{location}: {reason}")


@dataclass(frozen=True)
class RawRecord:
    """One parsed JSON record and where it sits: `path` as given, its first `line`, and its
    `item` index when the file is a JSON array."""

    path: str
    line: int
    value: JSON
    item: int | None = None

    @property
    def location(self) -> str:
        """`path:line`, plus the array index: what error messages show."""
        return _location(self.path, self.line, self.item)

    @property
    def origin(self) -> str:
        """Like `location` but with the file name only: what provenance records keep, so an
        episode's record does not depend on the directory it was read from."""
        return _location(Path(self.path).name, self.line, self.item)

    def bad(self, reason: str) -> BadRecord:
        return BadRecord(self.location, reason)


def _location(path: str, line: int, item: int | None) -> str:
    return f"{path}:{line}" if item is None else f"{path}:{line} (item {item})"


# ---------------------------------------------------------------------------- reading


def iter_json(path: str | Path) -> Iterator[RawRecord | BadRecord]:
    """Every record of the dump at `path` in order, or a BadRecord where one cannot be read."""
    name = str(path)
    with _open_read(path) as stream:
        lines = enumerate(stream, start=1)
        number = 0
        try:
            for number, raw in lines:
                raw = raw.removeprefix(_BOM) if number == 1 else raw
                if not raw.strip():
                    continue
                if raw.lstrip().startswith(b"["):
                    yield from _array(name, number, raw + stream.read())
                    return
                yield _line(name, number, raw)
                break
            for number, raw in lines:
                if raw.strip():
                    yield _line(name, number, raw)
        except (EOFError, OSError, zlib.error, lzma.LZMAError) as exc:  # truncated or corrupt
            yield BadRecord(f"{name}:{number + 1}", f"cannot read further: {exc}")


def _open_read(path: str | Path) -> BinaryIO:
    stream: BinaryIO = open(path, "rb")  # noqa: SIM115  (returned to the caller's `with`)
    magic = stream.read(len(_XZ_MAGIC))
    if magic.startswith(_GZIP_MAGIC):
        stream.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if magic == _XZ_MAGIC:
        stream.close()
        return lzma.open(path, "rb")  # type: ignore[return-value]
    stream.seek(0)
    return stream


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _decode_text(name: str, number: int, raw: bytes) -> str | BadRecord:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadRecord(f"{name}:{number}", f"not UTF-8 text: {exc.reason} at byte {exc.start}")


def _line(name: str, number: int, raw: bytes) -> RawRecord | BadRecord:
    text = _decode_text(name, number, raw)
    if isinstance(text, BadRecord):
        return text
    try:
        return RawRecord(name, number, _DECODER.decode(text.strip()))
    except json.JSONDecodeError as exc:
        column = exc.colno + len(text) - len(text.lstrip())
        return BadRecord(f"{name}:{number}", f"invalid JSON: {exc.msg} (column {column})")
    except (ValueError, RecursionError) as exc:
        return BadRecord(f"{name}:{number}", f"invalid JSON: {exc}")


def _array(name: str, first_line: int, raw: bytes) -> Iterator[RawRecord | BadRecord]:
    """The items of a JSON array; `raw` starts at the line (`first_line`) holding its `[`."""
    text = _decode_text(name, first_line, raw)
    if isinstance(text, BadRecord):
        yield text
        return
    lines = _LineCounter(text, first_line)
    pos = _skip_space(text, text.index("[") + 1)
    index = 0
    if text.startswith("]", pos):
        pos += 1
    else:
        while True:
            if pos >= len(text):
                yield BadRecord(f"{name}:{lines.at(pos)}", "the JSON array is not closed")
                return
            try:
                value, end = _DECODER.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                where = _location(name, first_line + exc.lineno - 1, index)
                reason = f"invalid JSON: {exc.msg} (column {exc.colno})"
                yield BadRecord(where, f"{reason}; the rest of the array cannot be read")
                return
            except (ValueError, RecursionError) as exc:
                yield BadRecord(_location(name, lines.at(pos), index), f"invalid JSON: {exc}")
                return
            yield RawRecord(name, lines.at(pos), value, index)
            index += 1
            pos = _skip_space(text, end)
            if text.startswith(",", pos):
                pos = _skip_space(text, pos + 1)
                continue
            if text.startswith("]", pos):
                pos += 1
                break
            problem = "is not closed" if pos >= len(text) else "needs ',' or ']' here"
            yield BadRecord(f"{name}:{lines.at(pos)}", f"the JSON array {problem}")
            return
    pos = _skip_space(text, pos)
    if pos < len(text):
        yield BadRecord(f"{name}:{lines.at(pos)}", "unexpected content after the JSON array")


class _LineCounter:
    """Line numbers of positions in `text`, for positions visited in increasing order."""

    def __init__(self, text: str, first_line: int) -> None:
        self.text = text
        self.line = first_line
        self.pos = 0

    def at(self, pos: int) -> int:
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


# ---------------------------------------------------------------------------- writing


def dumps(value: JSON) -> str:
    """One record as a JSON line (without the newline): UTF-8 text, no NaN or Infinity."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


@contextmanager
def open_write(path: str | Path) -> Iterator[TextIO]:
    """A text stream writing to `path`, compressed (reproducibly) when it ends in .gz or .xz."""
    if str(path).endswith(".xz"):
        with lzma.open(path, "wt", encoding="utf-8", newline="\n") as packed_xz:
            yield packed_xz
        return
    if not str(path).endswith(".gz"):
        with open(path, "w", encoding="utf-8", newline="\n") as plain:
            yield plain
        return
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed,
        io.TextIOWrapper(packed, encoding="utf-8", newline="\n") as text,
    ):
        yield text


__all__ = ["BadRecord", "DumpError", "RawRecord", "dumps", "iter_json", "open_write"]
