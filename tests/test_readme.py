"""The README's commands run as written: the usage commands, the Python examples, and
`make serve`'s recipe, which must answer within 60 s, with the README's curl and Python
sessions run against it and printing what the README says they print."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


SERVED = "# with `make serve` running"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _usage_commands() -> list[str]:
    """Every `simworld ...` line of the README's bash blocks, in order; blocks that open
    with "# with ..." need something running first and are run elsewhere."""
    blocks = [b for b in _blocks("bash") if not b.startswith("# with")]
    return [ln for block in blocks for ln in block.splitlines() if ln.startswith("simworld ")]


def _printed(block: str) -> list[str]:
    """What a README block says it prints: its `# ` comment lines after the first line."""
    lines = [ln.strip() for ln in block.splitlines()[1:]]
    return [ln.removeprefix("# ") for ln in lines if ln.startswith("# ")]


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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_make_serve_answers_within_60s_and_the_readme_sessions_work(tmp_path: Path) -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nserve:", 1)[1].split("\n\n", 1)[0]
    (line,) = [ln.strip() for ln in recipe.splitlines() if ln.strip().startswith("$(SIMWORLD)")]
    port = _free_port()
    command = line.replace("$(SIMWORLD)", "simworld").replace("$(HOST)", "127.0.0.1")
    argv = shlex.split(command.replace("$(PORT)", str(port)))
    assert argv[1:5] == ["serve", "--model", "default", "--env"] and argv[5] == "bfcl"
    argv[0] = str(BIN / argv[0])
    started = time.monotonic()
    server = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        while time.monotonic() - started < 60:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        else:
            pytest.fail("make serve's server did not answer /health within 60 s")
        sessions = [b for b in _blocks("bash") + _blocks("python") if b.startswith(SERVED)]
        assert len(sessions) >= 3  # curl, Python, the adapters
        for block in sessions:
            text = block.replace("localhost:8000", f"localhost:{port}")
            text = text.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            shell = ["bash", "-euo", "pipefail", "-c", text]
            run = shell if block in _blocks("bash") else [sys.executable, "-c", text]
            done = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (block, done.stderr)
            out = [ln.strip() for ln in done.stdout.splitlines()]
            assert out == _printed(block), (block, done.stdout)
    finally:
        server.terminate()
        server.wait(timeout=30)


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
