"""The world model: the one serialization, a text engine and the target parser behind one
call, `predict(batch) -> list[Prediction]`.

    from simworld.worldmodel import load_world_model
    from simworld.worldmodel.context import build_context
    wm = load_world_model("default")                     # or a checkpoint directory
    ctx = wm.context(episode, 3)                         # the step's blocks within wm.budget
    (prediction,) = wm.predict([ctx])
    prediction.observation, prediction.patch, prediction.problems

A model with a retrieval memory (`memory`, a Retriever over the recorded steps it was
trained with; a checkpoint carries it as memory.jsonl.gz) fills each context's example
block itself, with the most similar recorded step, within `budget.example`: every caller
(the router, eval, the server) gets it by building contexts as before.

A causal LM (the transformers or vLLM engine) gets the plain prompt and generates the
target up to its end-of-observation token (so does the masked-diffusion model, whose engine
denoises the target in K steps: `load_world_model` picks the engine by checkpoint kind); a
chat endpoint (the OpenAI-compatible engine) gets the chat rendering of the same blocks,
and an answer the parser cannot read is retried a bounded number of times. Whatever the
parser cannot read is reported in `Prediction.problems`, never raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from simworld.data.records import JSON, Episode, Observation
from simworld.worldmodel.context import Budget, Context, build_context, with_example
from simworld.worldmodel.engines.base import ChatEngine, Engine, GenerationConfig, load_engine
from simworld.worldmodel.render import (
    READS_VERSIONS,
    SERIALIZATION_VERSION,
    parse_target,
    render_messages,
    render_prompt,
)
from simworld.worldmodel.retrieval import MEMORY_FILE, Retriever, load_memory


@dataclass
class Prediction:
    """One predicted transition: the observation and state patch read from `text` (None
    where unreadable), and what could not be read."""

    observation: Observation | None
    patch: list[JSON] | None
    text: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class WorldModel(Protocol):
    """Anything that predicts transitions from contexts (AR, masked diffusion, an LLM)."""

    budget: Budget

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]: ...


class TextWorldModel:
    """A world model over any text engine. `chat=True` sends chat messages (an
    OpenAI-compatible endpoint); otherwise plain prompts to a causal LM. With `memory` and
    a `budget.example`, each context without an example gets its nearest recorded step."""

    def __init__(
        self,
        engine: Engine | ChatEngine,
        budget: Budget | None = None,
        generation: GenerationConfig | None = None,
        chat: bool = False,
        memory: Retriever | None = None,
    ) -> None:
        if chat and not isinstance(engine, ChatEngine):
            raise TypeError(f"chat=True needs a chat engine; {type(engine).__name__} is not one")
        if not chat and not isinstance(engine, Engine):
            raise TypeError(f"{type(engine).__name__} completes chats only: pass chat=True")
        self.engine = engine
        self.budget = budget or Budget()
        self.generation = generation or GenerationConfig()
        self.chat = chat
        self.memory = memory

    def context(self, episode: Episode, index: int) -> Context:
        """The context of `episode.steps[index]`, within this model's budget (its example
        block filled, when the model has a memory)."""
        return self.with_example(build_context(episode, index, self.budget))

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        cfg = cfg or self.generation
        batch = [self.with_example(ctx) for ctx in batch]
        if self.chat:  # one conversation a call: row i keeps its own seed
            texts = [
                self._chat_one(ctx, replace(cfg, seed=cfg.row_seed(i), row_seeds=()))
                for i, ctx in enumerate(batch)
            ]
        else:
            assert isinstance(self.engine, Engine)
            texts = self.engine.generate([render_prompt(ctx) for ctx in batch], cfg)
        return [_parse(text, ctx) for text, ctx in zip(texts, batch, strict=True)]

    @property
    def independent_rows(self) -> bool:
        """Whether a row's prediction depends only on its context and its row seed
        (`GenerationConfig.row_seed`), whatever else is in the batch: what lets a server
        merge sampled requests. Engines say so with `independent_rows`; one that does not
        is taken not to."""
        return bool(getattr(self.engine, "independent_rows", False))

    def continuous_batching(
        self, max_rows: int, on_step: Callable[[int], None] | None = None
    ) -> bool:
        """Switch the engine to continuous batching of up to `max_rows` rows (concurrent
        `predict` calls then share decode steps; `on_step(n)` after each step of n rows),
        or back off with `max_rows=0`. False when the engine cannot (only the transformers
        engine's own decode path can); nothing changes then."""
        if max_rows <= 0:
            stop = getattr(self.engine, "stop_continuous", None)
            if callable(stop):
                stop()
            return False
        start = getattr(self.engine, "start_continuous", None)
        return bool(callable(start) and start(max_rows, on_step))

    def with_example(self, ctx: Context) -> Context:
        """`ctx` with its nearest recorded steps (`budget.examples` of them) as the example
        block (when this model has a memory and an example budget, and `ctx` has no
        example yet)."""
        if self.memory is None or self.budget.example <= 0 or ctx.example:
            return ctx
        k = self.budget.examples
        found = self.memory.neighbours(ctx.env, ctx.action_record, ctx.previous, k)
        return with_example(ctx, found, self.budget)

    def _chat_one(self, ctx: Context, cfg: GenerationConfig) -> str:
        assert isinstance(self.engine, ChatEngine)

        def readable(text: str) -> bool:
            return _parse(text, ctx).ok

        (text,) = self.engine.generate_chat([render_messages(ctx)], cfg, readable)
        return text


def _parse(text: str, ctx: Context) -> Prediction:
    parsed = parse_target(text, ctx.action_record, expect_patch=ctx.tracks_state)
    return Prediction(parsed.observation, parsed.patch, text, list(parsed.problems))


def default_checkpoint() -> Path:
    """The small default model shipped inside the package."""
    return Path(str(resources.files("simworld.worldmodel") / "default"))


def trained_budget(training_args: dict[str, Any], tokenizer: Any) -> Budget:
    """The prompt budget a checkpoint was trained with, counted as it was counted then:
    in the checkpoint tokenizer's own tokens, or approximately (pretrained bases)."""
    total = int(training_args.get("budget_tokens", Budget().total))
    example = int(training_args.get("example_tokens", 0))
    examples = int(training_args.get("example_count", 1))
    focus = bool(training_args.get("state_focus", False))
    budget = Budget(total=total, example=example, examples=examples, state_focus=focus)
    if training_args.get("budget_count") != "tokenizer":
        return budget
    from simworld.worldmodel.tokenizer import token_counter

    return replace(budget, count=token_counter(tokenizer))


def load_world_model(
    path: str | Path = "default",
    *,
    device: str | None = None,
    dtype: str | None = None,
    **engine_options: Any,
) -> TextWorldModel:
    """A checkpoint directory ("default": the shipped one) as a world model, with the budget
    and decode bound it was trained with, and its retrieval memory when it has one (a
    checkpoint without memory.jsonl.gz predicts without examples, as before). An AR
    checkpoint runs on the transformers engine (`engine_options` go to it; `dtype`:
    "float32", "bfloat16" or "auto", see engines/hf.py; None keeps float32); an MDLM one
    (kind "mdlm") on `MDLMEngine` (`engine_options`: steps, order, batch_size), in float32
    only: "auto" means float32 for it, "bfloat16" is refused (not checked)."""
    from simworld.worldmodel.checkpoint import load_checkpoint, read_meta

    directory = default_checkpoint() if str(path) == "default" else Path(path)
    if str(path) == "default" and not directory.is_dir():
        raise FileNotFoundError(
            "no default world model ships with this simworld yet; train one with "
            "`simworld train sft --preset default --out DIR` and pass that DIR"
        )
    engine: Engine
    if read_meta(directory).kind == "mdlm":
        if dtype not in (None, "auto", "float32"):
            raise ValueError(f"{directory} is an MDLM checkpoint: it runs in float32 only")
        from simworld.worldmodel.mdlm import load_mdlm
        from simworld.worldmodel.mdlm_sample import MDLMEngine

        mdlm, tokenizer, meta = load_mdlm(directory)
        options = {"steps": int(meta.training_args.get("sample_steps", 8)), **engine_options}
        engine = MDLMEngine(mdlm, tokenizer, device=device, **options)
    else:
        model, tokenizer, meta = load_checkpoint(directory)
        engine = load_engine(
            "transformers",
            model=model,
            tokenizer=tokenizer,
            device=device,
            dtype=dtype,
            **engine_options,
        )
    if str(meta.serialization_version) not in READS_VERSIONS:
        raise ValueError(
            f"{directory} was trained on serialization version {meta.serialization_version}; "
            f"this simworld renders version {SERIALIZATION_VERSION}: retrain it"
        )
    args = meta.training_args
    if str(meta.serialization_version) == "3" and args.get("state_focus"):
        raise ValueError(
            f"{directory} was trained on version 3's action-focused state view, which version "
            "4 changed (what an action naming several entries shows): retrain it"
        )
    budget = trained_budget(args, tokenizer)
    memory = None
    if budget.example > 0:  # trained with examples: its memory is part of the checkpoint
        if not (directory / MEMORY_FILE).is_file():
            raise FileNotFoundError(
                f"{directory} was trained with retrieved examples but has no {MEMORY_FILE}: "
                "copy it from the training output"
            )
        memory = Retriever(load_memory(directory / MEMORY_FILE))
    generation = GenerationConfig(max_new_tokens=int(args.get("max_new_tokens", 256)))
    return TextWorldModel(engine, budget, generation, memory=memory)


__all__ = [
    "Prediction",
    "TextWorldModel",
    "WorldModel",
    "default_checkpoint",
    "load_world_model",
    "trained_budget",
]
