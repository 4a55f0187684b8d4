"""The pure maths of GRPO: group-relative advantages, masked means, the KL estimate to the
reference, the clipped token-level policy loss, log-probs of chosen tokens, the packing of
a group into one row (its attention mask), and the weighted draw of contexts. No model, no
data: each function has hand-computed tests (tests/training/test_grpo.py).

    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))   # [[1, -1, -1, 1]]
    per_token = policy_loss(logp, old_logp, ref_logp, adv_per_row, beta=0.02, clip=0.2)
    loss = masked_mean(per_token, mask, denominator=tokens_in_batch)

Shapes: B groups (contexts) of G samples; N = rows (samples) of L token slots each.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor


def group_advantages(rewards: Tensor, scale: bool = True, eps: float = 1e-4) -> Tensor:
    """Each sample's reward minus its group's mean, divided by the group's standard
    deviation (population, ddof 0) when `scale`; rewards (B, G) -> advantages (B, G).
    A group whose rewards are all equal gets zeros."""
    mean = rewards.mean(dim=1, keepdim=True)  # (B, 1)
    centred = rewards - mean  # (B, G)
    if not scale:
        return centred
    std = rewards.std(dim=1, unbiased=False, keepdim=True)  # (B, 1)
    scaled = centred / (std + eps)  # (B, G)
    return torch.where(std > 0, scaled, torch.zeros_like(centred))  # (B, G) no 0/0


def informative_groups(rewards: Tensor, tol: float = 1e-6) -> Tensor:
    """(B,) True where a group's rewards differ: only those carry a policy gradient."""
    spread = rewards.max(dim=1).values - rewards.min(dim=1).values  # (B,)
    return spread > tol


def masked_mean(x: Tensor, mask: Tensor, denominator: float | None = None) -> Tensor:
    """Sum of `x` where `mask` over the count of masked slots (or `denominator`, the token
    count of a whole batch whose parts are accumulated one at a time); 0 when empty."""
    total = (x * mask).sum()  # ()
    count = float(mask.sum()) if denominator is None else denominator
    return total / count if count > 0 else total * 0.0


def kl_to_reference(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled tokens' log-probs:
    exp(d) - d - 1 with d = ref - policy (Schulman's k3: unbiased, never negative)."""
    d = ref_logp - logp  # (N, L)
    return torch.exp(d) - d - 1.0  # (N, L)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor,
    advantages: Tensor,
    beta: float,
    clip: float,
) -> Tensor:
    """Per-token GRPO loss (N, L): minus the clipped surrogate ratio * advantage, plus
    `beta` times the KL estimate. logp, old_logp, ref_logp (N, L); advantages (N,).

    With one update per rollout old_logp is logp detached: the ratio is 1 in value and
    its gradient is that of logp, so the surrogate is the plain policy gradient."""
    ratio = torch.exp(logp - old_logp)  # (N, L)
    adv = advantages[:, None]  # (N, 1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)  # (N, L)
    return -surrogate + beta * kl_to_reference(logp, ref_logp)  # (N, L)


def chosen_logprobs(
    logits: Tensor, positions: Tensor, tokens: Tensor, temperature: float = 1.0
) -> Tensor:
    """Log-probs of `tokens` (K,) under the next-token distributions at `positions` (K,)
    of `logits` (T, V), scaled by the sampling temperature; returns (K,)."""
    picked = logits[positions].float() / temperature  # (K, V)
    return F.log_softmax(picked, dim=-1).gather(1, tokens[:, None]).squeeze(1)  # (K,)


class Packed(NamedTuple):
    """One group as one row: model inputs, where each completion token is predicted from,
    the tokens themselves, and each completion's length."""

    inputs: dict[str, torch.Tensor]
    positions: torch.Tensor  # (K,) the position whose logits predict each token
    tokens: torch.Tensor  # (K,) every completion token, completion after completion
    lengths: list[int]  # (G,) tokens per completion, summing to K


def pack_group(prompt: list[int], completions: list[list[int]]) -> Packed:
    """The prompt once, then each completion; completion j attends to the prompt and to its
    own earlier tokens only, at the positions it would have alone (prompt length onward)."""
    P = len(prompt)
    ids, seg, pos, where = list(prompt), [0] * P, list(range(P)), []
    for j, comp in enumerate(completions, start=1):
        start = len(ids)
        # token k is predicted from the prompt's last position (k = 0) or from token k - 1
        where += [P - 1, *range(start, start + len(comp) - 1)]
        ids += comp
        seg += [j] * len(comp)
        pos += range(P, P + len(comp))
    T = len(ids)
    s = torch.tensor(seg)  # (T,) 0: prompt, j: completion j
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T) key <= query
    visible = (s[None, :] == 0) | (s[None, :] == s[:, None])  # (T, T) prompt or same completion
    inputs = {
        "input_ids": torch.tensor([ids]),  # (1, T)
        "position_ids": torch.tensor([pos]),  # (1, T)
        "attention_mask": (causal & visible)[None, None],  # (1, 1, T, T)
    }
    tokens = torch.tensor([t for comp in completions for t in comp])  # (K,)
    return Packed(inputs, torch.tensor(where), tokens, [len(c) for c in completions])


def weighted_sample(weights: Sequence[float], k: int, rng: random.Random) -> list[int]:
    """`k` distinct indices drawn with probability proportional to `weights`, without
    replacement (Efraimidis-Spirakis: the k largest u ** (1 / w)); zero weights are never
    drawn, so fewer than k come back when fewer are positive."""
    keyed = [
        (math.log(rng.random() or 1e-300) / w, i) for i, w in enumerate(weights) if w > 0
    ]  # log(u ** (1 / w)): same order, no underflow
    keyed.sort(reverse=True)
    return [i for _, i in keyed[:k]]


__all__ = [
    "Packed",
    "chosen_logprobs",
    "group_advantages",
    "informative_groups",
    "kl_to_reference",
    "masked_mean",
    "pack_group",
    "policy_loss",
    "weighted_sample",
]
