"""The own decode loop: a batch of token lists in, generated token lists out, on `LeanLlama`.

    1. Every row's prompt but its last token is prefilled in one pass (`_prefill_many`,
       `LeanLlama.prefill`: the matmuls over all rows' new tokens at once, attention per
       prompt), each from the longest start it shares with a prompt in the `PrefixCache`
       (kept across calls) or with an earlier row of the call, cut to whole 32-token
       blocks (see PrefixCache): rows that share a start (the schemas and state of one
       scenario, the next step of a session) compute only what differs.
    2. The rows' keys and values are right-aligned in one batch cache, longest first,
       every prompt ending at the same slot (the slots before a row's first are masked),
       and the prompts' last tokens run together as the first decode step.
    3. Decode steps of one token per row, each row attending to a window of its own span
       rounded up to 64 slots (rows of one width in one attention call); a row
       stops at an end token, a stop string or `max_new_tokens`; the loop ends when every
       row has. When half the rows have finished, they are dropped from the batch (cache
       rows included).

So a row computes exactly what it computes alone, bit for bit, whatever else is in its
batch (the continuous decoder, continuous.py, places and decodes rows the same way):
rotary positions count a row's own tokens, attention reads a window that depends on its
own span only (its own slots and masked ones before them), and the matmuls compute a row
the same for any number of rows (tests/worldmodel/test_bfloat16.py). Sampling draws the
row of `rows[i]` from its own generator seeded `seeds[i]`: top-p over the
temperature-scaled softmax, by inverse CDF.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.lean import (
    DECODE_BLOCK,
    PREFILL_BLOCK,
    KVCache,
    LeanLlama,
    PrefillPart,
)


class PrefixCache:
    """Keys and values of recently prefilled prefixes (LRU, `size` entries), reused for any
    later prefix that starts the same way (causality: slot i depends on tokens <= i).

    A match is cut down to a multiple of PREFILL_BLOCK tokens: the prefill then starts at a
    block boundary and computes the same attention blocks as a prefill from slot 0, so a
    prompt's keys and first token are the same whatever happened to be cached (in bfloat16
    a different cut would round differently)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[int, ...], KVCache] = OrderedDict()
        self.hits = self.reused_tokens = 0

    def longest_match(self, tokens: Sequence[int], beyond: int = 0) -> tuple[int, KVCache | None]:
        """The longest cached start of `tokens` (cut to whole blocks) and its cache; (0,
        None), counting nothing, when none is longer than `beyond` tokens."""
        best, best_key = 0, None
        query = tuple(tokens)
        for key in self._entries:
            n = _common_length(key, query)
            if n > best:
                best, best_key = n, key
        best -= best % PREFILL_BLOCK
        if best_key is None or best <= beyond:
            return 0, None
        self._entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best
        return best, self._entries[best_key]

    def clear(self) -> None:
        """Forget every entry (the hit counters stay)."""
        self._entries.clear()

    def put(self, tokens: Sequence[int], cache: KVCache) -> None:
        if self.size <= 0 or not tokens:
            return
        self._entries[tuple(tokens)] = cache
        self._entries.move_to_end(tuple(tokens))
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share: a binary search over slice comparisons,
    which run in C (a token-by-token loop cost ~0.5 ms an observation at batch 32)."""
    if type(a) is not type(b):
        a, b = tuple(a), tuple(b)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _prefill_prefix(lean: LeanLlama, prefix: list[int], cache: PrefixCache) -> KVCache:
    """Keys and values (batch 1) for `prefix`, reusing the longest cached match."""
    return _prefill_many(lean, [prefix], cache)[0]


def _prefill_many(lean: LeanLlama, prefixes: list[list[int]], cache: PrefixCache) -> list[KVCache]:
    """Keys and values (batch 1 each) for every prefix, in one `LeanLlama.prefill` pass. A
    prefix starts from the longest whole-block start it shares with a cached prompt or
    with an earlier prefix of this call (whose keys are then copied layer by layer as the
    pass computes them); the rest is computed. Every prefix is then cached."""
    outs: list[KVCache] = []
    parts: list[PrefillPart] = []
    for j, prefix in enumerate(prefixes):
        out = lean.new_cache(1, len(prefix))
        known, donor = 0, None
        for i in range(j):  # an earlier prefix of this call
            n = _common_length(prefixes[i], prefix)
            n -= n % PREFILL_BLOCK
            if n > known:
                known, donor = n, outs[i]
        cached, hit = cache.longest_match(prefix, beyond=known)
        if hit is not None:
            known, donor = cached, None
            for dst, src in zip(out.tensors(), hit.tensors(), strict=True):
                dst[:, :, :known] = src[:, :, :known]
        elif donor is not None:
            cache.hits += 1
            cache.reused_tokens += known
        parts.append(PrefillPart(out, known, prefix[known:], donor))
        outs.append(out)
    lean.prefill(parts)
    for prefix, out in zip(prefixes, outs, strict=True):
        cache.put(prefix, out)
    return outs


def _prefill_rows(
    lean: LeanLlama, rows: list[list[int]], cache: PrefixCache, capacity_extra: int
) -> tuple[KVCache, Tensor, Tensor, Tensor, list[int], list[int]]:
    """Steps 1-2. All but the last token of each prompt go through `_prefill_many`, in
    one pass and in the order given (shared starts reused, the prompts left in the cache);
    the batch cache holds the rows longest first (`order[i]` is the index in `rows` of
    batch row i), so rows of one decode window width sit together (`_attend_decode`). The
    last tokens then run as one decode step of the whole batch, each row attending to the
    window of its own span, as a row alone does. Returns the batch cache (DECODE_BLOCK - 1 free
    slots, the longest prompt, then `capacity_extra` slots), `key_valid` (B, capacity),
    the next rotary position per batch row (B,), the logits after each prompt (B, V), each
    batch row's first slot, and `order`."""
    B, dev = len(rows), lean.device
    order = sorted(range(B), key=lambda i: -len(rows[i]))  # stable: ties keep their order
    place = {r: b for b, r in enumerate(order)}
    end = DECODE_BLOCK - 1 + max(len(r) for r in rows)  # every prompt ends at slot end - 1
    batch = lean.new_cache(B, end + capacity_extra)
    firsts = [end - len(rows[r]) for r in order]
    for t in batch.tensors():  # the decode windows read masked slots: they must be finite
        t[:, :, : max(firsts)].zero_()
    if batch.copy_k is not None:  # the copy head's pointer scores read every slot
        batch.copy_k.zero_()
    key_valid = torch.zeros(B, batch.capacity, dtype=torch.bool, device=dev)
    for b, first in enumerate(firsts):
        key_valid[b, first:end] = True
    with_prefix = [r for r, row in enumerate(rows) if len(row) > 1]
    prefixes = _prefill_many(lean, [rows[r][:-1] for r in with_prefix], cache)
    for r, prefix in zip(with_prefix, prefixes, strict=True):
        b = place[r]
        for dst, src in zip(batch.tensors(), prefix.tensors(), strict=True):
            dst[b, :, firsts[b] : end - 1] = src[0]
    last = torch.tensor([[rows[r][-1]] for r in order], device=dev)  # (B, 1)
    lengths = torch.tensor([len(rows[r]) for r in order], device=dev)  # (B,)
    hidden = lean.forward(last, (lengths - 1)[:, None], batch, end - 1, key_valid, firsts)
    logits = lean.logits(hidden, batch, key_valid, end)
    return batch, key_valid, lengths, logits, firsts, order


def _sample(logits: Tensor, cfg: GenerationConfig, gens: list[torch.Generator]) -> Tensor:
    """One token per row (B,) from logits (B, V): argmax, or top-p sampling by inverse CDF
    with each row's own generator."""
    if not cfg.do_sample:
        return logits.argmax(dim=-1)  # (B,)
    probs = torch.softmax(logits / cfg.temperature, dim=-1)  # (B, V)
    sorted_p, order = probs.sort(dim=-1, descending=True)  # (B, V) each
    cum = sorted_p.cumsum(dim=-1)  # (B, V)
    sorted_p = sorted_p.masked_fill(cum - sorted_p >= cfg.top_p, 0.0)  # keeps the top token
    cum = sorted_p.cumsum(dim=-1)  # (B, V)
    u = torch.stack([torch.rand((), generator=g, device=g.device) for g in gens])  # (B,)
    u = u.to(cum.device) * cum[:, -1]  # (B,)
    idx = torch.searchsorted(cum, u[:, None]).clamp(max=cum.shape[1] - 1)  # (B, 1)
    return order.gather(1, idx).squeeze(1)  # (B,)


def lean_generate(
    lean: LeanLlama,
    rows: list[list[int]],
    cfg: GenerationConfig,
    eos_ids: set[int],
    seeds: Sequence[int],
    cache: PrefixCache,
    decode_text: Callable[[list[int]], str] | None = None,
) -> list[list[int]]:
    """Generate for each token list in `rows`; returns the new tokens per row, the end
    token excluded. `decode_text` turns tokens to text for stop strings (needed when
    `cfg.stop` is set)."""
    if any(not r for r in rows):
        raise ValueError("every prompt must have at least one token")
    B, dev = len(rows), lean.device
    batch, key_valid, next_pos, logits, firsts, live = _prefill_rows(
        lean, rows, cache, cfg.max_new_tokens
    )
    slot = batch.capacity - cfg.max_new_tokens
    gen_device = "cpu" if dev.type == "mps" else dev
    gens = [torch.Generator(device=gen_device).manual_seed(int(seeds[r])) for r in live]
    eos = torch.tensor(sorted(eos_ids), device=dev)  # (n_eos,)
    out: list[list[int]] = [[] for _ in range(B)]
    # live[b]: the index in `rows` of batch row b; finished rows are dropped
    done = [False] * B  # per batch row
    for step in range(cfg.max_new_tokens):
        token = _sample(logits, cfg, gens)  # (b,)
        ended, picked = torch.isin(token, eos).tolist(), token.tolist()
        for b, r in enumerate(live):
            if done[b]:
                continue
            done[b] = ended[b]
            if not done[b]:
                out[r].append(picked[b])
                if cfg.stop and decode_text is not None:
                    done[b] = any(s in decode_text(out[r]) for s in cfg.stop)
        if all(done) or step == cfg.max_new_tokens - 1:
            break
        if sum(done) * 2 >= len(live):  # compact: finished rows stop costing compute
            keep = torch.tensor([b for b, d in enumerate(done) if not d], device=dev)  # (b',)
            batch = batch.select(keep)
            key_valid, next_pos, token = key_valid[keep], next_pos[keep], token[keep]
            gens = [gens[b] for b in keep.tolist()]
            firsts = [firsts[b] for b in keep.tolist()]
            live = [live[b] for b in keep.tolist()]
            done = [False] * len(live)
        key_valid[:, slot + step] = True
        pos = (next_pos + step)[:, None]  # (b, 1)
        hidden = lean.forward(token[:, None], pos, batch, slot + step, key_valid, firsts)  # (b, D)
        logits = lean.logits(hidden, batch, key_valid, slot + step + 1)  # (b, V)
    return out
