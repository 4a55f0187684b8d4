"""`simworld eval` end to end: the shared tiny checkpoint (tests/conftest.py), evaluated with every
baseline, closed loop and embeddings, written as JSON, Markdown and PNG plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simworld.data.bundle import load_bundled
from simworld.data.formats import write_episodes
from simworld.eval.report import PLOTS
from simworld.eval.run import EvalConfig, evaluate

SCRIPT = Path(sys.executable).parent / "simworld"


@pytest.mark.slow
def test_a_full_report_for_a_tiny_model(tiny_checkpoint: Path, tmp_path: Path) -> None:
    episodes = load_bundled("test", env="frozenlake")[:3] + load_bundled("test", env="bfcl")[:2]
    steps = sum(len(ep.steps) for ep in episodes)
    dump = tmp_path / "five.jsonl"
    write_episodes(episodes, dump, format="simworld")
    cfg = EvalConfig(
        out=tmp_path / "report",
        model=str(tiny_checkpoint),
        data=(str(dump),),
        baselines=("copy-last", "nearest-neighbour"),
        progress=False,
        bootstrap=200,
    )
    report = evaluate(cfg)
    assert report["data"]["steps"] == steps
    assert set(report["results"]) == {"model", "copy-last", "nearest-neighbour"}
    for name, metrics in report["results"].items():
        assert metrics["json_canonical"]["n"] == steps, name
        assert 0.0 <= metrics["json_canonical"]["low"] <= metrics["json_canonical"]["mean"]
        assert metrics["json_canonical"]["mean"] <= metrics["json_canonical"]["high"] <= 1.0
        assert "cosine" in metrics and "cosine_tau" in metrics
    # Both envs record states: the state metrics apply to every step.
    with_state = sum(1 for ep in episodes for step in ep.steps if step.state is not None)
    assert with_state == steps
    assert report["results"]["model"]["state_match"]["n"] == with_state
    assert set(report["breakdowns"]["env"]["json_canonical"]) == {"frozenlake", "bfcl"}
    for name in report["results"]:
        assert set(report["results_by_env"][name]) == {"frozenlake", "bfcl"}
    curve = report["closed_loop"]["curve"]
    assert curve[0]["step"] == 0 and curve[0]["episodes"] == len(episodes)
    # Step 0 sees the same context closed-loop and one-step: the scores agree there.
    assert curve[0]["closed_loop"] == pytest.approx(curve[0]["one_step"])
    out = tmp_path / "report"
    assert json.loads((out / "report.json").read_text())["results"] == report["results"]
    text = (out / "report.md").read_text()
    assert "## Model against baselines" in text and "## Closed loop" in text
    for name in PLOTS:
        assert (out / name).read_bytes()[:4] == b"\x89PNG", name


@pytest.mark.slow
def test_the_eval_command(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    done = subprocess.run(
        [
            str(SCRIPT),
            "eval",
            "--model",
            str(tiny_checkpoint),
            "--env",
            "frozenlake",
            "--limit",
            "2",
            "--baselines",
            "copy-last",
            "--no-embeddings",
            "--no-progress",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "model: readable" in done.stdout and (out / "report.md").exists()


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a record"}\n')
    done = subprocess.run(
        [str(SCRIPT), "eval", "--data", str(bad), "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "bad.jsonl" in done.stderr, done.stderr
    with pytest.raises(ValueError, match="unknown baseline"):
        EvalConfig(out=tmp_path, baselines=("oracle",))
    with pytest.raises(ValueError, match="no steps"):
        evaluate(EvalConfig(out=tmp_path, envs=("nosuchenv",), progress=False))
