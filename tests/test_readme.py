"""The README's commands run as written, and `make serve`'s demo recipe runs too."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _usage_commands() -> list[str]:
    """Every `simworld ...` line of the README's bash blocks, in order."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    return [ln for block in blocks for ln in block.splitlines() if ln.startswith("simworld ")]


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    argv[0] = str(BIN / argv[0])
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_readme_usage_commands_run(tmp_path: Path) -> None:
    commands = _usage_commands()
    assert len(commands) >= 8
    assert any(c.startswith("simworld train sft") for c in commands)
    for command in commands:
        done = _run(command, tmp_path)
        assert done.returncode == 0, f"{command!r} failed:\n{done.stderr}"
    assert (tmp_path / "x.jsonl").stat().st_size > 0
    assert (tmp_path / "y.jsonl").stat().st_size > 0
    assert (tmp_path / "tiny-ckpt" / "model.safetensors").is_file()


@pytest.mark.slow
def test_make_serve_demo_recipe_runs(tmp_path: Path) -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nserve:", 1)[1].split("\n\n", 1)[0]
    demo = re.search(r"^DEMO := (.+)$", makefile, re.M)
    assert demo
    lines = [ln.strip() for ln in recipe.splitlines() if ln.strip().startswith("$(SIMWORLD)")]
    assert len(lines) == 2  # record, then inspect
    (tmp_path / "demo").mkdir()
    for line in lines:
        command = line.replace("$(SIMWORLD)", "simworld").replace("$(DEMO)", demo.group(1))
        done = _run(command, tmp_path)
        assert done.returncode == 0, f"{command!r} failed:\n{done.stderr}"
    assert "episodes" in done.stdout


def test_readme_eval_figures_match_the_committed_report() -> None:
    """The README's fidelity table is the committed report's numbers, not a retyped copy."""
    report = json.loads((ROOT / "docs" / "eval" / "report.json").read_text())
    readme = (ROOT / "README.md").read_text()
    assert "simworld eval --model default --split test --out docs/eval" in readme
    names = {"default model": "model", "copy-last": "copy-last"}
    names["nearest-neighbour"] = "nearest-neighbour"
    for label, name in names.items():
        row = re.search(rf"^\| {label} \| (.+) \|$", readme, re.M)
        assert row, label
        cells = [c.strip() for c in row.group(1).split("|")]
        overall = report["results"][name]["json_canonical"]
        by_env = report["results_by_env"][name]
        assert cells[0] == f"{overall['mean']:.3f} [{overall['low']:.3f}, {overall['high']:.3f}]"
        assert cells[1] == f"{by_env['bfcl']['mean']:.3f}"
        assert cells[2] == f"{by_env['frozenlake']['mean']:.3f}"
        metrics = ("field_f1", "cosine", "cosine_tau", "state_match")
        for cell, metric in zip(cells[3:], metrics, strict=True):
            assert cell == f"{report['results'][name][metric]['mean']:.3f}", (label, metric)
    sample = report["llm_sample"]["results"]
    for name in ("model", "prompted-llm"):
        assert f"{sample[name]['json_canonical']['mean']:.3f}" in readme


@pytest.mark.slow
def test_readme_python_examples_marked_runnable_run(tmp_path: Path) -> None:
    """Python blocks that open with `# runs as written` run, and print what they say."""
    readme = (ROOT / "README.md").read_text()
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", readme, re.S)
        if b.startswith("# runs as written")
    ]
    assert blocks
    for block in blocks:
        done = subprocess.run(
            [sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        printed = [ln.removeprefix("# ") for ln in block.splitlines()[1:] if ln.startswith("# ")]
        for line in printed:
            assert line in done.stdout, (line, done.stdout)
