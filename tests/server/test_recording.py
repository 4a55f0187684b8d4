"""Recording served steps: real sessions stepped from many threads append one dump that reads
back into the exact episodes; the session id is never written; a crash (a killed process, a
line cut mid-write) loses at most the line in flight and a reopened recorder repairs the
tail; other files are refused; a recorded dump trains a tiny world model and inspects.

    python -m pytest -q tests/server/test_recording.py
"""

from __future__ import annotations

import itertools
import json
import random
import secrets
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from simworld.cli import main as simworld_main
from simworld.data import DumpError, read_episodes, write_episodes
from simworld.data.records import Episode, TextAction, ToolCall, ToolCallsAction, to_json
from simworld.server.recording import Recorder, RecorderError
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import Session

THREADS = 4
MOVES = 16


def _call(name: str, call_id: str, **arguments: int) -> ToolCallsAction:
    raw = json.dumps(arguments)
    return ToolCallsAction([ToolCall(call_id, name, dict(arguments), raw)])


def _mock_session() -> Session:
    """A mock-counter session answered exactly (rules for get, the real counter for add)."""
    env = load_sim_env("mock")
    router = Router(env, None, RouterConfig(real_tools=frozenset({"add"})))
    return Session(env, router, episode_id=secrets.token_urlsafe(16))


def _expected(record_id: str, episode: Episode) -> Episode:
    """What the dump must hold for a session's episode: the record id for the session id."""
    assert episode.episode_id not in episode.provenance.origin
    return replace(episode, episode_id=record_id)


def _drive(
    recorder: Recorder, worker: int, barrier: threading.Barrier
) -> list[tuple[str, Episode]]:
    """MOVES moves in lock step with the other workers: reset (a new recording) when the
    episode is over or at move 7 of worker 0 (a reset mid-episode), else a step: get, a
    valid add, or (every fifth step) an add that schema validation rejects."""
    rng = random.Random(worker)
    session = _mock_session()
    done: list[tuple[str, Episode]] = []
    record_id = ""
    for move in range(MOVES):
        barrier.wait()
        if not record_id or session.state()["done"] or (worker == 0 and move == 7):
            if record_id:
                done.append((record_id, session.episode()))
            session.reset(seed=move)
            record_id = recorder.begin(session.episode())
            continue
        index = session.state()["step_count"]
        n = 0 if index % 5 == 3 else rng.randint(1, 4)  # 0 is invalid: schema validation
        action = _call("get", f"c{index}") if rng.random() < 0.2 else _call("add", f"c{index}", n=n)
        session.step(action)
        recorder.step(record_id, index, session.episode().steps[index])
    done.append((record_id, session.episode()))
    return done


def _record_threads(path: Path) -> tuple[list[tuple[str, Episode]], list[str]]:
    """Every worker's (record id, final session episode), and the session ids used."""
    barrier = threading.Barrier(THREADS)
    results: dict[int, list[tuple[str, Episode]]] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            results[worker] = _drive(recorder, worker, barrier)
        except BaseException as exc:  # reported below, with the worker's traceback lost
            errors.append(exc)
            barrier.abort()

    with Recorder(path) as recorder:
        threads = [threading.Thread(target=work, args=(w,)) for w in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    recorded = [item for w in range(THREADS) for item in results[w]]
    return recorded, [ep.episode_id for _, ep in recorded]


def test_interleaved_threads_read_back_into_the_exact_episodes(tmp_path: Path) -> None:
    path = tmp_path / "served.jsonl"
    recorded, session_ids = _record_threads(path)
    result = read_episodes(path)
    assert result.format == "simworld" and result.bad == []
    read = {ep.episode_id: ep for ep in result.episodes}
    assert len(read) == len(recorded) >= THREADS + 1  # worker 0 reset mid-episode
    for record_id, episode in recorded:
        assert to_json(read[record_id]) == to_json(_expected(record_id, episode))
    assert any(not ep.steps[-1].terminated for ep in read.values() if ep.steps)  # unfinished
    assert any(ep.steps and ep.steps[-1].terminated for ep in read.values())
    assert any(s.info["source"] == "validation" for ep in read.values() for s in ep.steps)
    # the steps really interleave: consecutive step lines of different episodes
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    steps = [line["episode_id"] for line in lines if line.get("type") == "step"]
    assert sum(a != b for a, b in itertools.pairwise(steps)) >= len(steps) // 2
    text = path.read_text()
    assert all(session_id not in text for session_id in session_ids)


def test_the_session_id_is_never_written_wherever_it_shows(tmp_path: Path) -> None:
    session = _mock_session()
    secret = session.episode_id
    session.reset()
    episode = session.episode()
    episode.task.instruction += f" (session {secret})"
    path = tmp_path / "served.jsonl"
    with Recorder(path) as recorder:
        record_id = recorder.begin(episode)
        session.step(_call("add", secret, n=2))  # the id as a call id: echoed in the result
        step = session.episode().steps[0]
        recorder.step(record_id, 0, step)
    text = path.read_text()
    assert secret not in text
    assert record_id.startswith("rec-") and len(record_id) == 36
    (read,) = read_episodes(path, strict=True).episodes
    assert read.task.instruction.endswith(f"(session {record_id})")
    assert read.steps[0].action == _call("add", record_id, n=2)


def test_a_killed_process_loses_nothing_written(tmp_path: Path) -> None:
    """A recorder in a child process that is killed (SIGKILL, no close) mid-episode."""
    path = tmp_path / "served.jsonl"
    script = _CHILD + f"\nrun({str(path)!r})\nos.kill(os.getpid(), signal.SIGKILL)\n"
    proc = subprocess.run([sys.executable, "-c", script], timeout=120)
    assert proc.returncode == -9
    result = read_episodes(path, strict=True)
    assert [len(ep.steps) for ep in result.episodes] == [3, 0]
    assert b"secret-session-id" not in path.read_bytes()


_CHILD = '''"""A child that records a mock session: three steps of one episode, a second begun."""
import os
import signal

from simworld.data.records import ToolCall, ToolCallsAction
from simworld.server.recording import Recorder
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import Session


def run(path):
    env = load_sim_env("mock")
    session = Session(env, Router(env, None, RouterConfig(real_tools=frozenset({"add"}))),
                      episode_id="secret-session-id")
    recorder = Recorder(path)
    session.reset()
    record_id = recorder.begin(session.episode())
    for index in range(3):
        session.step(ToolCallsAction([ToolCall(f"c{index}", "add", {"n": 1}, '{"n": 1}')]))
        recorder.step(record_id, index, session.episode().steps[index])
    session.reset()
    recorder.begin(session.episode())
'''


def _record_one(path: Path, steps: int) -> tuple[str, Episode]:
    session = _mock_session()
    session.reset()
    with Recorder(path) as recorder:
        record_id = recorder.begin(session.episode())
        for index in range(steps):
            session.step(_call("add", f"c{index}", n=1))
            recorder.step(record_id, index, session.episode().steps[index])
    return record_id, session.episode()


def test_a_line_cut_mid_write_loses_only_itself_and_reopening_repairs_it(tmp_path: Path) -> None:
    path = tmp_path / "served.jsonl"
    record_id, episode = _record_one(path, 4)
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: last + (len(data) - last) // 2])  # the last step, half written
    result = read_episodes(path)
    assert len(result.bad) == 1 and result.bad[0].location == f"{path}:6"
    (read,) = result.episodes
    assert read == replace(_expected(record_id, episode), steps=episode.steps[:3])
    with Recorder(path) as recorder:  # the server restarts on the same dump
        assert recorder.repaired.startswith(f"{path}: cut a torn last line")
        again = recorder.begin(episode)
    result = read_episodes(path, strict=True)  # what `train sft` reads: no bad record
    assert [ep.episode_id for ep in result.episodes] == [record_id, again]
    assert len(result.episodes[1].steps) == 4  # begun with steps: they are written too


def test_a_whole_last_line_without_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "served.jsonl"
    _record_one(path, 2)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    size = path.stat().st_size
    with Recorder(path) as recorder:
        assert recorder.repaired.endswith(f"whole but missing its newline (byte {size})")
    assert path.read_bytes().endswith(b"}\n")
    assert [len(ep.steps) for ep in read_episodes(path, strict=True).episodes] == [2]


def test_appending_to_another_dump_is_a_clear_error(tmp_path: Path) -> None:
    _, episode = _record_one(tmp_path / "first.jsonl", 2)
    openai = tmp_path / "chat.jsonl"
    write_episodes([episode], openai, format="openai")
    with pytest.raises(
        DumpError, match=rf"^{openai}:1: not a simworld transitions dump \(its first line is '\{{"
    ):
        Recorder(openai)
    with pytest.raises(DumpError, match=r"a compressed dump cannot be appended to line by line"):
        Recorder(tmp_path / "served.jsonl.gz")
    packed = tmp_path / "packed.jsonl"
    write_episodes([episode], tmp_path / "packed.jsonl.gz")
    packed.write_bytes((tmp_path / "packed.jsonl.gz").read_bytes())
    with pytest.raises(DumpError, match=rf"^{packed}:1: the file is compressed"):
        Recorder(packed)
    newer = tmp_path / "newer.jsonl"
    newer.write_text('\n{"format": "simworld-transitions", "schema_version": 2}\n')
    with pytest.raises(DumpError, match=rf"^{newer}:2: schema_version 2 is not the one"):
        Recorder(newer)
    assert openai.read_bytes().count(b"simworld-transitions") == 0  # nothing was written


def test_appending_to_a_written_dump_and_one_recorder_per_file(tmp_path: Path) -> None:
    path = tmp_path / "dump.jsonl"
    _, episode = _record_one(tmp_path / "first.jsonl", 2)
    write_episodes([episode], path)  # a counted episode, written in one go
    with Recorder(path) as recorder:
        with pytest.raises(RecorderError, match="another recorder is appending to this dump"):
            Recorder(path)
        record_id = recorder.begin(replace(episode, steps=[]))
        recorder.step(record_id, 0, episode.steps[0])
    read = read_episodes(path, strict=True).episodes
    assert [len(ep.steps) for ep in read] == [2, 1]
    assert path.read_text().count("simworld-transitions") == 1


def test_misuse_is_refused(tmp_path: Path) -> None:
    _, episode = _record_one(tmp_path / "first.jsonl", 3)
    recorder = Recorder(tmp_path / "dump.jsonl")
    record_id = recorder.begin(replace(episode, steps=[]))
    with pytest.raises(RecorderError, match="step index 1 is out of order: expected 0"):
        recorder.step(record_id, 1, episode.steps[1])
    with pytest.raises(
        RecorderError, match="step for record 'rec-x', which this recorder has not begun"
    ):
        recorder.step("rec-x", 0, episode.steps[0])
    finished = replace(episode.steps[0], terminated=True)
    recorder.step(record_id, 0, finished)
    with pytest.raises(RecorderError, match="has not begun or which has ended"):
        recorder.step(record_id, 1, episode.steps[1])
    second = recorder.begin(replace(episode, steps=[]))
    third = recorder.begin(replace(episode, steps=[]))  # the same session, reset again
    with pytest.raises(RecorderError, match="which has ended"):
        recorder.step(second, 0, episode.steps[0])
    recorder.step(third, 0, episode.steps[0])
    recorder.close()
    recorder.close()
    with pytest.raises(RecorderError, match="the recorder is closed"):
        recorder.begin(episode)


def test_a_recorded_dump_trains_a_tiny_model_and_inspects(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simworld.training.sft_run import SFTRun, run_sft
    from simworld.worldmodel import load_world_model
    from simworld.worldmodel.checkpoint import load_checkpoint

    env = load_sim_env("frozenlake")
    router = Router(env, load_world_model(tiny_checkpoint))
    tasks = [t for t in env.tasks if t.startswith("frozenlake-4x4")][:3]
    path = tmp_path / "served.jsonl"
    with Recorder(path) as recorder:
        for number, task_id in enumerate(tasks):
            session = Session(env, router, episode_id=secrets.token_urlsafe(16))
            session.reset(task_id, seed=number)
            record_id = recorder.begin(session.episode())
            for index, move in enumerate(("RIGHT", "DOWN", "jump", "DOWN")):
                if session.state()["done"]:
                    break
                session.step(TextAction(move))
                recorder.step(record_id, index, session.episode().steps[index])
    episodes = read_episodes(path, strict=True).episodes
    steps = sum(len(ep.steps) for ep in episodes)
    assert len(episodes) == 3 and steps >= 6
    out = tmp_path / "model"
    run = SFTRun(out=out, preset="tiny", data=(str(path),), val_data=(str(path),), limit=steps)
    metrics = run_sft(run)
    assert "val_loss" in metrics
    _, _, meta = load_checkpoint(out)
    assert meta.training_args["data"] == [str(path)]
    assert meta.training_args["examples"]["train"]["kept"] > 0
    assert load_world_model(out).budget.total == 160
    capsys.readouterr()
    assert simworld_main(["inspect", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["format"] == "simworld"
    assert (summary["episodes"], summary["steps"]) == (3, steps)
    assert summary["bad_records"]["count"] == 0
