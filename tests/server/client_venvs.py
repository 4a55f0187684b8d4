"""Virtualenvs for the contract tests: the real client libraries whose pins clash with
simworld's or with each other (openenv-core pulls gradio and fastmcp; fastmcp 4 needs mcp
2.x while NeMo Gym pins mcp<2; verifiers 0.1.14 wants datasets<4.7) each live in a venv of
their own, and a check script runs with that venv's python and prints one JSON line.

    python = client_python("mcp-1.30.0", ["mcp==1.30.0"])
    python = client_python("verifiers-0.1.14", ["verifiers==0.1.14"], with_simworld=True)
    report = run_check(python, Path("tests/server/some_check.py"), base_url)

A venv is made once under ~/.cache/simworld-test-venvs/<name> ($XDG_CACHE_HOME is
honoured) and then reused; a `.simworld-ready` marker says it was made completely (a
half-made one from an interrupted run is made again), and a lock file keeps two test
processes from making the same one at once. `with_simworld` installs this checkout
editable without its dependencies (the adapters need only httpx, which the frameworks
bring). Times to make, on the 2-core machine: mcp 1.30.0 in 11 s; mcp 2.3.0 + fastmcp
4.2.3 in 19-32 s; openenv-core 40-90 s; verifiers 80 s; the editable install 7 s. A test
skips, saying why, only when pip cannot reach the package index; any other pip failure
fails it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MCP_VERSION = "1.30.0"  # the mcp SDK 1.x the MCP tests run
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


def client_python(name: str, requirements: Sequence[str], *, with_simworld: bool = False) -> Path:
    """The python of venv `name` holding `requirements` (and this checkout, editable, when
    `with_simworld`), made on first use and then reused."""
    venv = venv_dir(name)
    python, ready = venv / "bin" / "python", venv / ".simworld-ready"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            shutil.rmtree(venv, ignore_errors=True)  # a half-made venv
            started = time.monotonic()
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            _pip(python, venv, list(requirements), what=" ".join(requirements))
            ready.write_text(f"made in {time.monotonic() - started:.0f} s\n")
        editable = venv / ".simworld-editable"
        if with_simworld and (not editable.exists() or editable.read_text() != str(ROOT)):
            _pip(python, None, ["--no-deps", "-e", str(ROOT)], what=f"-e {ROOT}")
            editable.write_text(str(ROOT))
    return python


def mcp_python() -> Path:
    """The mcp SDK 1.x venv: the test MCP server (notes_mcp_server.py) and the SDK client
    script (notes_mcp_client.py) run with its python, never simworld's."""
    return client_python(f"mcp-{MCP_VERSION}", [f"mcp=={MCP_VERSION}"])


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
    """Run `script` with the venv's `python` (from `/`, so that it imports the venv's
    packages, never the checkout's folders by accident); the JSON of its last stdout line."""
    done = subprocess.run(
        [str(python), str(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        cwd="/",
    )
    assert done.returncode == 0, f"{script.name} failed:\n{done.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


__all__ = ["MCP_VERSION", "client_python", "mcp_python", "run_check", "venv_dir"]
