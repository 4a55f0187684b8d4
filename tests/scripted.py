"""A deterministic world model for tests: `script(ctx, attempt)` writes each target text,
which the real parser reads back, as it reads a trained model's output."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.render import parse_target
from simworld.worldmodel.world_model import Prediction

Script = Callable[[Context, int], str]  # (context, how many tries came before) -> target


class ScriptedModel:
    """Answers each context with `script(ctx, attempt)` parsed by `parse_target` (a missing
    patch reported where the context tracks state). Records the generation config of every
    try; `generation` is set when `max_new_tokens` is given."""

    def __init__(
        self, script: Script, max_new_tokens: int | None = None, budget: int = 2048
    ) -> None:
        self.budget = Budget(total=budget)
        self.script = script
        self.cfgs: list[GenerationConfig | None] = []
        if max_new_tokens is not None:
            self.generation = GenerationConfig(max_new_tokens=max_new_tokens)

    @property
    def asked(self) -> int:
        """How many contexts it has answered."""
        return len(self.cfgs)

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        out = []
        for ctx in batch:
            text = self.script(ctx, len(self.cfgs))
            self.cfgs.append(cfg)
            parsed = parse_target(text, ctx.action_record, expect_patch=ctx.tracks_state)
            out.append(Prediction(parsed.observation, parsed.patch, text, list(parsed.problems)))
        return out
