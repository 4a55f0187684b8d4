"""The decode benchmark runs on a tiny model and reports sane figures."""

from __future__ import annotations

from typing import Any

import pytest
from engine_helpers import prompts, tiny_model, tiny_tokenizer

from simworld.worldmodel.bench import decode_benchmark
from simworld.worldmodel.engines.hf import TransformersEngine


def test_decode_benchmark_rows() -> None:
    rows = decode_benchmark(
        tiny_model(), tiny_tokenizer(), prompts(8, context=30), batch_sizes=(1, 2), new_tokens=4
    )
    assert [(r.path, r.batch) for r in rows] == [
        ("generate", 1),
        ("generate", 2),
        ("own", 1),
        ("own", 2),
    ]
    assert all(r.ms_per_obs > 0 and r.tokens_per_s > 0 and r.bound_fraction > 0 for r in rows)
    assert all(r.new_tokens == 4 for r in rows)


def test_decode_benchmark_times_each_row_repeats_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm-up call, then `repeats` timed calls per row (the fastest is reported)."""
    calls: list[int] = []
    real = TransformersEngine.generate_tokens

    def counted(self: TransformersEngine, *args: Any, **kw: Any) -> list[list[int]]:
        calls.append(len(args[0]))
        return real(self, *args, **kw)

    monkeypatch.setattr(TransformersEngine, "generate_tokens", counted)
    rows = decode_benchmark(
        tiny_model(), tiny_tokenizer(), prompts(6, context=30), batch_sizes=(2,),
        new_tokens=2, paths=("own",), repeats=4,
    )  # fmt: skip
    assert calls == [2] + [4] * 4  # the warm-up on other prompts, then 4 timed calls of 4
    assert len(rows) == 1 and rows[0].ms_per_obs > 0
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        decode_benchmark(tiny_model(), tiny_tokenizer(), prompts(6), batch_sizes=(2,), repeats=0)
