"""The data layer's commands: record, convert and inspect end to end through the `simworld`
console script, and their handlers called directly for the error paths (one clear line on
stderr, exit code 1 or 2, no traceback)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simworld.data import read_episodes, write_episodes
from simworld.data.cli import configure
from simworld.data.records import Episode

SCRIPT = Path(sys.executable).parent / "simworld"


def _simworld(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "simworld"]
    return subprocess.run([*argv, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _run(command: str, *args: str) -> int:
    parser = argparse.ArgumentParser(prog=f"simworld {command}")
    handler = configure(command, parser)
    return handler(parser.parse_args(list(args)))


def test_record_convert_inspect_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("gymnasium", reason="recording frozenlake needs gymnasium")
    done = _simworld(
        "record", "--env", "frozenlake", "--episodes", "3", "--seed", "0", "--out", "lake.jsonl.gz",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "wrote 3 frozenlake episodes to lake.jsonl.gz (simworld)\n"
    assert "record frozenlake: 100%" in done.stderr  # the progress bar, on stderr
    done = _simworld(
        "convert", "lake.jsonl.gz", "lake.openai.jsonl", "--to", "openai", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "wrote 3 episodes to lake.openai.jsonl (simworld -> openai)\n"
    original = read_episodes(tmp_path / "lake.jsonl.gz").episodes
    assert read_episodes(tmp_path / "lake.openai.jsonl").episodes == original
    done = _simworld("inspect", "lake.openai.jsonl", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["format"] == "openai" and summary["episodes"] == 3
    assert summary["per_env"]["frozenlake"]["steps"] == sum(len(e.steps) for e in original)


def test_user_mistakes_are_one_line_without_a_traceback(tmp_path: Path) -> None:
    done = _simworld("inspect", "missing.jsonl", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        "simworld inspect: [Errno 2] No such file or directory: 'missing.jsonl'\n"
    )
    done = _simworld("convert", "a.jsonl", "b.jsonl", "--to", "csv", cwd=tmp_path)
    assert done.returncode == 2 and "invalid choice: 'csv'" in done.stderr


def _mixed_dump(episodes: list[Episode], tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    write_episodes(episodes, path, "sharegpt")
    lines = path.read_text().splitlines()
    lines.insert(1, '{"conversations": [{"from": "robot", "value": "x"}]}')
    path.write_text("\n".join(lines) + "\n")
    return path


def test_convert_reports_skipped_records(
    episodes: list[Episode], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _mixed_dump(episodes, tmp_path)
    out = tmp_path / "out.jsonl"
    assert _run("convert", str(source), str(out), "--to", "simworld") == 0
    captured = capsys.readouterr()
    assert captured.out == f"wrote 3 episodes to {out} (sharegpt -> simworld)\n"
    assert captured.err == (
        "skipped 1 bad records:\n"
        f"  {source}:2: conversations[0].from: unknown role 'robot'; expected one of human, "
        "gpt, function_call, observation, system\n"
    )
    assert read_episodes(out).episodes == episodes


def test_strict_convert_fails_and_leaves_no_output(
    episodes: list[Episode], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _mixed_dump(episodes, tmp_path)
    out = tmp_path / "out.jsonl"
    assert _run("convert", str(source), str(out), "--to", "openai", "--strict") == 1
    assert capsys.readouterr().err.startswith(f"simworld convert: {source}:2: conversations[0]")
    assert not out.exists()
    assert _run("convert", str(source), str(source), "--to", "openai") == 2
    assert "would overwrite the input" in capsys.readouterr().err


def test_inspect_text_and_strict(
    episodes: list[Episode], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _mixed_dump(episodes, tmp_path)
    assert _run("inspect", str(source)) == 0
    text = capsys.readouterr().out
    assert text.startswith("format: sharegpt\nepisodes: 3\nsteps: 6\n")
    assert f"bad records: 1\n  {source}:2: conversations[0].from" in text
    assert _run("inspect", str(source), "--strict") == 1
    assert capsys.readouterr().err.startswith(f"simworld inspect: {source}:2: ")


def test_record_with_an_unavailable_env_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from simworld.data import envs

    def unavailable(name: str) -> None:
        raise envs.EnvUnavailable(f"the {name} env needs gymnasium: pip install 'simworld[gym]'")

    monkeypatch.setattr(envs, "load_env", unavailable)
    out = tmp_path / "x.jsonl"
    assert _run("record", "--env", "frozenlake", "--episodes", "2", "--out", str(out)) == 2
    assert capsys.readouterr().err == (
        "simworld record: the frozenlake env needs gymnasium: pip install 'simworld[gym]'\n"
    )


def test_record_arguments() -> None:
    parser = argparse.ArgumentParser()
    configure("record", parser)
    args = parser.parse_args(["--env", "frozenlake", "--episodes", "all", "--out", "x.jsonl"])
    assert (args.episodes, args.seed, args.format) == (None, 0, "simworld")
    with pytest.raises(SystemExit):
        parser.parse_args(["--env", "frozenlake", "--episodes", "0", "--out", "x.jsonl"])
    with pytest.raises(ValueError, match="unknown data command 'serve'"):
        configure("serve", argparse.ArgumentParser())


def test_record_passes_env_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lc.jsonl"
    code = _run(
        "record", "--env", "bfcl", "--episodes", "2", "--out", str(out),
        "--option", "categories=long_context", "--option", "off_policy=0",
    )  # fmt: skip
    assert code == 0
    episodes = read_episodes(out, strict=True).episodes
    assert [ep.provenance.policy for ep in episodes] == ["ground_truth", "ground_truth"]
    assert all(ep.provenance.origin.startswith("multi_turn_long_context_") for ep in episodes)
    code = _run("record", "--env", "bfcl", "--episodes", "2", "--out", str(out), "--option", "x=1")
    assert code == 2
    assert "bad --option for the bfcl env: " in capsys.readouterr().err
