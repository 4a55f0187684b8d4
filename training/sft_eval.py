"""Evaluation during SFT: target-only loss, batched greedy decoding, exact match.

`greedy_decode` is the one place SFT generates text: the transformers engine's own decode
path (what serving runs) for a model it supports, a copy-head model included, else
`model.generate` (KV cache, left padding; a LoRA-wrapped base, for example).
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from simworld.training.batching import IGNORE, Encoded, Example, bucket_plan, collate
from simworld.worldmodel.copy_head import MODEL_TYPE as COPY_MODEL_TYPE
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.hf import TransformersEngine
from simworld.worldmodel.engines.lean import unsupported_reason
from simworld.worldmodel.tokenizer import decode, encode


def target_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Mean next-token cross entropy over labelled positions, and how many there were.

    logits (B, T, V) predict the token after each position; labels (B, T) hold the token
    at each position or IGNORE."""
    pred = logits[:, :-1].flatten(0, 1).float()  # (B*(T-1), V)
    gold = labels[:, 1:].flatten()  # (B*(T-1),)
    n = int((gold != IGNORE).sum())
    return F.cross_entropy(pred, gold, ignore_index=IGNORE), n


@torch.no_grad()
def val_loss(model: PreTrainedModel, data: list[Encoded], pad_id: int, batch_tokens: int) -> float:
    """Target-token-weighted mean loss over `data` (length-bucketed batches)."""
    model.train(False)  # eval mode
    total, count = 0.0, 0
    plan = bucket_plan([len(e.ids) for e in data], batch_tokens, random.Random(0))
    for rows in plan:
        batch = collate(rows, data, pad_id)
        labels = batch.pop("labels")
        logits = model(**batch).logits  # (B, T, V)
        loss, n = target_loss(logits, labels)
        total, count = total + float(loss) * n, count + n
    return total / max(1, count)


@torch.no_grad()
def greedy_decode(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    prompts: list[str],
    max_new_tokens: int,
    max_len: int,
    batch_size: int = 32,
) -> list[str]:
    """Greedy continuation of each prompt up to eos (or `max_new_tokens`), batched.

    Prompts lose their start to fit `max_len - max_new_tokens` tokens, as in training."""
    model.train(False)  # eval mode
    eos, pad = tok.eos_token_id, tok.pad_token_id
    keep = max(1, max_len - max_new_tokens)
    if isinstance(model, PreTrainedModel) and unsupported_reason(model) is None:
        # a fresh engine: its lean weights are copies, taken from the weights as they are now
        engine = TransformersEngine(model, tok, batch_size=batch_size, prefix_cache_size=0)
        rows = [encode(tok, p)[-keep:] for p in prompts]
        new = engine.generate_tokens(rows, GenerationConfig(max_new_tokens=max_new_tokens))
        return [decode(tok, ids) for ids in new]
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        ids = [encode(tok, p)[-keep:] for p in prompts[start : start + batch_size]]
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), pad, dtype=torch.long)  # (B, P) left-padded
        attention = torch.zeros((len(ids), width), dtype=torch.long)  # (B, P)
        for b, x in enumerate(ids):
            input_ids[b, width - len(x) :] = torch.tensor(x)
            attention[b, width - len(x) :] = 1
        gen = model.generate(  # type: ignore[operator]
            input_ids=input_ids,
            attention_mask=attention,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=pad,
            # a copy head (under LoRA, say) needs every position each step: no cache
            use_cache=model.config.model_type != COPY_MODEL_TYPE,
        )  # (B, P + N)
        for row in gen[:, width:].tolist():  # (B, N) new tokens
            cut = row.index(eos) if eos in row else len(row)
            out.append(decode(tok, row[:cut]))
    return out


def exact_match(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    examples: list[Example],
    max_new_tokens: int,
    max_len: int,
) -> float:
    """Fraction of examples whose greedy decode equals the target text exactly."""
    if not examples:
        return 0.0
    got = greedy_decode(model, tok, [e.prompt for e in examples], max_new_tokens, max_len)
    return sum(g == e.target for g, e in zip(got, examples, strict=True)) / len(examples)
