"""`simworld bench mdlm`: an AR and an MDLM checkpoint scored and timed on the same bundled
steps, the MDLM at each K, forward passes counted; the table; clear errors. And the one
interface: an MDLM checkpoint is evaluated by `simworld eval` and served by `simworld serve`
(routing, /v1/simulate, chat completions) exactly where an AR checkpoint is."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from simworld.data.bundle import load_bundled
from simworld.data.formats import write_episodes
from simworld.eval.mdlm_compare import CompareConfig, compare, markdown_table
from simworld.eval.run import EvalConfig, evaluate
from simworld.training.batching import Example
from simworld.training.mdlm import MDLMTrainConfig, train_mdlm
from simworld.worldmodel.context import Budget, build_context
from simworld.worldmodel.render import render_messages

SCRIPT = Path(sys.executable).parent / "simworld"


@pytest.fixture(scope="module")
def tiny_mdlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MDLM trained for a moment on a few pairs (its outputs are noise; the
    comparison's bookkeeping is what is tested)."""
    out = tmp_path_factory.mktemp("mdlm")
    pairs = [Example(f'{{"ls": {i}}}', f"file_{i}.txt") for i in range(8)]
    cfg = MDLMTrainConfig.preset("tiny", epochs=2, progress=False, serialization_version="1")
    train_mdlm(cfg, pairs, pairs[:2], out)
    return out


@pytest.mark.slow
def test_compare_scores_and_counts_both_models(tiny_checkpoint: Path, tiny_mdlm: Path) -> None:
    cfg = CompareConfig(ar=str(tiny_checkpoint), mdlm=str(tiny_mdlm), limit=4, ks=(1, 3),
                        trim_ks=(3,), embeddings=False, progress=False)  # fmt: skip
    result = compare(cfg)
    names = [r["name"] for r in result["rows"]]
    assert names == ["AR", "MDLM K=1", "MDLM K=3", "MDLM K=3 trim"] and result["steps"] == 4
    by_name = {r["name"]: r for r in result["rows"]}
    assert by_name["MDLM K=1"]["passes_per_obs"] == 2.0  # the prefix, then one step
    assert 2.0 <= by_name["MDLM K=3"]["passes_per_obs"] <= 4.0
    assert by_name["AR"]["passes_per_obs"] >= 1.0
    assert 0 < by_name["MDLM K=3"]["prefix_ms_per_obs"] < by_name["MDLM K=3"]["ms_per_obs"]
    for row in result["rows"]:
        assert all(0.0 <= row[c] <= 1.0 for c in ("exact", "json_canonical", "schema_valid"))
        assert row["ms_per_obs"] > 0
    assert result["models"]["mdlm"]["tokens_seen"] > 0
    assert result["models"]["ar"]["kind"] == "ar" and result["models"]["mdlm"]["kind"] == "mdlm"
    table = markdown_table(result)
    assert "| MDLM K=3 |" in table and "training tokens" in table


def test_the_table_has_a_row_per_model_and_k() -> None:
    row = {"exact": 0.5, "json_canonical": 0.5, "schema_valid": 1.0, "readable": 1.0,
           "ms_per_obs": 12.0, "passes_per_obs": 3.0}  # fmt: skip
    result = {
        "config": {"split": "test"},
        "steps": 2,
        "envs": ["bfcl"],
        "models": {
            "ar": {"parameters": 10, "tokens_seen": 5, "train_minutes": 1.0},
            "mdlm": {"parameters": 11, "tokens_seen": None, "train_minutes": 1.0},
        },
        "rows": [{"name": "AR", **row}, {"name": "MDLM K=2", **row}],
    }
    table = markdown_table(result).splitlines()
    assert table[0] == (
        "| model | exact | json_canonical | schema_valid | readable | ms_per_obs | passes_per_obs |"
    )
    assert table[3].startswith("| MDLM K=2 | 0.5 |")
    assert "n/a training tokens" in table[6]


def test_bad_settings_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="ks"):
        CompareConfig(ar="a", mdlm="b", ks=(0,))
    with pytest.raises(ValueError, match="limit"):
        CompareConfig(ar="a", mdlm="b", limit=-1)
    with pytest.raises(ValueError, match="trim"):
        CompareConfig(ar="a", mdlm="b", trim_ks=(0,))


@pytest.mark.slow
def test_swapped_checkpoints_fail_with_a_clear_message(tiny_mdlm: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), "bench", "mdlm", "--ar", str(tiny_mdlm), "--mdlm", str(tiny_mdlm),
         "--limit", "1", "--no-embeddings"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    assert "pass an AR and an MDLM checkpoint" in done.stderr


@pytest.mark.slow
def test_simworld_eval_takes_an_mdlm_checkpoint(tiny_mdlm: Path, tmp_path: Path) -> None:
    episodes = load_bundled("test", env="frozenlake")[:2]
    dump = tmp_path / "two.jsonl"
    write_episodes(episodes, dump, format="simworld")
    cfg = EvalConfig(out=tmp_path / "report", model=str(tiny_mdlm), data=(str(dump),),
                     baselines=("copy-last",), embeddings=False, progress=False,
                     bootstrap=20)  # fmt: skip
    report = evaluate(cfg)
    steps = sum(len(ep.steps) for ep in episodes)
    assert report["results"]["model"]["json_canonical"]["n"] == steps
    assert "closed_loop" in report  # replayed through the simulator with the MDLM


@pytest.mark.slow
def test_simworld_serve_takes_an_mdlm_checkpoint(tiny_mdlm: Path) -> None:
    command = [str(SCRIPT), "serve", "--model", str(tiny_mdlm), "--env", "frozenlake",
               "--port", "0"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = next(line for line in process.stdout if "ready at" in line)
        url = ready.split("ready at ")[1].split()[0]
        lake = {"env": "frozenlake", "task_id": "frozenlake-4x4-1054101787", "text": "LEFT"}
        reply = httpx.post(f"{url}/v1/simulate", json=lake, timeout=60)
        assert reply.status_code == 200 and reply.json()["info"]["source"] == "model"
        ctx = build_context(load_bundled("test", env="frozenlake")[0], 0, Budget())
        chat = {"messages": render_messages(ctx), "max_tokens": 8}
        answer = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] <= 8
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(30)
    assert code == 0
