"""Dump files: JSON Lines and JSON arrays, transparent gzip, every bad record located and
explained, reproducible gzip bytes."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

from simworld.data.jsonio import BadRecord, RawRecord, iter_json, open_write


def _read(path: Path) -> list[str]:
    """Each item as text: the value for a record, "location: reason" for a bad one."""
    return [
        str(item) if isinstance(item, BadRecord) else f"{item.location} {item.value}"
        for item in iter_json(path)
    ]


def test_json_lines_report_each_bad_line_with_the_json_error_and_column(tmp_path: Path) -> None:
    path = tmp_path / "dump.jsonl"
    path.write_text('{"a": 1}\n{"a": 2,\n\n  {"b": [1, 2}\n{"x": NaN}\n{"a": 3}\n\n')
    assert _read(path) == [
        f"{path}:1 {{'a': 1}}",
        f"{path}:2: invalid JSON: Expecting property name enclosed in double quotes (column 9)",
        f"{path}:4: invalid JSON: Expecting ',' delimiter (column 14)",
        f"{path}:5: invalid JSON: NaN is not valid JSON",
        f"{path}:6 {{'a': 3}}",
    ]


def test_a_truncated_last_line_is_a_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "dump.jsonl"
    path.write_text('{"a": 1}\n{"a": [1, 2')
    assert _read(path)[-1] == f"{path}:2: invalid JSON: Expecting ',' delimiter (column 12)"


def test_a_json_array_gives_item_index_and_line(tmp_path: Path) -> None:
    path = tmp_path / "dump.json"
    path.write_text('\n  [\n {"a": 1},\n {"a": 2}, {"a": 3}\n]\n')
    records = list(iter_json(path))
    assert all(isinstance(r, RawRecord) for r in records)
    assert [r.location for r in records if isinstance(r, RawRecord)] == [
        f"{path}:3 (item 0)",
        f"{path}:4 (item 1)",
        f"{path}:4 (item 2)",
    ]
    assert next(r.origin for r in records if isinstance(r, RawRecord)) == "dump.json:3 (item 0)"


def test_a_broken_json_array_stops_with_a_reason(tmp_path: Path) -> None:
    cases = {
        '[\n {"a": 1},\n {"a": 2\n': "{p}:4 (item 1): invalid JSON: Expecting ',' delimiter "
        "(column 1); the rest of the array cannot be read",
        '[{"a": 1} {"a": 2}]': "{p}:1: the JSON array needs ',' or ']' here",
        '[{"a": 1}] trailing': "{p}:1: unexpected content after the JSON array",
        '[{"a": 1},\n': "{p}:2: the JSON array is not closed",
    }
    for text, message in cases.items():
        path = tmp_path / "dump.json"
        path.write_text(text)
        assert _read(path)[-1] == message.format(p=path), text


def test_empty_array_and_empty_file_hold_no_records(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(" [ ] \n")
    (tmp_path / "b.jsonl").write_text("\n\n")
    assert _read(tmp_path / "a.json") == []
    assert _read(tmp_path / "b.jsonl") == []


def test_not_utf8_is_a_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "dump.jsonl"
    path.write_bytes(b'{"a": "\xff"}\n{"a": 1}\n')
    assert _read(path) == [
        f"{path}:1: not UTF-8 text: invalid start byte at byte 7",
        f"{path}:2 {{'a': 1}}",
    ]


def test_gzip_reads_by_magic_bytes_and_writes_reproducibly(tmp_path: Path) -> None:
    for name in ("a.jsonl.gz", "b.jsonl.gz"):
        with open_write(tmp_path / name) as out:
            out.write('{"a": "é"}\n')
    first, second = (tmp_path / "a.jsonl.gz").read_bytes(), (tmp_path / "b.jsonl.gz").read_bytes()
    assert first == second  # no file name or time in the header
    assert gzip.decompress(first) == '{"a": "é"}\n'.encode()
    (tmp_path / "renamed.jsonl").write_bytes(first)  # gzip without the suffix still reads
    assert _read(tmp_path / "renamed.jsonl") == [f"{tmp_path / 'renamed.jsonl'}:1 {{'a': 'é'}}"]


def test_xz_reads_by_magic_bytes_and_writes_reproducibly(tmp_path: Path) -> None:
    for name in ("a.jsonl.xz", "b.jsonl.xz"):
        with open_write(tmp_path / name) as out:
            out.write('{"a": "é"}\n')
    first, second = (tmp_path / "a.jsonl.xz").read_bytes(), (tmp_path / "b.jsonl.xz").read_bytes()
    assert first == second
    assert lzma.decompress(first) == '{"a": "é"}\n'.encode()
    (tmp_path / "renamed.jsonl").write_bytes(first)
    assert _read(tmp_path / "renamed.jsonl") == [f"{tmp_path / 'renamed.jsonl'}:1 {{'a': 'é'}}"]


def test_a_truncated_xz_stream_is_reported_not_raised(tmp_path: Path) -> None:
    lines = b"".join(b'{"n": %d}\n' % i for i in range(20000))
    packed = lzma.compress(lines)
    path = tmp_path / "dump.jsonl.xz"
    path.write_bytes(packed[: len(packed) // 2])
    items = list(iter_json(path))
    assert isinstance(items[-1], BadRecord)
    assert "cannot read further" in items[-1].reason
    assert all(isinstance(item, RawRecord) for item in items[:-1])


def test_a_truncated_gzip_stream_is_reported_not_raised(tmp_path: Path) -> None:
    lines = b"".join(
        b'{"n": %d, "pad": "%s"}\n' % (i, bytes(range(65, 91)) * 4) for i in range(3000)
    )
    packed = gzip.compress(lines)
    path = tmp_path / "dump.jsonl.gz"
    path.write_bytes(packed[: len(packed) // 2])
    items = list(iter_json(path))
    assert isinstance(items[-1], BadRecord)
    assert "cannot read further: Compressed file ended" in items[-1].reason
    assert all(isinstance(item, RawRecord) for item in items[:-1])
