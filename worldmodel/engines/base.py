"""The engine interface: how to decode (`GenerationConfig`), what an engine does (`Engine`,
`ChatEngine`), bounded retries on output a caller rejects, and `load_engine(kind, ...)`.

Engines work on text: a causal LM gets plain prompt strings, a chat endpoint gets chat
message lists; both return the generated strings (the stop string or end-of-sequence token
not included). Which text to send is the serialization's business, not the engine's.

    from simworld.worldmodel.engines import GenerationConfig, load_engine
    engine = load_engine("transformers", model=model, tokenizer=tokenizer)
    texts = engine.generate(prompts, GenerationConfig(max_new_tokens=64))

Seeds: row `i` of a request is sampled with seed `cfg.row_seed(i)`: `cfg.seed + i`, or
`cfg.row_seeds[i]` when the config lists one seed per row. So an output depends on its
prompt and its row's seed, not on the other prompts (the transformers engine's own decode
path, the masked-diffusion, OpenAI and vLLM engines follow this, and say so with
`independent_rows = True`; HF `generate` only repeats a same batch). Per-row seeds let a
server merge sampled requests of several callers into one call (server/batching.py), each
row drawn as its caller alone would have drawn it.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

DTYPE_CHOICES = ("auto", "float32", "bfloat16")  # weight dtypes of the transformers engine

log = logging.getLogger(__name__)

ChatMessages = list[dict[str, Any]]
Validator = Callable[[str], bool]

# kind -> (module under simworld.worldmodel.engines, class, pip extra that provides it)
ENGINE_KINDS: dict[str, tuple[str, str, str | None]] = {
    "transformers": ("hf", "TransformersEngine", None),
    "openai": ("openai_http", "OpenAIEngine", "openai"),
    "vllm": ("vllm_engine", "VLLMEngine", "vllm"),
}


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode. Greedy unless `do_sample`; `stop` strings end an output early."""

    max_new_tokens: int = 256
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    row_seeds: tuple[int, ...] = ()  # one seed per row of the request; () means seed + i

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.do_sample and self.temperature <= 0:
            raise ValueError("sampling needs temperature > 0; use do_sample=False for greedy")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if isinstance(self.stop, str):
            raise TypeError("stop is a tuple of strings: write stop=('\\n\\n',), not a string")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if not isinstance(self.row_seeds, tuple):
            raise TypeError("row_seeds is a tuple of ints, one per row")

    def row_seed(self, row: int) -> int:
        """The seed row `row` of a request samples with."""
        if not self.row_seeds:
            return self.seed + row
        if row >= len(self.row_seeds):
            raise ValueError(
                f"row {row} has no seed: row_seeds lists {len(self.row_seeds)}, one per row"
            )
        return self.row_seeds[row]


@runtime_checkable
class Engine(Protocol):
    """Completes plain-text prompts."""

    def generate(self, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]: ...


@runtime_checkable
class ChatEngine(Protocol):
    """Completes chat conversations; `validate` rejects an output to have it retried."""

    def generate_chat(
        self,
        messages: Sequence[ChatMessages],
        cfg: GenerationConfig,
        validate: Validator | None = None,
    ) -> list[str]: ...


@dataclass
class RetryReport:
    """What the last validated call did: attempts per row, rows still invalid at the end."""

    attempts: list[int] = field(default_factory=list)
    invalid: list[int] = field(default_factory=list)

    @property
    def retries(self) -> int:
        return sum(a - 1 for a in self.attempts)


def generate_validated(
    run: Callable[[list[int], GenerationConfig], list[str]],
    n: int,
    cfg: GenerationConfig,
    validate: Validator | None,
    max_retries: int,
) -> tuple[list[str], RetryReport]:
    """Call `run(rows, cfg)` for all rows, then again for the rows `validate` rejects.

    A retry must be able to differ, so it changes the seed (by 1000 per attempt) and, when
    decoding is greedy, samples at temperature 0.7. After `max_retries` the last outputs are
    kept and their rows listed in the report (and logged as a warning when retries were
    allowed): reported, never raised."""
    report = RetryReport(attempts=[0] * n)
    outputs = [""] * n
    pending = list(range(n))
    for attempt in range(max_retries + 1):
        attempt_cfg = cfg if attempt == 0 else _retry_config(cfg, attempt)
        for row, text in zip(pending, run(pending, attempt_cfg), strict=True):
            outputs[row] = text
            report.attempts[row] += 1
        if validate is None:
            return outputs, report
        pending = [row for row in pending if not validate(outputs[row])]
        if not pending:
            return outputs, report
    report.invalid = pending
    # With retries off the caller chose to take outputs as they come (and reads the
    # report); a warning per call would only be noise then.
    level = logging.WARNING if max_retries else logging.DEBUG
    log.log(level, "%d of %d outputs still invalid after %d retries", len(pending), n, max_retries)
    return outputs, report


def _retry_config(cfg: GenerationConfig, attempt: int) -> GenerationConfig:
    temperature = cfg.temperature if cfg.do_sample else 0.7
    return GenerationConfig(
        max_new_tokens=cfg.max_new_tokens,
        do_sample=True,
        temperature=temperature,
        top_p=cfg.top_p,
        seed=cfg.seed + 1000 * attempt,
        stop=cfg.stop,
        row_seeds=tuple(s + 1000 * attempt for s in cfg.row_seeds),
    )


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut `text` before the first stop string; also say whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def load_engine(kind: str, **options: Any) -> Engine:
    """Build the engine `kind` ("transformers", "openai" or "vllm") from its options.

    The engine's module is imported only here, so an unused engine's dependencies (httpx,
    vllm) need not be installed."""
    if kind not in ENGINE_KINDS:
        known = ", ".join(sorted(ENGINE_KINDS))
        raise ValueError(f"unknown engine kind {kind!r}; known kinds: {known}")
    module_name, class_name, extra = ENGINE_KINDS[kind]
    try:
        module = importlib.import_module(f"simworld.worldmodel.engines.{module_name}")
    except ModuleNotFoundError as err:
        hint = f"pip install 'simworld[{extra}]'" if extra else "reinstall simworld"
        raise ImportError(
            f"the {kind!r} engine needs the package {err.name!r}, which is not installed: {hint}"
        ) from err
    engine: Engine = getattr(module, class_name)(**options)
    return engine
