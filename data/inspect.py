"""What a dump holds, at a glance: counts, tools, episode lengths, errors, bad records, per env.

    from simworld.data.formats import read_episodes
    from simworld.data.inspect import render_summary, summarize
    summary = summarize(read_episodes("dump.jsonl"))    # a JSON-ready dict
    print(render_summary(summary))                       # the same, as text

`error_observations` counts tool results flagged `is_error` (`of`: all tool results, and
the share); `steps_per_episode` is min / median / max (null for a dump without episodes);
`tools_used` counts calls per tool, most used first (the text shows the top ten);
`bad_records` lists the first few with location and reason (the count is of all of them).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from simworld.data.formats.base import ReadResult
from simworld.data.records import Episode, ToolCallsAction, ToolResultsObservation

SHOWN_BAD = 5
SHOWN_TOOLS = 10


def summarize(result: ReadResult) -> dict[str, Any]:
    """The dump's summary as a JSON-ready dict (see the module docstring for the keys)."""
    summary = {"format": result.format, **_counts(result.episodes)}
    summary["bad_records"] = {
        "count": len(result.bad),
        "first": [{"location": b.location, "reason": b.reason} for b in result.bad[:SHOWN_BAD]],
    }
    by_env: dict[str, list[Episode]] = {}
    for episode in result.episodes:
        by_env.setdefault(episode.env, []).append(episode)
    summary["per_env"] = {env: _counts(episodes) for env, episodes in sorted(by_env.items())}
    return summary


def _counts(episodes: list[Episode]) -> dict[str, Any]:
    lengths = [len(episode.steps) for episode in episodes]
    tools: Counter[str] = Counter()
    text_actions = results = errors = 0
    for episode in episodes:
        for step in episode.steps:
            if isinstance(step.action, ToolCallsAction):
                tools.update(call.name for call in step.action.calls)
            else:
                text_actions += 1
            if isinstance(step.observation, ToolResultsObservation):
                results += len(step.observation.results)
                errors += sum(result.is_error for result in step.observation.results)
    return {
        "episodes": len(episodes),
        "steps": sum(lengths),
        "steps_per_episode": {
            "min": min(lengths),
            "median": statistics.median(lengths),
            "max": max(lengths),
        }
        if lengths
        else None,
        "tools_used": dict(tools.most_common()),
        "text_actions": text_actions,
        "error_observations": {
            "count": errors,
            "of": results,
            "share": errors / results if results else 0.0,
        },
    }


def render_summary(summary: dict[str, Any]) -> str:
    """The summary as a few lines of text for a terminal."""
    lines = [f"format: {summary['format']}", *_render_counts(summary, "")]
    bad = summary["bad_records"]
    lines.append(f"bad records: {bad['count']}")
    lines += [f"  {b['location']}: {b['reason']}" for b in bad["first"]]
    if bad["count"] > len(bad["first"]):
        lines.append(f"  ... and {bad['count'] - len(bad['first'])} more")
    if len(summary["per_env"]) > 1:
        for env, counts in summary["per_env"].items():
            lines.append(f"env {env}:")
            lines += _render_counts(counts, "  ")
    return "\n".join(lines)


def _render_counts(counts: dict[str, Any], indent: str) -> list[str]:
    lines = [f"{indent}episodes: {counts['episodes']}", f"{indent}steps: {counts['steps']}"]
    lengths = counts["steps_per_episode"]
    if lengths is not None:
        spread = f"min {lengths['min']}, median {lengths['median']:g}, max {lengths['max']}"
        lines.append(f"{indent}steps per episode: {spread}")
    used = list(counts["tools_used"].items())
    if used:
        shown = ", ".join(f"{name} {n}" for name, n in used[:SHOWN_TOOLS])
        more = f", and {len(used) - SHOWN_TOOLS} more" if len(used) > SHOWN_TOOLS else ""
        lines.append(f"{indent}tools used ({len(used)}): {shown}{more}")
    if counts["text_actions"]:
        lines.append(f"{indent}text actions: {counts['text_actions']}")
    errors = counts["error_observations"]
    if errors["of"]:
        share = f"{errors['share']:.1%}"
        of = f"{errors['of']} tool results"
        lines.append(f"{indent}error observations: {errors['count']} of {of} ({share})")
    return lines


__all__ = ["render_summary", "summarize"]
