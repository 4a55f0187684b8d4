"""The official `mcp` SDK for tests, in a virtualenv of its own: simworld must not depend on
it (its pins clash with the trainers'), so the test MCP server (notes_mcp_server.py) and
the SDK client script (notes_mcp_client.py) run with this venv's python.

    python = mcp_python()        # ~/.cache/simworld-test-venvs/mcp-1.30.0/bin/python

Made once under ~/.cache/simworld-test-venvs/mcp-<version> ($XDG_CACHE_HOME is honoured;
the same path the MCP contract tests use, so one venv serves both) and then reused: about
10 s to make on an idle machine. A lock file keeps two test processes from making it at
once. `pytest.skip`s, saying why, only when pip cannot reach the package index.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

MCP_VERSION = "1.30.0"
UNREACHABLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeout",
    "Could not find a version that satisfies",
)


def mcp_python() -> Path:
    """The python of a venv with mcp==MCP_VERSION (made on first use, then reused)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    venv = cache / "simworld-test-venvs" / f"mcp-{MCP_VERSION}"
    python, ready = venv / "bin" / "python", venv / ".simworld-ready"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"mcp-{MCP_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)  # a half-made venv from an interrupted run
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", f"mcp=={MCP_VERSION}"]
        done = subprocess.run(pip, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            output = done.stdout + done.stderr
            if any(sign in output for sign in UNREACHABLE):
                pytest.skip(f"pip cannot reach the package index for mcp: {output[-400:]}")
            pytest.fail(f"pip install mcp=={MCP_VERSION} failed:\n{output[-2000:]}")
        ready.write_text(f"made in {time.monotonic() - started:.0f} s\n")
    return python


__all__ = ["MCP_VERSION", "mcp_python"]
