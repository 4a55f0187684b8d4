"""Dump summaries: counts, tools, lengths, error results, bad records, per env."""

from __future__ import annotations

from simworld.data.formats.base import ReadResult
from simworld.data.inspect import render_summary, summarize
from simworld.data.jsonio import BadRecord
from simworld.data.records import Episode


def test_summary_counts(episodes: list[Episode]) -> None:
    bad = [BadRecord(f"d.jsonl:{n}", "invalid JSON") for n in range(7)]
    summary = summarize(ReadResult(episodes, bad, "openai"))
    assert summary["episodes"] == 3 and summary["steps"] == 6
    assert summary["steps_per_episode"] == {"min": 2, "median": 2, "max": 2}
    assert summary["tools_used"] == {"cd": 2, "ls": 2, "echo": 2}
    assert summary["text_actions"] == 2
    assert summary["error_observations"] == {"count": 2, "of": 6, "share": 2 / 6}
    assert summary["bad_records"]["count"] == 7
    assert summary["bad_records"]["first"][0] == {"location": "d.jsonl:0", "reason": "invalid JSON"}
    assert len(summary["bad_records"]["first"]) == 5
    assert list(summary["per_env"]) == ["mock", "textworld"]
    assert summary["per_env"]["textworld"]["episodes"] == 1
    text = render_summary(summary)
    assert "steps per episode: min 2, median 2, max 2" in text
    assert "tools used (3): cd 2, ls 2, echo 2" in text
    assert "error observations: 2 of 6 tool results (33.3%)" in text
    assert "bad records: 7\n  d.jsonl:0: invalid JSON" in text
    assert "  ... and 2 more" in text
    assert "env textworld:\n  episodes: 1" in text


def test_an_empty_dump() -> None:
    summary = summarize(ReadResult([], [], "simworld"))
    assert summary["steps_per_episode"] is None
    assert render_summary(summary).splitlines() == [
        "format: simworld",
        "episodes: 0",
        "steps: 0",
        "bad records: 0",
    ]
