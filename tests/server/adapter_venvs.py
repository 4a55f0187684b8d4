"""Virtualenvs for the adapter contract tests: a framework whose pins clash with simworld's
(verifiers 0.1.14 wants datasets<4.7; openenv-core pulls gradio and fastmcp) is installed
in its own venv under ~/.cache/simworld-test-venvs/<name> ($XDG_CACHE_HOME is honoured),
made once and then reused, with this checkout installed editable and without its
dependencies (the adapters need only httpx, which both frameworks bring). A check script
then runs with the venv's python and prints one JSON line that the test reads.

    python = framework_python("verifiers-0.1.14", ["verifiers==0.1.14"])
    report = run_check(python, CHECK_SCRIPT, base_url)

The openenv venv is the one tests/server/test_openenv_contract.py makes (same name, same
ready marker), so either test may make it. Making the verifiers venv took 80 s on an idle
2-core machine; the openenv one 40-90 s; the editable install of simworld 7 s. The tests
skip, saying why, only when pip cannot reach the package index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeout",
    "Could not find a version that satisfies",
)


def venv_dir(name: str) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "simworld-test-venvs" / name


def framework_python(name: str, requirements: list[str]) -> Path:
    """The python of venv `name` holding `requirements` and this checkout (editable)."""
    venv = venv_dir(name)
    python, ready = venv / "bin" / "python", venv / ".simworld-ready"
    if not ready.exists():
        shutil.rmtree(venv, ignore_errors=True)  # a half-made venv from an interrupted run
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        _pip(python, venv, requirements, what=" ".join(requirements))
        ready.write_text(f"made in {time.monotonic() - started:.0f} s\n")
    editable = venv / ".simworld-editable"
    if not editable.exists() or editable.read_text() != str(ROOT):
        _pip(python, None, ["--no-deps", "-e", str(ROOT)], what=f"-e {ROOT}")
        editable.write_text(str(ROOT))
    return python


def _pip(python: Path, venv: Path | None, args: list[str], what: str) -> None:
    command = [str(python), "-m", "pip", "install", "-q", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if done.returncode == 0:
        return
    if venv is not None:
        shutil.rmtree(venv, ignore_errors=True)
    output = done.stdout + done.stderr
    if any(sign in output for sign in UNREACHABLE):
        pytest.skip(f"pip cannot reach the package index for {what}: {output[-400:]}")
    pytest.fail(f"pip install {what} failed:\n{output[-2000:]}")


def run_check(python: Path, script: Path, *args: str, **env: str) -> dict[str, Any]:
    """Run `script` with the venv's `python`; the JSON of its last stdout line."""
    done = subprocess.run(
        [str(python), str(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        cwd="/",  # the venv's installed simworld, never the checkout's folders by accident
    )
    assert done.returncode == 0, f"{script.name} failed:\n{done.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report
