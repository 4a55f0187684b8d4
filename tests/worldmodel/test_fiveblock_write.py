"""Writing five-block: every bundled step written reads back through data's five-block
reader as the same state, task, called tools, rules, steering, action and observation text;
`simworld convert x.jsonl y.jsonl --to five-block` does it end to end."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from simworld.data import detect_format, read_episodes, write_episodes
from simworld.data.formats import fiveblock as reader
from simworld.data.records import (
    Episode,
    TextObservation,
    ToolCallsAction,
    ToolResultsObservation,
)
from simworld.worldmodel.context import build_context
from simworld.worldmodel.fiveblock import write


def _sample(train: list[Episode]) -> list[Episode]:
    return [e for e in train if e.env == "bfcl"][:12] + [e for e in train if e.env == "frozenlake"][
        :8
    ]


def test_write_then_read_gives_the_blocks_back(train: list[Episode]) -> None:
    episodes = _sample(train)
    out = io.StringIO()
    assert write(episodes, out) == len(episodes)
    lines = out.getvalue().rstrip("\n").split("\n")
    assert len(lines) == sum(len(e.steps) for e in episodes)
    records = iter(lines)
    for episode in episodes:
        for index, step in enumerate(episode.steps):
            back = reader.parse(json.loads(next(records)), "x")
            ctx = build_context(episode, index)
            (got,) = back.steps
            assert back.env == episode.env and back.episode_id == f"{episode.episode_id}/{index}"
            assert got.state == json.loads(ctx.state)  # the state view, as written
            assert back.task.instruction == ctx.task and back.rules == episode.rules
            assert got.action == step.action
            if isinstance(step.observation, TextObservation):
                assert got.observation == step.observation and back.tools == []
            else:
                assert isinstance(got.observation, ToolResultsObservation)
                assert got.observation.results[0].text == step.observation.results[0].text
                assert isinstance(step.action, ToolCallsAction)
                assert [t.name for t in back.tools] == [c.name for c in step.action.calls]
            assert got.info["history"] == json.loads(ctx.history or "[]")


def test_convert_to_five_block_end_to_end(train: list[Episode], tmp_path: Path) -> None:
    episodes = _sample(train)
    write_episodes(episodes, tmp_path / "x.jsonl", "simworld")
    script = Path(sys.executable).parent / "simworld"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "simworld"]
    done = subprocess.run(
        [*argv, "convert", "x.jsonl", "y.jsonl", "--to", "five-block"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {len(episodes)} episodes to y.jsonl (simworld -> five-block)\n"
    assert detect_format(tmp_path / "y.jsonl") == "five-block"
    result = read_episodes(tmp_path / "y.jsonl")
    assert result.bad == [] and len(result.episodes) == sum(len(e.steps) for e in episodes)
