"""From (prompt, target) text pairs to SFT batches: encoding, packing or length bucketing,
and collation into tensors.

An `Example` is text only; the world-model serialization makes them. Each encodes as
`prompt ids + target ids + eos`, with labels -100 on the prompt (the loss is on the target
and its eos only). Too long a pair loses the *start* of its prompt (the action sits at
the end), never its target, unless the target alone overflows `max_len`.

Two ways to cut padding, both planning batches of about `batch_tokens` tokens:

- packing: several examples share a row of `max_len`; a block-diagonal causal mask keeps
  each example from seeing the others, and positions restart at 0 for each one, so a
  packed example computes exactly what it would alone;
- bucketing: one example per row, rows of similar length batched together.

Measured on 2 CPU cores (the default 5.4M model, BFCL pairs, 4096-token batches): packing
819 real tokens/s, bucketing 801, a tie within noise; the 4-D mask costs about nothing on
this size. Packing is the default: fixed batch shapes and fewer, fuller steps.

A plan is a list of batches, each a list of rows, each a list of example indices, so both
ways share `collate`. Plans are drawn from a seeded generator: an epoch's plan is a pure
function of (seed, epoch), which is what makes resuming exact.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from simworld.worldmodel.tokenizer import encode

IGNORE = -100  # label of positions without loss (prompt, padding)
Plan = list[list[list[int]]]  # batches -> rows -> example indices


@dataclass(frozen=True)
class Example:
    """One training pair: the model sees `prompt` and learns to continue with `target`.

    `group` is the scenario id, used to split and to keep a scenario's pairs together."""

    prompt: str
    target: str
    group: str = ""
    env: str = ""  # the env the pair comes from (per-env caps and breakdowns)


@dataclass(frozen=True)
class Encoded:
    ids: list[int]  # prompt + target + eos
    n_prompt: int  # how many of `ids` are prompt (no loss)


def encode_example(tok: PreTrainedTokenizerBase, ex: Example, max_len: int) -> Encoded:
    """Token ids of `ex` with the eos appended, cut to `max_len` from the prompt's start."""
    prompt = encode(tok, ex.prompt)
    target = [*encode(tok, ex.target), tok.eos_token_id]
    target = target[:max_len]  # only a target longer than max_len loses its tail
    keep = max_len - len(target)
    prompt = prompt[max(0, len(prompt) - keep) :] if keep > 0 else []
    return Encoded(ids=prompt + target, n_prompt=len(prompt))


def pack_plan(lengths: list[int], max_len: int, batch_tokens: int, rng: random.Random) -> Plan:
    """Shuffle, fill rows of `max_len` first-fit over the open rows, group rows by batch."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    rows: list[list[int]] = []
    room: list[int] = []  # free tokens left in each row
    for i in order:
        # first-fit over recent rows only: keeps planning linear and rows in shuffled order
        start = max(0, len(rows) - 16)
        slot = next((r for r in range(start, len(rows)) if room[r] >= lengths[i]), None)
        if slot is None:
            rows.append([])
            room.append(max_len)
            slot = len(rows) - 1
        rows[slot].append(i)
        room[slot] -= lengths[i]
    per_batch = max(1, batch_tokens // max_len)
    return [rows[b : b + per_batch] for b in range(0, len(rows), per_batch)]


def bucket_plan(lengths: list[int], batch_tokens: int, rng: random.Random) -> Plan:
    """Shuffle, sort by length inside windows, cut batches of <= `batch_tokens` padded tokens."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = 64 * max(1, batch_tokens // max(1, max(lengths, default=1)))
    batches: Plan = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda i: lengths[i])
        batch: list[list[int]] = []
        for i in chunk:
            # a batch costs rows x its longest row (the last one, as the chunk is sorted)
            if batch and (len(batch) + 1) * lengths[i] > batch_tokens:
                batches.append(batch)
                batch = []
            batch.append([i])
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(rows: list[list[int]], data: list[Encoded], pad_id: int) -> dict[str, torch.Tensor]:
    """Tensors for one batch: input_ids, labels, position_ids and the attention mask.

    The mask is 2-D (padding only) when every row holds one example; with packed rows it
    is a 4-D boolean block-diagonal causal mask, which transformers uses as given."""
    width = max(sum(len(data[i].ids) for i in row) for row in rows)
    B = len(rows)
    input_ids = torch.full((B, width), pad_id, dtype=torch.long)  # (B, T)
    labels = torch.full((B, width), IGNORE, dtype=torch.long)  # (B, T)
    position_ids = torch.zeros((B, width), dtype=torch.long)  # (B, T)
    segment = torch.full((B, width), -1, dtype=torch.long)  # (B, T) example slot, -1 = pad
    for b, row in enumerate(rows):
        at = 0
        for s, i in enumerate(row):
            ex, n = data[i], len(data[i].ids)
            input_ids[b, at : at + n] = torch.tensor(ex.ids)
            labels[b, at + ex.n_prompt : at + n] = torch.tensor(ex.ids[ex.n_prompt :])
            position_ids[b, at : at + n] = torch.arange(n)
            segment[b, at : at + n] = s
            at += n
    batch = {"input_ids": input_ids, "labels": labels, "position_ids": position_ids}
    if all(len(row) == 1 for row in rows):
        batch["attention_mask"] = (segment >= 0).long()  # (B, T)
        return batch
    same = segment[:, :, None] == segment[:, None, :]  # (B, T, T) same example
    causal = torch.ones(width, width, dtype=torch.bool).tril()  # (T, T)
    # padding rows attend to themselves only, so no softmax row is empty (no NaN)
    own = torch.eye(width, dtype=torch.bool)  # (T, T)
    mask = (same & causal & (segment[:, :, None] >= 0)) | own  # (B, T, T)
    batch["attention_mask"] = mask[:, None]  # (B, 1, T, T)
    return batch


def real_tokens(rows: list[list[int]], data: list[Encoded]) -> int:
    """Non-padding tokens in a batch (for tokens/s)."""
    return sum(len(data[i].ids) for row in rows for i in row)
