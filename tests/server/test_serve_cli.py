"""`simworld serve` as a real subprocess: it prints one ready line with its URL, answers
/health and the API, stops on Ctrl-C with exit 0, says when a token is required without
printing it, and refuses bad flags with one line and exit 2. The slow test serves bfcl on
the shipped default model, batching and recording on, and times the start.

    python -m pytest -q tests/server/test_serve_cli.py
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx
import pytest

from simworld.cli import main

KEY = "cli-key-0123456789abcdefghij"
START_LIMIT = 60.0  # seconds from launch to the first healthy /health (the bound)


class Served:
    """A running `simworld serve` process: its URL, its ready line, the seconds from launch
    to a healthy /health, and every line it printed on stdout so far."""

    def __init__(self, process: subprocess.Popen[str], url: str, ready: str, seconds: float):
        self.process, self.url, self.ready, self.seconds = process, url, ready, seconds
        self.stdout: list[str] = []


def _pump(stream: IO[str], lines: queue.Queue[str], kept: list[str]) -> None:
    for line in stream:
        kept.append(line)
        lines.put(line)


@contextmanager
def simworld_serve(args: Sequence[str], env: dict[str, str] | None = None) -> Iterator[Served]:
    """Start `simworld serve ARGS --port 0`, wait for its ready line and a healthy /health,
    yield it, then stop it with SIGINT and check that it exits 0."""
    command = [sys.executable, "-m", "simworld.cli", "serve", *args, "--port", "0"]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None and process.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    printed: list[str] = []
    threading.Thread(target=_pump, args=(process.stdout, lines, printed), daemon=True).start()
    try:
        ready = _ready_line(process, lines, started)
        url = ready.split("ready at ")[1].split()[0]
        assert httpx.get(f"{url}/health", timeout=10).json() == {"status": "healthy"}
        served = Served(process, url, ready, time.monotonic() - started)
        served.stdout = printed
        yield served
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert code == 0, process.stderr.read()[-2000:]


def _ready_line(process: subprocess.Popen[str], lines: queue.Queue[str], started: float) -> str:
    while time.monotonic() - started < 2 * START_LIMIT:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if process.poll() is not None:
                err = process.stderr.read() if process.stderr else ""
                message = f"simworld serve exited {process.returncode}: {err[-2000:]}"
                raise AssertionError(message) from None
            continue
        if "ready at" in line:
            return line.strip()
    raise AssertionError(f"simworld serve printed no ready line in {2 * START_LIMIT} s")


def test_serve_starts_answers_and_stops_on_ctrl_c() -> None:
    with simworld_serve(["--model", "none", "--env", "mock", "--env", "frozenlake"]) as served:
        assert served.ready == (
            f"simworld serve: ready at {served.url} (envs: mock, frozenlake; "
            f"OpenEnv base_url {served.url}/envs/mock)"
        )
        envs = httpx.get(f"{served.url}/v1/envs").json()["envs"]
        assert [e["name"] for e in envs] == ["mock", "frozenlake"]
        assert httpx.get(f"{served.url}/envs/frozenlake/health").status_code == 200


def test_serve_with_a_key_says_a_token_is_needed_and_never_prints_it() -> None:
    with simworld_serve(["--model", "none", "--env", "mock"], {"SIMWORLD_API_KEY": KEY}) as served:
        assert "an API token (SIMWORLD_API_KEY) is required" in served.ready
        assert f"{served.url}/k/<token>" in served.ready and KEY not in served.ready
        assert httpx.get(f"{served.url}/v1/envs").status_code == 401
        assert httpx.get(f"{served.url}/k/{KEY}/v1/envs").status_code == 200
    assert served.process.stderr is not None
    printed = "".join(served.stdout) + served.process.stderr.read()
    assert '"GET /v1/envs HTTP/1.1" 200' in printed  # the access log is on
    assert KEY not in printed


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--env", "chess"], "envs: unknown env 'chess'"),
        (["--model", "/no/such/checkpoint"], "is not a checkpoint directory"),
        (["--max-sessions", "0"], "max_sessions must be at least 1"),
        (["--record", "/no/such/dir/served.jsonl"], "record: the folder /no/such/dir"),
        (["--max-batch", "0"], "max_batch must be at least 1"),
        (["--prefix-cache", "-1"], "prefix_cache must be >= 0"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simworld.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("simworld serve: ") and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_serve_is_a_simworld_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "serve" in capsys.readouterr().out


@pytest.mark.slow
def test_bfcl_on_the_default_model_starts_within_a_minute_and_records(tmp_path: Path) -> None:
    dump = tmp_path / "served.jsonl"
    args = ["--model", "default", "--env", "bfcl", "--record", str(dump), "--log-level", "warning"]
    with simworld_serve(args) as served:
        assert served.seconds < START_LIMIT, f"took {served.seconds:.1f} s to answer /health"
        with httpx.Client(base_url=served.url, timeout=300) as http:
            eid = http.post("/v1/episodes", json={"env": "bfcl", "task_id": "bfcl-4"}).json()[
                "episode_id"
            ]
            call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            reply = http.post(f"/v1/episodes/{eid}/step", json={"tool_calls": [call]}).json()
            assert reply["info"]["source"] == "model"
            metrics = http.get("/metrics").text
    # one session: every decode step of the continuous batch held exactly its one row
    rows = re.search(r"^simworld_batch_size_sum ([0-9.]+)$", metrics, re.M)
    steps = re.search(r"^simworld_batch_size_count ([0-9]+)$", metrics, re.M)
    assert rows is not None and steps is not None, metrics
    assert int(steps.group(1)) >= 1 and float(rows.group(1)) == int(steps.group(1))
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(lines) == 3  # the header, the episode, its one step
    assert eid not in dump.read_text()  # the session id (a capability) is never written
