"""simworld's transition JSONL: its layout, validation errors naming line and field, steps out
of order / for an unknown episode / missing, concatenated files, unknown schema versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simworld.data import DumpError, read_episodes, write_episodes
from simworld.data.records import Episode


def _lines(episodes: list[Episode], tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "good.jsonl"
    write_episodes(episodes, path, "simworld")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(lines: list[object], tmp_path: Path) -> Path:
    path = tmp_path / "dump.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _bad(lines: list[object], tmp_path: Path) -> tuple[list[str], list[str]]:
    """(ids of the episodes read, bad records with the file name cut to "dump.jsonl")."""
    path = _write(lines, tmp_path)
    result = read_episodes(path, format="simworld")
    cut = [str(b).replace(str(path), "dump.jsonl") for b in result.bad]
    return [e.episode_id for e in result.episodes], cut


def test_layout(episodes: list[Episode], tmp_path: Path) -> None:
    lines = _lines(episodes[:1], tmp_path)
    assert lines[0] == {"format": "simworld-transitions", "schema_version": 1}
    assert list(lines[1])[:3] == ["type", "num_steps", "episode_id"]
    assert lines[1]["num_steps"] == 2 and "steps" not in lines[1]
    assert [(x["type"], x["episode_id"], x["index"]) for x in lines[2:]] == [
        ("step", "tools-0", 0),
        ("step", "tools-0", 1),
    ]
    assert lines[2]["state"] == {"cwd": "/", "files": {"docs": ["a.txt"]}}
    assert lines[2]["next_state"] == {"cwd": "/docs", "files": {"docs": ["a.txt"]}}


def test_validation_names_line_and_field_and_drops_the_episode(
    episodes: list[Episode], tmp_path: Path
) -> None:
    lines = _lines(episodes, tmp_path)
    lines[3]["observation"]["results"][0]["is_error"] = "no"  # type: ignore[index]
    lines[4]["task"] = {"instruction": "x"}  # the text episode's line
    ids, bad = _bad(lines, tmp_path)
    assert ids == ["tools-1"]
    assert bad == [
        "dump.jsonl:4: observation.results[0].is_error: expected a boolean, got string ('no')",
        "dump.jsonl:2: episode 'tools-0' dropped: step 1 is bad (dump.jsonl:4)",
        "dump.jsonl:5: task.id: missing required field of Task",
        "dump.jsonl:6: step for episode 'text-0', which no open episode line announced "
        "(unknown episode, or past its num_steps)",
        "dump.jsonl:7: step for episode 'text-0', which no open episode line announced "
        "(unknown episode, or past its num_steps)",
    ]


def test_steps_out_of_order_missing_or_foreign(episodes: list[Episode], tmp_path: Path) -> None:
    lines = _lines(episodes, tmp_path)
    header, ep0, s00, s01, ep1, s10, s11, ep2, s20, s21 = lines
    ids, bad = _bad([header, ep0, s01, s00, ep1, s10, ep2, s20, s11, s21], tmp_path)
    assert ids == ["tools-1"]
    assert bad == [
        "dump.jsonl:3: step index 1 is out of order: expected 0",
        "dump.jsonl:2: episode 'tools-0' dropped: step 0 is out of order (dump.jsonl:3); "
        "1 later step lines of it skipped",
        "dump.jsonl:5: episode 'text-0' has 1 of 2 steps (missing from step 1)",
        "dump.jsonl:9: step for episode 'text-0', but the episode being read is 'tools-1'",
    ]


def test_a_truncated_file_reports_the_unfinished_episode(
    episodes: list[Episode], tmp_path: Path
) -> None:
    lines: list[object] = list(_lines(episodes, tmp_path))
    lines[-1] = json.dumps(lines[-1])[:30]
    ids, bad = _bad(lines, tmp_path)
    assert ids == ["tools-0", "text-0"]
    assert bad[0] == "dump.jsonl:10: invalid JSON: Expecting value (column 31)"
    assert bad[1] == (
        "dump.jsonl:8: episode 'tools-1' dropped: a line of it is unreadable (dump.jsonl:10)"
    )


def test_concatenated_files_read_and_a_missing_header_is_bad(
    episodes: list[Episode], tmp_path: Path
) -> None:
    lines = _lines(episodes[:1], tmp_path)
    ids, bad = _bad(lines + lines, tmp_path)
    assert ids == ["tools-0", "tools-0"] and bad == []
    ids, bad = _bad(lines[1:], tmp_path)
    assert ids == []
    assert bad[0] == (
        'dump.jsonl:1: expected the header line {"format": "simworld-transitions", '
        '"schema_version": 1} first'
    )


def test_an_unknown_schema_version_stops_reading(episodes: list[Episode], tmp_path: Path) -> None:
    lines = _lines(episodes[:1], tmp_path)
    lines[0]["schema_version"] = 2
    with pytest.raises(DumpError) as err:
        read_episodes(_write(lines, tmp_path))
    assert str(err.value).endswith(
        "dump.jsonl:1: schema_version 2 is not one this simworld reads (1); a newer simworld "
        "wrote it, or it is not a simworld dump"
    )


def test_wrong_line_types(episodes: list[Episode], tmp_path: Path) -> None:
    lines: list[object] = list(_lines(episodes[:1], tmp_path))
    lines.insert(1, {"type": "note"})
    lines.insert(1, [1, 2])
    lines[3] = {**lines[3], "num_steps": -1}  # type: ignore[dict-item]
    _, bad = _bad(lines, tmp_path)
    assert bad[:3] == [
        "dump.jsonl:2: expected a line with type 'episode' or 'step', got None",
        "dump.jsonl:3: expected a line with type 'episode' or 'step', got 'note'",
        "dump.jsonl:4: num_steps: expected a step count, got -1",
    ]
