"""Streamed episodes in simworld's transition JSONL (what a server's recorder appends):
steps interleaved across episodes, complete at the end of the file with whatever arrived,
mixed with counted episodes, and every way a streamed dump can be wrong, a torn last line
included.

    python -m pytest -q tests/data/test_simworld_streamed.py
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from simworld.data import read_episodes
from simworld.data.formats import iter_episodes
from simworld.data.formats.simworld import HEADER, episode_line, step_line
from simworld.data.records import JSON, Episode, to_json


def _begin(episode: Episode) -> dict[str, JSON]:
    return episode_line(episode, streamed=True)


def _step(episode: Episode, index: int) -> dict[str, JSON]:
    return step_line(episode.episode_id, index, episode.steps[index])


def _write(lines: list[object], tmp_path: Path) -> Path:
    path = tmp_path / "dump.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _read(lines: list[object], tmp_path: Path) -> tuple[list[Episode], list[str]]:
    """(the episodes read, bad records with the file name cut to "dump.jsonl")."""
    path = _write(lines, tmp_path)
    result = read_episodes(path)
    assert result.format == "simworld"
    return result.episodes, [str(b).replace(str(path), "dump.jsonl") for b in result.bad]


def _with_steps(episode: Episode, count: int) -> Episode:
    return replace(episode, steps=episode.steps[:count])


def test_the_streamed_episode_line(episodes: list[Episode]) -> None:
    line = _begin(episodes[0])
    assert list(line)[:3] == ["type", "streamed", "episode_id"]
    assert line["streamed"] is True and "num_steps" not in line and "steps" not in line


def test_interleaved_steps_read_back_exactly(episodes: list[Episode], tmp_path: Path) -> None:
    a, b, c = episodes
    lines: list[object] = [HEADER, _begin(a), _begin(b), _step(b, 0), _step(a, 0), _begin(c)]
    lines += [_step(c, 0), _step(a, 1), _step(c, 1), _step(b, 1)]
    read, bad = _read(lines, tmp_path)
    assert bad == []
    assert [to_json(e) for e in read] == [to_json(e) for e in episodes]  # episode-line order


def test_a_streamed_episode_ends_with_whatever_steps_arrived(
    episodes: list[Episode], tmp_path: Path
) -> None:
    a, b, _ = episodes
    read, bad = _read([HEADER, _begin(a), _begin(b), _step(a, 0)], tmp_path)
    assert bad == []
    assert [(e.episode_id, len(e.steps)) for e in read] == [("tools-0", 1), ("text-0", 0)]
    assert read[0] == _with_steps(a, 1)


def test_streamed_lines_do_not_interrupt_a_counted_episode(
    episodes: list[Episode], tmp_path: Path
) -> None:
    a, b, c = episodes
    counted = episode_line(b)
    lines: list[object] = [HEADER, _begin(a), counted, _step(a, 0), _step(b, 0), _begin(c)]
    lines += [_step(b, 1), _step(c, 0), _step(a, 1), _step(c, 1)]
    read, bad = _read(lines, tmp_path)
    assert bad == []
    # the counted episode as soon as its last step is read, the streamed ones at the end
    assert [e.episode_id for e in read] == ["text-0", "tools-0", "tools-1"]
    assert [to_json(e) for e in read] == [to_json(e) for e in (b, a, c)]


def test_a_header_line_ends_the_streamed_episodes_of_the_file_before(
    episodes: list[Episode], tmp_path: Path
) -> None:
    a = episodes[0]
    lines: list[object] = [HEADER, _begin(a), _step(a, 0), HEADER, _step(a, 1), _begin(a)]
    lines += [_step(a, 0), _step(a, 1)]
    read, bad = _read(lines, tmp_path)
    assert [len(e.steps) for e in read] == [1, 2]  # the same id again in the second file
    assert bad == [
        "dump.jsonl:5: step for episode 'tools-0', which no open episode line announced "
        "(unknown episode, or past its num_steps)"
    ]


def test_a_gap_in_the_indices_drops_the_episode_and_says_so(
    episodes: list[Episode], tmp_path: Path
) -> None:
    a, b, _ = episodes
    lines: list[object] = [HEADER, _begin(a), _begin(b), _step(a, 1), _step(b, 0), _step(a, 0)]
    read, bad = _read(lines, tmp_path)
    assert [(e.episode_id, len(e.steps)) for e in read] == [("text-0", 1)]
    assert bad == [
        "dump.jsonl:4: step index 1 is out of order: expected 0",
        "dump.jsonl:2: episode 'tools-0' dropped: step 0 is out of order (dump.jsonl:4); "
        "1 later step lines of it skipped",
    ]


def test_bad_streamed_lines(episodes: list[Episode], tmp_path: Path) -> None:
    a, b, c = episodes
    both = {**_begin(c), "num_steps": 2}
    false = {**_begin(c), "streamed": False}
    bad_step = _step(a, 0)
    bad_step["reward"] = "high"
    lines: list[object] = [HEADER, _begin(a), _begin(a), episode_line(a), both, false]
    lines += [_step(c, 0), {**_step(b, 0), "index": True}, _begin(b), bad_step]
    lines += [{**_step(b, 0), "index": True}]
    read, bad = _read(lines, tmp_path)
    assert read == []
    assert bad == [
        "dump.jsonl:3: duplicate episode id 'tools-0': the episode line at dump.jsonl:2 is "
        "still open (its steps would be ambiguous)",
        "dump.jsonl:4: duplicate episode id 'tools-0': the episode line at dump.jsonl:2 is "
        "still open (its steps would be ambiguous)",
        "dump.jsonl:5: num_steps: a streamed episode line has no step count",
        "dump.jsonl:6: streamed: expected true (or no such field), got False",
        "dump.jsonl:7: step for episode 'tools-1', which no open episode line announced "
        "(unknown episode, or past its num_steps)",
        "dump.jsonl:8: step for episode 'text-0', which no open episode line announced "
        "(unknown episode, or past its num_steps)",
        "dump.jsonl:10: reward: expected a number, got string ('high')",
        "dump.jsonl:11: step index True is out of order: expected 0",
        "dump.jsonl:2: episode 'tools-0' dropped: step 0 is bad (dump.jsonl:10)",
        "dump.jsonl:9: episode 'text-0' dropped: step 0 is out of order (dump.jsonl:11)",
    ]


def test_a_torn_last_line_loses_only_itself(episodes: list[Episode], tmp_path: Path) -> None:
    a, b, c = episodes
    lines: list[object] = [HEADER, _begin(a), _begin(b), _step(a, 0), _step(b, 0), _begin(c)]
    lines += [_step(c, 0), _step(a, 1), json.dumps(_step(b, 1))[:40]]
    path = _write(lines, tmp_path)
    path.write_bytes(path.read_bytes()[:-1])  # no newline: the write stopped mid-line
    items = list(iter_episodes(path))
    torn = f"{path}:9: invalid JSON: "
    assert str(items[0]).startswith(torn)
    assert items[1:] == [a, _with_steps(b, 1), _with_steps(c, 1)]


def test_a_file_without_streamed_lines_rewrites_byte_for_byte(
    episodes: list[Episode], tmp_path: Path
) -> None:
    from simworld.data import write_episodes

    first = tmp_path / "first.jsonl"
    write_episodes(episodes, first)
    second = tmp_path / "second.jsonl"
    write_episodes(read_episodes(first).episodes, second)
    assert second.read_bytes() == first.read_bytes()
    assert b'"streamed"' not in first.read_bytes()
