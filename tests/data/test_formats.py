"""The format registry: every writable format round-trips Episodes (ours losslessly, through
openai's and sharegpt's extra key), rewrites byte for byte, reads gzip and JSON arrays, is
detected from its first record, and reports bad records without dropping any."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from episode_builders import text_episode, tool_episode

from simworld.data import BadRecord, DumpError, read_episodes, write_episodes
from simworld.data.formats import (
    FORMATS,
    WRITABLE,
    detect_format,
    get_format,
    iter_episodes,
)
from simworld.data.records import (
    Episode,
    Message,
    Task,
    TextObservation,
    ToolResultsObservation,
    to_json,
)


def test_registry_names() -> None:
    assert FORMATS == ("simworld", "openai", "sharegpt", "five-block")
    assert WRITABLE == ("simworld", "openai", "sharegpt", "five-block")
    with pytest.raises(ValueError, match="unknown format 'csv'; known formats: simworld, openai"):
        get_format("csv")


LOSSLESS = ("simworld", "openai", "sharegpt")  # five-block keeps one transition per record


def test_writable_formats_are_the_lossless_ones_and_five_block() -> None:
    assert set(WRITABLE) == {*LOSSLESS, "five-block"}


@pytest.mark.parametrize("fmt", LOSSLESS)
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_round_trip_is_lossless_and_rewrites_byte_for_byte(
    fmt: str, suffix: str, episodes: list[Episode], tmp_path: Path
) -> None:
    first, second = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    assert write_episodes(episodes, first, fmt) == len(episodes)
    result = read_episodes(first)
    assert result.format == fmt
    assert result.bad == []
    assert result.episodes == episodes
    assert [json.dumps(to_json(e)) for e in result.episodes] == [
        json.dumps(to_json(e)) for e in episodes
    ]
    write_episodes(result.episodes, second, fmt)
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize("fmt", LOSSLESS)
@pytest.mark.parametrize("recorded", ["frozenlake_episodes", "bfcl_episodes", "textworld_episodes"])
def test_recorder_made_episodes_round_trip(
    fmt: str, recorded: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    episodes: list[Episode] = request.getfixturevalue(recorded)
    first, second = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    write_episodes(episodes, first, fmt)
    result = read_episodes(first)
    assert result.episodes == episodes and result.bad == []
    write_episodes(result.episodes, second, fmt)
    assert first.read_bytes() == second.read_bytes()


def test_writing_streams_episodes_as_they_arrive(episodes: list[Episode], tmp_path: Path) -> None:
    path = tmp_path / "stream.jsonl"
    seen_on_disk: list[int] = []

    def produce() -> Iterator[Episode]:
        for episode in episodes:
            yield episode
            seen_on_disk.append(path.stat().st_size)

    write_episodes(produce(), path, "simworld")
    assert len(seen_on_disk) == len(episodes)  # a generator is consumed one by one


def test_a_json_array_dump_reads(episodes: list[Episode], tmp_path: Path) -> None:
    lines = tmp_path / "a.jsonl"
    write_episodes(episodes, lines, "openai")
    array = tmp_path / "a.json"
    array.write_text(json.dumps([json.loads(x) for x in lines.read_text().splitlines()], indent=2))
    assert read_episodes(array).episodes == episodes


def test_detection_from_the_first_readable_record(episodes: list[Episode], tmp_path: Path) -> None:
    for fmt in LOSSLESS:
        path = tmp_path / f"{fmt}.jsonl"
        write_episodes(episodes, path, fmt)
        assert detect_format(path) == fmt
    broken_first = tmp_path / "broken.jsonl"
    broken_first.write_text('{"messages": [\n' + (tmp_path / "openai.jsonl").read_text())
    assert detect_format(broken_first) == "openai"


def test_detection_failures_say_what_was_seen(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text('{"prompt": "hi", "completion": "yo"}\n')
    with pytest.raises(DumpError) as err:
        detect_format(path)
    message = str(err.value)
    assert message.startswith(
        f"{path}:1: cannot tell the dump format: the first record is an object with keys "
        "['completion', 'prompt']. Known formats: simworld: "
    )
    assert 'openai: one {"messages"' in message and "five-block: chat messages" in message
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DumpError, match=r"empty\.jsonl:1: the dump is empty"):
        detect_format(empty)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("nope\n")
    with pytest.raises(DumpError, match="no readable record to tell the format from: invalid"):
        detect_format(garbage)


def _with_bad_lines(tmp_path: Path, episodes: list[Episode]) -> Path:
    good = tmp_path / "good.jsonl"
    write_episodes(episodes, good, "openai")
    lines = good.read_text().splitlines()
    lines.insert(1, '{"messages": [{"role": "robot", "content": "beep"}]}')
    lines.insert(3, lines[2][:40])  # a truncated copy
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_default_mode_skips_and_reports_every_bad_record(
    episodes: list[Episode], tmp_path: Path
) -> None:
    path = _with_bad_lines(tmp_path, episodes)
    result = read_episodes(path)
    assert result.episodes == episodes
    assert [str(b) for b in result.bad] == [
        f"{path}:2: messages[0].role: unknown role 'robot'; expected one of "
        "system, user, assistant, tool",
        f"{path}:4: invalid JSON: Unterminated string starting at (column 34)",
    ]
    streamed = list(iter_episodes(path))
    assert [type(x).__name__ for x in streamed] == [
        "Episode",
        "BadRecord",
        "Episode",
        "BadRecord",
        "Episode",
    ]


def test_strict_mode_stops_at_the_first_bad_record(episodes: list[Episode], tmp_path: Path) -> None:
    path = _with_bad_lines(tmp_path, episodes)
    with pytest.raises(DumpError) as err:
        read_episodes(path, strict=True)
    assert str(err.value) == (
        f"{path}:2: messages[0].role: unknown role 'robot'; expected one of "
        "system, user, assistant, tool"
    )
    assert err.value.location == f"{path}:2"


def test_fiveblock_is_written_through_its_plugin(tmp_path: Path) -> None:
    """The data layer writes five-block through the world model's writer, loaded on use;
    a several-call action does not fit a record and is refused by name."""
    episode = text_episode()
    assert write_episodes([episode], tmp_path / "x.jsonl", "five-block") == 1
    back = read_episodes(tmp_path / "x.jsonl").episodes
    assert [e.steps[0].action for e in back] == [s.action for s in episode.steps]
    with pytest.raises(ValueError, match="step 0 makes 2 calls"):
        write_episodes([tool_episode()], tmp_path / "y.jsonl", "five-block")


def test_an_episode_a_format_cannot_carry_is_refused(mixed: Episode, tmp_path: Path) -> None:
    for fmt in ("openai", "sharegpt"):
        with pytest.raises(ValueError) as err:
            write_episodes([mixed], tmp_path / "x.jsonl", fmt)
        assert str(err.value) == (
            f"{fmt}: episode 'mixed-0' step 1 (text action, text observation) does not fit a "
            f"tools transcript; {fmt} carries one kind of step per episode"
        )
    write_episodes([mixed], tmp_path / "x.jsonl", "simworld")  # ours carries it
    assert read_episodes(tmp_path / "x.jsonl").episodes == [mixed]


def test_bad_record_is_a_value(tmp_path: Path) -> None:
    assert str(BadRecord("d.jsonl:3", "why")) == "d.jsonl:3: why"


def _odd_episodes() -> dict[str, Episode]:
    """Corners of the records that a chat transcript reaches only through the extra key."""
    tools, text = tool_episode(), text_episode()
    first = tools.steps[0]
    assert isinstance(first.observation, ToolResultsObservation)
    return {
        "tools with an initial observation": replace(
            tools, initial_observation=TextObservation("Welcome.")
        ),
        "no steps and no tools": replace(tools, steps=[], tools=[]),
        "a text game with no steps": replace(text, steps=[]),
        "a text game with no initial observation": replace(text, initial_observation=None),
        "results out of call order": replace(
            tools,
            steps=[
                replace(first, observation=ToolResultsObservation(first.observation.results[::-1])),
                tools.steps[1],
            ],
        ),
        "only closing messages": Episode(
            episode_id="e",
            env="x",
            task=Task(id="t"),
            steps=[],
            final_messages=[Message("user", "hi"), Message("assistant", "hello")],
        ),
    }


@pytest.mark.parametrize("fmt", LOSSLESS)
@pytest.mark.parametrize("case", list(_odd_episodes()))
def test_odd_episodes_round_trip(fmt: str, case: str, tmp_path: Path) -> None:
    episode = _odd_episodes()[case]
    write_episodes([episode], tmp_path / "x.jsonl", fmt)
    assert read_episodes(tmp_path / "x.jsonl").episodes == [episode]


def test_an_ambiguous_transcript_is_refused_not_written_lossy(tmp_path: Path) -> None:
    text = text_episode()
    odd = Message("assistant", "thinking"), Message("user", "go on")
    episode = replace(text, steps=[text.steps[0], replace(text.steps[1], messages=list(odd))])
    with pytest.raises(ValueError) as err:
        write_episodes([episode], tmp_path / "x.jsonl", "openai")
    assert str(err.value) == (
        "openai: episode 'textgame-0' cannot be written as openai without loss (it would read "
        "back different at steps)"
    )
