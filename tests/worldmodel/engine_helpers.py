"""A tiny random Llama and byte-level BPE tokenizer (with a chat template) for the engine
tests: big enough initial weights that greedy choices are not near-ties."""

from __future__ import annotations

from functools import cache

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from simworld.worldmodel.ar import ARConfig, build_model
from simworld.worldmodel.bench import random_llama, synthetic_prompts, synthetic_tokenizer
from simworld.worldmodel.copy_head import CopyLlamaForCausalLM

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@cache
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    tok = synthetic_tokenizer(300)
    tok.chat_template = CHAT_TEMPLATE
    return tok


@cache
def tiny_model() -> LlamaForCausalLM:
    """Two layers, hidden 64, grouped-query attention (4 heads, 2 kv heads)."""
    return random_llama(
        len(tiny_tokenizer()),
        hidden=64,
        layers=2,
        heads=4,
        kv_heads=2,
        intermediate=128,
        init_range=0.2,
    )


def prompts(n: int = 6, context: int = 40, shared: int = 0, seed: int = 1) -> list[str]:
    return synthetic_prompts(tiny_tokenizer(), n, context=context, shared=shared, seed=seed)


def conversations(n: int = 3) -> list[list[dict[str, str]]]:
    return [
        [{"role": "system", "content": "predict the observation"}, {"role": "user", "content": p}]
        for p in prompts(n, context=24, seed=7)
    ]


def copy_model(seed: int = 0, copy_next: bool = False) -> CopyLlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = ARConfig.preset("tiny", copy_dim=16, copy_next=copy_next)
    model = build_model(cfg, len(tiny_tokenizer()), 0, 0)
    assert isinstance(model, CopyLlamaForCausalLM)
    with torch.no_grad():  # weights large enough that greedy choices are not near-ties
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)
    return model.eval()
