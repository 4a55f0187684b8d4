"""Training on results with keys left out (`--drop-result-field`, training/data.py): the
targets and the example blocks lose the keys, the prompts' history keeps whole results,
and the checkpoint records what it left out and carries a memory without them.

    python -m pytest -q tests/training/test_drop_fields.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from corpora import corpus_file

from simworld.data.envs.search import SearchEnv
from simworld.data.formats import write_episodes
from simworld.data.records import (
    TextObservation,
    ToolResult,
    ToolResultsObservation,
)
from simworld.training.data import drop_fields_in, drop_fields_in_memory, to_examples
from simworld.training.sft_run import SFTRun, run_sft
from simworld.worldmodel.checkpoint import read_meta
from simworld.worldmodel.context import Budget
from simworld.worldmodel.retrieval import MEMORY_FILE, Retriever, load_memory, recorded_steps
from simworld.worldmodel.world_model import load_world_model

SCRIPT = Path(sys.executable).parent / "simworld"


def test_the_key_leaves_every_object_at_any_depth_in_the_results_own_style() -> None:
    hits = [{"id": "d1", "title": "T", "text": "words", "score": 2.5}]
    compact = ToolResult("c1", json.dumps(hits, separators=(",", ":")), hits)
    nested = {"page": {"text": "x", "n": 1}, "text": "y"}
    spaced = ToolResult("c2", json.dumps(nested), nested)
    plain = ToolResult("c3", "not json", None, is_error=True)
    seen = drop_fields_in(ToolResultsObservation([compact, spaced, plain]), ["text"])
    assert isinstance(seen, ToolResultsObservation)
    assert seen.results[0] == ToolResult(
        "c1", '[{"id":"d1","title":"T","score":2.5}]', [{"id": "d1", "title": "T", "score": 2.5}]
    )
    assert seen.results[1].text == '{"page": {"n": 1}}'  # json.dumps' spacing, as it was
    assert seen.results[2] is plain
    untouched = ToolResultsObservation([plain])
    assert drop_fields_in(untouched, ["score"]).results[0] is plain
    text = TextObservation("a room")
    assert drop_fields_in(text, ["text"]) is text


def test_targets_and_examples_lose_the_key_and_the_history_keeps_it(tmp_path: Path) -> None:
    episodes = list(SearchEnv(str(corpus_file(tmp_path)), split="train", top_k=2).record(None, 0))
    assert any(len(ep.steps) > 1 for ep in episodes)
    entries = [r for ep in episodes for r in recorded_steps(ep)]
    memory = Retriever(drop_fields_in_memory(entries, ["text"]))
    budget = Budget(total=600, example=200)
    shown, report = to_examples(episodes, budget, 200, memory, True, drop_fields=["text"])
    whole, _ = to_examples(episodes, Budget(total=600), 400)
    assert report.kept == len(whole) > 0
    for ex in shown:
        assert '"text"' not in ex.target and '"id":"d' in ex.target
        assert '"text"' not in ex.prompt.split("## SIMILAR RECORDED STEP")[1].split("## ")[0]
    later = [ex for ex in shown if "## RECENT HISTORY" in ex.prompt]
    assert later and all('"text"' in ex.prompt.split("## RECENT HISTORY")[1] for ex in later)
    assert all('"text"' in ex.target for ex in whole)  # without drop_fields nothing changes


@pytest.mark.slow
def test_the_checkpoint_records_the_keys_and_carries_a_memory_without_them(
    tmp_path: Path,
) -> None:
    """Through the CLI, with --examples 2 (the served model shows two steps too) and
    --distinct-examples (recorded)."""
    episodes = list(SearchEnv(str(corpus_file(tmp_path)), split="train", top_k=1).record(None, 0))
    data = tmp_path / "train.jsonl"
    write_episodes(episodes, data)
    out = tmp_path / "ck"
    argv = [str(SCRIPT), "train", "sft", "--preset", "default", "--data", str(data),
            "--val-data", str(data), "--drop-result-field", "text", "--examples", "2",
            "--example-tokens", "160", "--max-target-tokens", "48", "--limit", "20",
            "--tokens", "2000", "--distinct-examples",
            "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert read_meta(out).training_args["drop_result_fields"] == ["text"]
    assert read_meta(out).training_args["distinct_examples"] is True
    recorded = load_memory(out / MEMORY_FILE)
    entries = [r for ep in episodes for r in recorded_steps(ep)]
    assert len(recorded) == len(entries)
    for kept, whole in zip(recorded, entries, strict=True):
        assert kept.observation == drop_fields_in(whole.observation, ["text"])
    model = load_world_model(out)
    assert model.budget.examples == 2 and read_meta(out).training_args["example_count"] == 2
    query = episodes[0]
    shown = model.context(query, 0).example.split("\n\n")
    assert len(shown) == 2 and all('"text"' not in s and '"id":"d' in s for s in shown)
    with pytest.raises(ValueError, match="needs an example block"):
        run_sft(SFTRun(out=tmp_path / "no", preset="default", example_count=2))
    with pytest.raises(ValueError, match="its own result fields"):
        SFTRun(out="x", init="default", drop_result_fields=("text",))
