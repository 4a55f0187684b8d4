"""The SFT recipe end to end: bundled episodes → the one serialization (each prompt with
its nearest recorded step from another scenario) → a tiny checkpoint, with its retrieval
memory, that `load_world_model` serves, with nothing dropped silently."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simworld.data.bundle import load_bundled
from simworld.data.records import (
    Episode,
    Step,
    Task,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.training.data import load_split, to_examples
from simworld.training.sft import SFTConfig, train_sft, use_bf16
from simworld.training.sft_run import RECIPES, SFTRun, reproduce_val_metrics, run_sft
from simworld.worldmodel import load_world_model
from simworld.worldmodel.ar import ARConfig
from simworld.worldmodel.checkpoint import load_checkpoint, read_meta
from simworld.worldmodel.context import Budget
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.hf import TransformersEngine
from simworld.worldmodel.render import SERIALIZATION_VERSION, render_prompt, render_target
from simworld.worldmodel.retrieval import MEMORY_FILE, Retriever, load_memory, recorded_steps
from simworld.worldmodel.tokenizer import token_counter, train_tokenizer
from simworld.worldmodel.world_model import TextWorldModel, trained_budget

SCRIPT = Path(sys.executable).parent / "simworld"


def test_the_checkpoint_records_how_it_was_made(tiny_checkpoint: Path) -> None:
    _, _, meta = load_checkpoint(tiny_checkpoint)
    args = meta.training_args
    assert meta.serialization_version == str(SERIALIZATION_VERSION)
    assert args["budget_tokens"] == 160 and args["example_tokens"] == 64
    assert args["state_focus"] is True  # the tiny preset's, as the default's
    assert args["envs"] == ["frozenlake"]
    # the retrieval memory: every train step it retrieved from, none left out
    lake = load_bundled("train", env="frozenlake")
    memory = load_memory(tiny_checkpoint / MEMORY_FILE)
    assert memory == [r for ep in lake for r in recorded_steps(ep)]
    report = args["examples"]["train"]
    # 8x8 boards are longer than the tiny preset's 48-token targets: left out, and counted
    assert report["long_target"] > 0
    assert report["kept"] + report["long_target"] + report["over_budget"] == sum(
        len(ep.steps) for ep in load_bundled("train", env="frozenlake")
    )
    assert {"val_loss", "val_exact", "curve"} <= set(meta.metrics)


def test_recorded_val_metrics_are_reproduced(tiny_checkpoint: Path) -> None:
    _, _, meta = load_checkpoint(tiny_checkpoint)
    again = reproduce_val_metrics(tiny_checkpoint)
    assert again["val_exact"] == meta.metrics["val_exact"]
    assert again["val_loss"] == pytest.approx(meta.metrics["val_loss"], abs=1e-4)


def test_load_world_model_serves_the_checkpoint(tiny_checkpoint: Path) -> None:
    wm = load_world_model(tiny_checkpoint)
    assert wm.budget.total == 160 and wm.budget.example == 64 and wm.budget.state_focus
    # a checkpoint from before the focused view (no state_focus recorded) keeps the plain one
    assert not trained_budget({"budget_tokens": 384}, None).state_focus
    assert wm.memory is not None and len(wm.memory.entries) > 1000
    episode = load_bundled("val", env="frozenlake")[0]
    contexts = [wm.context(episode, i) for i in range(min(3, len(episode.steps)))]
    assert all(wm.with_example(ctx).example for ctx in contexts)  # filled from the memory
    predictions = wm.predict(contexts)
    assert len(predictions) == len(contexts)
    for p in predictions:
        assert p.text  # the model wrote something; what it could not parse is listed
        assert p.ok == (not p.problems)


def _lake_4x4(split: str, n: int) -> list[Episode]:
    return [
        ep
        for ep in load_bundled(split, env="frozenlake")
        if ep.task.id.startswith("frozenlake-4x4")
    ][:n]


def test_a_tiny_model_overfits_twenty_transitions(tmp_path: Path) -> None:
    """Twenty real FrozenLake transitions, through the serialization, learned to exact
    observations and patches, then served by the world model."""
    episodes = _lake_4x4("train", 6)
    rough, _ = to_examples(episodes, Budget(total=160), max_target_tokens=64)
    tok = train_tokenizer((t for ex in rough for t in (ex.prompt, ex.target)), 384)
    budget = Budget(total=160, count=token_counter(tok))
    # distinct prompts only: a slippery lake gives one context several outcomes
    distinct = {ex.prompt: ex for ex in to_examples(episodes, budget, max_target_tokens=64)[0]}
    examples = list(distinct.values())[:20]
    assert len(examples) == 20
    model_cfg = ARConfig.preset("tiny", hidden_size=128, intermediate_size=256)
    cfg = SFTConfig.preset(
        "tiny",
        model=model_cfg,
        epochs=250,
        lr=3e-3,
        exact_samples=20,
        max_new_tokens=72,
        progress=False,
    )
    metrics = train_sft(cfg, examples, examples, tmp_path, tokenizer=tok)
    assert metrics["val_exact"] >= 0.9
    model, tok, _ = load_checkpoint(tmp_path)
    wm = TextWorldModel(TransformersEngine(model, tok), budget, GenerationConfig(72))
    learned = {ex.prompt: ex.target for ex in examples}
    contexts = [wm.context(ep, i) for ep in episodes for i in range(len(ep.steps))]
    contexts = [c for c in contexts if learned.get(render_prompt(c)) == render_target(c)]
    assert len(contexts) >= 20
    predictions = wm.predict(contexts)
    right = sum(
        p.observation == ctx.target.observation and p.patch == ctx.target.patch
        for p, ctx in zip(predictions, contexts, strict=True)
        if ctx.target is not None
    )
    assert right >= 0.9 * len(contexts)


def _scenario(scenario: str, result: str, episode_id: str) -> Episode:
    action = ToolCallsAction([ToolCall("c", "cat", {"file": "todo.md"}, '{"file":"todo.md"}')])
    step = Step(action, ToolResultsObservation([ToolResult("c", result)]))
    return Episode(episode_id, "mock", Task(scenario), [step])


def test_a_train_step_is_never_shown_its_own_scenario() -> None:
    """Two recordings of one scenario and another scenario: in training, a step's example
    comes from the other scenario; a val step searches the whole memory."""
    train = [_scenario("a", "buy milk", "a1"), _scenario("a", "buy milk", "a2"),
             _scenario("b", "call mum", "b1")]  # fmt: skip
    memory = Retriever([r for ep in train for r in recorded_steps(ep)])
    budget = Budget(total=200, example=60)
    shown, _ = to_examples(train, budget, 32, memory, exclude_own=True)
    examples = [ex.prompt.split("## SIMILAR RECORDED STEP\n")[1].split("\n\n")[0] for ex in shown]
    assert [e.splitlines()[1] for e in examples] == ["c ok call mum"] * 2 + ["c ok buy milk"]
    val, _ = to_examples(train[:1], budget, 32, memory)
    assert "c ok buy milk\n" in val[0].prompt  # its own answer: val steps exclude nothing
    plain, _ = to_examples(train, Budget(total=200), 32, memory, exclude_own=True)
    assert not any("SIMILAR RECORDED STEP" in ex.prompt for ex in plain)  # no example budget


def test_exclude_api_drops_every_scenario_with_the_api() -> None:
    every = load_split("train", envs=("bfcl",))
    kept = load_split("train", envs=("bfcl",), exclude_apis=("TravelAPI",))
    assert 0 < len(kept) < len(every)
    assert not any("TravelAPI" in ep.task.apis for ep in kept)


def test_bad_preset_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        SFTRun(out="x", preset="huge")


@pytest.mark.slow
def test_train_sft_command(tmp_path: Path) -> None:
    argv = [str(SCRIPT), "train", "sft", "--preset", "tiny", "--env", "frozenlake",
            "--limit", "30", "--out", str(tmp_path / "ck")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert '"val_loss"' in done.stdout
    assert (tmp_path / "ck" / "model.safetensors").is_file()
    missing = subprocess.run(
        [str(SCRIPT), "train", "sft", "--preset", "tiny", "--data", "nope.jsonl", "--out", "o"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.startswith("simworld train sft: ")
    assert "nope.jsonl" in missing.stderr


def test_lora_on_a_pretrained_base_trains_and_merges(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A local HF directory as the base (the tiny checkpoint), LoRA adapters trained and
    merged into the saved weights; the base's own tokenizer is used."""
    base_model, _, _ = load_checkpoint(tiny_checkpoint)
    metrics = run_sft(
        SFTRun(out=tmp_path, preset="tiny", envs=("frozenlake",), limit=20,
               base=str(tiny_checkpoint), lora_r=4)
    )  # fmt: skip
    assert metrics["step"] > 0
    tuned, _, meta = load_checkpoint(tmp_path)
    assert meta.training_args["lora_r"] == 4
    assert meta.training_args["budget_count"] == "approx"
    names = {name for name, _ in tuned.named_parameters()}
    assert not any("lora" in name for name in names)  # merged, a plain model again
    before = dict(base_model.named_parameters())
    changed = [n for n, p in tuned.named_parameters() if not p.detach().equal(before[n].detach())]
    assert any("q_proj" in n or "v_proj" in n for n in changed)


def test_init_continues_a_checkpoint_with_its_recipe_at_its_last_rate(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """`init` starts from the checkpoint's weights and tokenizer, keeps its prompt budget
    and target bound, and trains at a constant rate: the start's final one."""
    start_model, start_tok, start_meta = load_checkpoint(tiny_checkpoint)
    start_args = start_meta.training_args
    metrics = run_sft(
        SFTRun(out=tmp_path, preset="tiny", envs=("frozenlake",), limit=20,
               init=str(tiny_checkpoint), tokens=3000)
    )  # fmt: skip
    assert metrics["step"] > 0
    tuned, tok, meta = load_checkpoint(tmp_path)
    args = meta.training_args
    assert tok.get_vocab() == start_tok.get_vocab()
    assert args["init"] == str(tiny_checkpoint) and args["budget_count"] == "tokenizer"
    for key in ("budget_tokens", "example_tokens", "max_new_tokens", "state_focus"):
        assert args[key] == start_args[key]
    assert args["lr"] == pytest.approx(start_args["lr"] * start_args["min_lr_ratio"])
    assert (args["warmup_steps"], args["min_lr_ratio"]) == (0, 1.0)
    before = dict(start_model.named_parameters())
    assert any(not p.detach().equal(before[n].detach()) for n, p in tuned.named_parameters())
    assert load_world_model(tmp_path).budget.total == start_args["budget_tokens"]


def test_init_refuses_a_second_recipe() -> None:
    with pytest.raises(ValueError, match="drop base and example_tokens"):
        SFTRun(out="x", init="default", example_tokens=64)
    with pytest.raises(ValueError, match="its own state view"):
        SFTRun(out="x", init="default", state_focus=False)
    with pytest.raises(ValueError, match="give init and lr > 0"):
        SFTRun(out="x", lr=1e-4)


def test_split_digits_trains_a_digit_by_digit_tokenizer(tmp_path: Path) -> None:
    metrics = run_sft(
        SFTRun(out=tmp_path, preset="tiny", envs=("frozenlake",), limit=20, split_digits="all")
    )
    assert metrics["step"] > 0
    _, tok, meta = load_checkpoint(tmp_path)
    assert meta.training_args["split_digits"] == "all"
    assert [t for t in tok.tokenize('{"row": 12, "col": 305}') if t.isdigit()] == list("12305")
    with pytest.raises(ValueError, match="drop split_digits"):
        SFTRun(out="x", init="default", split_digits="all")
    with pytest.raises(ValueError, match="split_digits is one of"):
        SFTRun(out="x", split_digits="yes")


def test_the_preset_sets_the_digit_split_and_the_longest_target(tmp_path: Path) -> None:
    """The default preset splits decimal digits and learns targets of up to 192 tokens;
    `max_target_tokens` overrides the bound (recorded as the model's max_new_tokens)."""
    assert (RECIPES["default"].split_digits, RECIPES["default"].max_target_tokens) == (
        "decimals",
        192,
    )
    tiny = SFTRun(out=tmp_path, preset="tiny", envs=("frozenlake",), limit=20, max_target_tokens=40)
    run_sft(tiny)
    args = read_meta(tmp_path).training_args
    assert (args["max_new_tokens"], args["split_digits"]) == (41, "")
    with pytest.raises(ValueError, match="max_target_tokens must be >= 1"):
        SFTRun(out="x", max_target_tokens=0)
    with pytest.raises(ValueError, match="its own longest target"):
        SFTRun(out="x", init="default", max_target_tokens=64)


def test_bf16_autocast_learns_and_records_whether_the_cpu_ran_it(tmp_path: Path) -> None:
    assert not SFTConfig.preset("default").bf16 and not SFTConfig.preset("tiny").bf16
    metrics = run_sft(
        SFTRun(out=tmp_path, preset="tiny", envs=("frozenlake",), limit=20, bf16=True)
    )
    assert metrics["train_losses"][-1] < metrics["train_losses"][0]  # it learns under autocast
    args = read_meta(tmp_path).training_args
    assert args["bf16"] is True
    assert args["bf16_used"] == use_bf16(SFTConfig(bf16=True))  # only where the CPU has it


def test_epochs_sets_the_number_of_passes(tmp_path: Path) -> None:
    steps = {}
    for epochs in (1, 3):
        out = tmp_path / f"e{epochs}"
        metrics = run_sft(
            SFTRun(out=out, preset="tiny", envs=("frozenlake",), limit=20, epochs=epochs)
        )
        assert read_meta(out).training_args["epochs"] == epochs
        steps[epochs] = metrics["total_steps"]
    assert steps[1] > 0
    assert steps[3] == 3 * steps[1]
    with pytest.raises(ValueError, match="epochs must be at least 1"):
        SFTRun(out="x", epochs=0)
