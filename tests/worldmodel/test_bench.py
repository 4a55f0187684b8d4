"""The decode benchmark runs on a tiny model and reports sane figures."""

from __future__ import annotations

from engine_helpers import prompts, tiny_model, tiny_tokenizer

from simworld.worldmodel.bench import decode_benchmark


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
