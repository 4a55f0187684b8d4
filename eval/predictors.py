"""The one interface `simworld eval` gets predictions through: a `Predictor` maps step
references (an episode and a step index) to one `Prediction` each, whatever makes them: a
world model, a baseline, a prompted LLM.

    from simworld.eval.predictors import ModelPredictor
    from simworld.worldmodel import load_world_model
    predictor = ModelPredictor(load_world_model("path/to/checkpoint"), batch_size=16)
    refs = [(episode, i) for episode in episodes for i in range(len(episode.steps))]
    predictions = predictor.predict_steps(refs)          # one per ref, in order

A prediction is for `episode.steps[index]` given everything before it. A step whose context
cannot fit the model's budget is not raised or dropped: it comes back as a prediction with
no observation and the problem "over budget: ...".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from simworld.data.records import Episode
from simworld.worldmodel.context import Context, build_context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.views import BudgetError
from simworld.worldmodel.world_model import Prediction, WorldModel

StepRef = tuple[Episode, int]


class Predictor(Protocol):
    """Anything that predicts transitions for step references (one Prediction per ref)."""

    name: str

    def predict_steps(self, refs: Sequence[StepRef]) -> list[Prediction]: ...


class ModelPredictor:
    """A `WorldModel` as a Predictor: contexts within the model's budget, predicted in
    batches of `batch_size`. After each batch `progress(n)` is called with the number of refs
    finished since the previous call (over-budget ones included), so `tqdm.update` fits and
    the calls add up to `len(refs)`."""

    def __init__(
        self,
        model: WorldModel,
        generation: GenerationConfig | None = None,
        *,
        name: str = "model",
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.generation = generation
        self.name = name
        self.batch_size = batch_size
        self.progress = progress

    def context(self, episode: Episode, index: int) -> Context:
        """The context of one step within the model's budget (BudgetError when none fits)."""
        return build_context(episode, index, self.model.budget)

    def predict_steps(self, refs: Sequence[StepRef]) -> list[Prediction]:
        out: list[Prediction | None] = [None] * len(refs)
        contexts: list[tuple[int, Context]] = []
        for row, (episode, index) in enumerate(refs):
            try:
                contexts.append((row, self.context(episode, index)))
            except BudgetError as exc:
                out[row] = Prediction(None, None, "", [f"over budget: {exc}"])
        done = len(refs) - len(contexts)  # over-budget rows: reported with the first batch
        for lo in range(0, len(contexts), self.batch_size):
            chunk = contexts[lo : lo + self.batch_size]
            predictions = self.model.predict([ctx for _, ctx in chunk], self.generation)
            if len(predictions) != len(chunk):
                raise RuntimeError(
                    f"{type(self.model).__name__}.predict returned {len(predictions)} "
                    f"predictions for {len(chunk)} contexts"
                )
            for (row, _), prediction in zip(chunk, predictions, strict=True):
                out[row] = prediction
            if self.progress is not None:
                self.progress(done + len(chunk))
            done = 0
        if self.progress is not None and done:
            self.progress(done)  # every ref was over budget
        return [p for p in out if p is not None]


__all__ = ["ModelPredictor", "Predictor", "StepRef"]
