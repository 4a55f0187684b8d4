"""Request batching: concurrent `predict` calls from many sessions' threads meet in one call
of the world model underneath.

    model = BatchingModel(load_world_model("default"), max_batch=32, max_wait_ms=5.0,
                          on_batch=metrics.batch)
    router = Router(env, model)      # sessions' threads call model.predict([ctx]) at once
    ...
    model.close()

How it works. A caller's request (its contexts and GenerationConfig) joins a queue and the
caller waits on a future. One worker thread takes the oldest request, gathers the queued
requests that may share its call until `max_batch` contexts are queued or `max_wait_ms`
have passed since that oldest request arrived (a request that already waited through an
earlier call goes at once with whatever has queued behind it), calls the inner model's
`predict` once on all their contexts, and hands each caller its own slice. So at most one
inner `predict` runs at a time: the inner model need not be thread-safe. An exception
from the inner call is raised to every caller of that batch; the worker carries on.
`on_batch(size)` is called once per inner call, before it. `max_batch=1` or
`max_wait_ms=0` turns batching off: each call runs in its caller's thread, one at a time.
A request of more than `max_batch` contexts is one call of its own (the transformers
engine cuts it into its own `batch_size` chunks).

Continuous batching (`continuous=True`, what `simworld serve` uses). When the inner model
can (`continuous_batching(max_rows, on_step)`: the transformers engine's own decode path),
nothing is gathered: each caller calls the inner model in its own thread, and the engine
runs one batch that rows join between decode steps and leave the step they end
(worldmodel/engines/continuous.py), up to `max_batch` rows, greedy and sampled rows
together, each with its own seed. `on_batch(n)` is then called once per decode step with
the n rows it ran. A model that cannot falls back to gathering, as above.

Which requests share a call. `predict` takes one GenerationConfig for the whole batch, so
only requests whose configs agree (`None`, the model's own `generation`, counts as that
config) can share:
- greedy requests with equal configs: greedy rows do not depend on each other (the
  transformers engine's own decode path masks padding and skips it in rotary positions,
  HF `generate` left-pads; both give a row the same tokens alone or in a batch,
  tests/worldmodel/test_engines.py checks both);
- seeded sampling (`do_sample=True`, e.g. the router's retries) with configs equal but for
  their seeds, when the inner model has `independent_rows` (a row's draw depends only on
  its context and its row seed: the own decode path, the MDLM, OpenAI and vLLM engines).
  The merged call lists every row's own seed in `GenerationConfig.row_seeds` (row j of a
  request gets the seed `cfg.row_seed(j)` it would get alone), so each caller draws
  exactly what it would draw alone, whatever the server's load. Under HF `generate`
  (`decode="generate"`), which seeds the global generator once per chunk, a sampled
  request runs alone.
A model without a `generation` attribute is assumed to decode its default deterministically.

Prefix reuse (the engine's; nothing is added here). The transformers engine's own decode
path keeps a `PrefixCache` (LRU, `simworld serve --prefix-cache`, 64 prompts) of keys and
values, reused for any later prompt that starts the same way. In continuous mode each row
is prefilled on its own, so every row reuses the longest cached start of its own prompt: a
session's next step shares the opening of the state block with its previous one (the
prompt opens with the state, render.py BLOCKS: state, task, tools, rules, ...; on the
bundled BFCL test episodes about 28% of a step's prompt tokens; with the task block first
it would be 25%, the task's elision varying from step to step), and a retry shares all
of it. In gathering mode a merged call prefills, per chunk, only the tokens common to all
its rows once; for sessions of different tasks or states that is little more than the
template's heading. HF `generate` (`decode="generate"`) reuses nothing across calls; the
OpenAI and vLLM engines leave it to their server (vLLM's automatic prefix caching, when
switched on).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TypeVar

from simworld.worldmodel.context import Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.world_model import Prediction, WorldModel

T = TypeVar("T")

log = logging.getLogger(__name__)

_OWN_DEFAULT = "the model's own generation config"  # merge key of cfg=None when it is unknown


@dataclass
class _Request:
    contexts: list[Context]
    cfg: GenerationConfig | None
    key: Hashable | None  # requests with equal keys may share a call; None: never merged
    arrived: float  # time.monotonic()
    future: Future[list[Prediction]] = field(default_factory=Future)


class BatchingModel:
    """A WorldModel that merges concurrent `predict` calls into calls of `model`; see the
    module docstring for when requests share a call and what prefix reuse happens."""

    def __init__(
        self,
        model: WorldModel,
        *,
        max_batch: int = 32,
        max_wait_ms: float = 5.0,
        on_batch: Callable[[int], None] | None = None,
        continuous: bool = False,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 (1 turns batching off), got {max_batch}")
        if not (math.isfinite(max_wait_ms) and max_wait_ms >= 0):
            raise ValueError(
                f"max_wait_ms must be finite and >= 0 (0 turns batching off), got {max_wait_ms}"
            )
        self.model = model
        self.budget = model.budget
        self.max_batch = max_batch
        self.max_wait_ms = max_wait_ms
        self.on_batch = on_batch
        self._inner_lock = threading.Lock()  # one inner predict at a time
        self._cond = threading.Condition()  # guards _pending and _closed
        self._pending: deque[_Request] = deque()
        self._gathering: list[_Request] = []  # the batch the worker is waiting to fill
        self._closed = False
        self._worker: threading.Thread | None = None
        self.continuous = False  # whether the inner model batches continuously itself
        if self.batching and continuous:
            start = getattr(model, "continuous_batching", None)
            self.continuous = bool(callable(start) and start(max_batch, on_batch))
        if self.batching and not self.continuous:
            self._worker = threading.Thread(
                target=self._serve, name=f"BatchingModel-{id(self):x}", daemon=True
            )
            self._worker.start()

    def exclusive(self, run: Callable[[WorldModel], T]) -> T:
        """`run(model)` while no batch runs: for calls on the inner model other than
        predict (the chat-completions route's raw text generation), which must not race it."""
        with self._inner_lock:
            return run(self.model)

    @property
    def batching(self) -> bool:
        """Whether concurrent calls are merged (max_batch > 1 and max_wait_ms > 0)."""
        return self.max_batch > 1 and self.max_wait_ms > 0

    @property
    def generation(self) -> GenerationConfig | None:
        """The inner model's own generation config, where it has one (the router builds its
        retry configs from it)."""
        own = getattr(self.model, "generation", None)
        return own if isinstance(own, GenerationConfig) else None

    @property
    def queued(self) -> int:
        """Contexts waiting for a call: queued, or in the batch being gathered (not those in
        the call running now)."""
        with self._cond:
            waiting = (*self._pending, *self._gathering)
            return sum(len(r.contexts) for r in waiting)

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        """The inner model's predictions for `batch`, made in a call it may share with
        other threads' concurrent requests; raises what that call raised."""
        contexts = list(batch)
        with self._cond:
            if self._closed:
                raise RuntimeError("BatchingModel.predict was called after close()")
        if not contexts:
            return []
        if self.continuous:  # the inner model merges concurrent calls step by step
            return self._checked(contexts, self.model.predict(contexts, cfg))
        if not self.batching:
            return self._call(contexts, cfg)
        request = _Request(contexts, cfg, self._merge_key(cfg), time.monotonic())
        with self._cond:
            if self._closed:  # closed since the check above
                raise RuntimeError("BatchingModel.predict was called after close()")
            self._pending.append(request)
            self._cond.notify_all()
        return request.future.result()

    def close(self) -> None:
        """Answer the requests already queued, then stop the worker; later `predict` calls
        raise. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self.continuous:
            self.model.continuous_batching(0)  # type: ignore[attr-defined]
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join()

    @property
    def independent_rows(self) -> bool:
        """The inner model's `independent_rows` (False when it does not say)."""
        return bool(getattr(self.model, "independent_rows", False))

    def _merge_key(self, cfg: GenerationConfig | None) -> Hashable | None:
        resolved = cfg if cfg is not None else self.generation
        if resolved is None:
            return _OWN_DEFAULT
        if not resolved.do_sample:
            return resolved
        if not self.independent_rows:
            return None
        return ("sampled", replace(resolved, seed=0, row_seeds=()))  # all but the seeds

    def _serve(self) -> None:
        """The worker: gather a batch, run it, until closed and drained."""
        while True:
            group = self._gather()
            if group is None:
                return
            self._run(group)

    def _gather(self) -> list[_Request] | None:
        """The oldest request and those queued (or arriving before its deadline) that may
        share its call, up to `max_batch` contexts; None once closed with nothing queued."""
        with self._cond:
            while not self._pending:
                if self._closed:
                    return None
                self._cond.wait()
            first = self._pending.popleft()
            group, rows = [first], len(first.contexts)
            if first.key is None:
                return group
            deadline = first.arrived + self.max_wait_ms / 1000
            self._gathering = group
            while True:
                rows += self._take_matching(first.key, group, rows)
                left = deadline - time.monotonic()
                if rows >= self.max_batch or left <= 0 or self._closed:
                    self._gathering = []
                    return group
                self._cond.wait(left)

    def _take_matching(self, key: Hashable, group: list[_Request], rows: int) -> int:
        """Move queued requests with `key` that still fit into `group`, oldest first; the
        others keep their places. Returns the contexts added. Caller holds `_cond`."""
        added, kept = 0, deque[_Request]()
        for request in self._pending:
            n = len(request.contexts)
            if request.key == key and rows + added + n <= self.max_batch:
                group.append(request)
                added += n
            else:
                kept.append(request)
        self._pending = kept
        return added

    def _run(self, group: list[_Request]) -> None:
        contexts = [ctx for request in group for ctx in request.contexts]
        cfg = group[0].cfg
        first = cfg if cfg is not None else self.generation
        if len(group) > 1 and first is not None and first.do_sample:
            # sampled requests, equal but for their seeds: each row keeps its own seed
            seeds: list[int] = []
            for request in group:
                own = request.cfg if request.cfg is not None else first
                seeds += [own.row_seed(j) for j in range(len(request.contexts))]
            cfg = replace(first, row_seeds=tuple(seeds))
        try:
            predictions = self._call(contexts, cfg)
        # Whatever the inner model raises belongs to its callers; the worker must survive
        # it, or every later caller would wait forever.
        except BaseException as exc:
            for request in group:
                request.future.set_exception(exc)
            return
        start = 0
        for request in group:
            end = start + len(request.contexts)
            request.future.set_result(predictions[start:end])
            start = end

    def _call(self, contexts: list[Context], cfg: GenerationConfig | None) -> list[Prediction]:
        with self._inner_lock:
            if self.on_batch is not None:
                try:
                    self.on_batch(len(contexts))
                # A metrics hook must not fail the requests it counts.
                except Exception:
                    log.exception("on_batch(%d) raised; the batch runs anyway", len(contexts))
            predictions = self.model.predict(contexts, cfg)
        return self._checked(contexts, predictions)

    def _checked(self, contexts: list[Context], predictions: list[Prediction]) -> list[Prediction]:
        if len(predictions) != len(contexts):
            raise RuntimeError(
                f"{type(self.model).__name__}.predict returned {len(predictions)} predictions "
                f"for {len(contexts)} contexts"
            )
        return predictions


__all__ = ["BatchingModel"]
