"""Stable seed derivation for real envs: one recording seed gives independent seeds for each
episode, map, game and policy.

    >>> derive_seed("frozenlake", 0, 3, "map")
    941974668

The value comes from SHA-256 of the parts, so it is the same in every process and on every
Python version (unlike `hash()`, which `PYTHONHASHSEED` salts). It lies in [1, 2**31 - 1]:
positive (some emulators treat 0 as "seed from the clock") and valid for numpy and Jericho.
"""

from __future__ import annotations

import hashlib


def derive_seed(*parts: int | str) -> int:
    """A seed in [1, 2**31 - 1] determined by `parts` alone."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**31 - 1) + 1


__all__ = ["derive_seed"]
