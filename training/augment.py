"""Copy augmentation: training pairs in which the names an observation copies from its
context are consistently renamed, so that a small model learns to copy them instead of
memorizing the ones it saw.

    from simworld.training.augment import CopyAugment, copy_variants
    variants, report = copy_variants(pairs, CopyAugment(copies=1, seed=0))

Why: a tool result often repeats what its context holds: `cd` answers with the folder it
was given, `tail` with a file's content from the state, `send_message` with the receiver's
id. Trained from scratch on a few hundred scenarios, a model learns the names of the train
scenarios (it answers `tail` with a train file's content) rather than the copy. In a
renamed variant those names are fresh strings, which only copying can predict.

What is renamed, in one pair: a *name* is a word (letters, digits, `_`, and `.`/`-` inside;
at least `min_chars` long, with a letter) that appears both in the target and in the
prompt, and

- not in the pair's fixed blocks (tool schemas, rules, steering): those are the env's
  vocabulary (argument names, enums), never renamed;
- not in the vocabulary of the pair's tool: a word found in more than `max_share` of the
  targets of pairs calling the same first tool is part of how that tool answers
  ("successfully", "type", "contents"), not a name it copies;
- not a proper part of an argument, nor holding one: `find(name="report")` answers with
  "report.txt" because of its spelling, so renaming either would make the pair false.

Each name is replaced everywhere in the pair (prompt and target, whole words only) by a
fresh string of the same shape: the first character and every non-alphanumeric one kept,
letters by random letters of the same case, digits by random digits, and a file extension
kept. Same length and first character: character counts (`wc`) and most orderings (`ls`,
`sort` by first letter) stay true of the renamed pair.

Only tool-call pairs are renamed. Text observations (a FrozenLake board, a TextWorld room)
are made of words whose meaning is their spelling. A variant whose prompt or target no
longer fits its budget (fresh strings can take more tokens) is left out and counted.
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simworld.training.batching import Example

_WORD = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?")
_EXTENSION = re.compile(r"\.[A-Za-z]{1,4}\Z")
_LITERALS = frozenset({"true", "false", "null", "None", "True", "False"})


@dataclass(frozen=True)
class CopyAugment:
    """How many renamed variants each pair gets, and what counts as a name."""

    copies: int = 1
    max_share: float = 0.2  # a word in more of its tool's targets than this is vocabulary
    min_chars: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.copies < 0:
            raise ValueError(f"copies must be >= 0 (0: no augmentation), got {self.copies}")
        if not 0 < self.max_share <= 1:
            raise ValueError(f"max_share must be in (0, 1], got {self.max_share}")
        if self.min_chars < 1:
            raise ValueError(f"min_chars must be >= 1, got {self.min_chars}")


@dataclass(frozen=True)
class Pair:
    """A training pair with what renaming needs: the text of its fixed blocks, and `key`,
    the pairs whose targets share a vocabulary (env and first tool called); "" for a pair
    that is never renamed (a text action)."""

    example: Example
    fixed: str
    key: str
    arguments: str = ""  # the calls' argument values as text: their spelling matters


@dataclass
class AugmentReport:
    pairs: int = 0  # tool-call pairs looked at
    renamable: int = 0  # of those, pairs with at least one name
    variants: int = 0  # variants made and kept
    over_budget: int = 0  # variants left out: no longer within the prompt or target budget

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


def words(text: str, min_chars: int) -> set[str]:
    """The words of `text` that could be names."""
    return {
        w
        for w in _WORD.findall(text)
        if len(w) >= min_chars and any(c.isalpha() for c in w) and w not in _LITERALS
    }


def vocabulary(pairs: Sequence[Pair], cfg: CopyAugment) -> dict[str, set[str]]:
    """Per key, the words found in more than `cfg.max_share` of its pairs' targets."""
    seen: dict[str, Counter[str]] = defaultdict(Counter)
    sizes: Counter[str] = Counter()
    for pair in pairs:
        if pair.key:
            seen[pair.key].update(words(pair.example.target, cfg.min_chars))
            sizes[pair.key] += 1
    return {
        key: {w for w, n in counts.items() if n > cfg.max_share * sizes[key]}
        for key, counts in seen.items()
    }


def names(pair: Pair, vocab: set[str], cfg: CopyAugment) -> list[str]:
    """The names `pair`'s target copies from its prompt, longest first."""
    ex = pair.example
    found = words(ex.target, cfg.min_chars) & words(ex.prompt, cfg.min_chars)
    found -= words(pair.fixed, cfg.min_chars) | vocab
    # a name holding an argument or held by one (`find(name="report")` answering
    # "report.txt") is matched by the tool on its spelling: renaming one breaks the match
    given = words(pair.arguments, cfg.min_chars)
    found = {w for w in found if not any(a != w and (a in w or w in a) for a in given)}
    return sorted(found, key=lambda w: (-len(w), w))


def fresh(name: str, rng: random.Random, taken: set[str]) -> str:
    """A random string of `name`'s shape (see the module docstring), not in `taken`."""
    ext = _EXTENSION.search(name)
    stem, tail = (name[: ext.start()], ext.group()) if ext and ext.start() > 0 else (name, "")
    for _ in range(100):
        out = [stem[0]]
        for c in stem[1:]:
            if c.islower():
                out.append(rng.choice(string.ascii_lowercase))
            elif c.isupper():
                out.append(rng.choice(string.ascii_uppercase))
            elif c.isdigit():
                out.append(rng.choice(string.digits))
            else:
                out.append(c)
        candidate = "".join(out) + tail
        if candidate != name and candidate not in taken:
            return candidate
    return name + "".join(rng.choice(string.ascii_lowercase) for _ in range(4))


def rename(pair: Pair, found: Sequence[str], rng: random.Random) -> Example:
    """`pair`'s example with every name in `found` replaced by a fresh one, whole words only."""
    taken: set[str] = set(found)
    mapping: dict[str, str] = {}
    for name in found:
        mapping[name] = fresh(name, rng, taken)
        taken.add(mapping[name])
    alternatives = "|".join(re.escape(n) for n in found)  # longest first: the longest wins
    pattern = re.compile(rf"(?<![A-Za-z0-9_])(?:{alternatives})(?![A-Za-z0-9_])")

    def sub(text: str) -> str:
        return pattern.sub(lambda m: mapping[m.group(0)], text)

    ex = pair.example
    return Example(sub(ex.prompt), sub(ex.target), ex.group, ex.env)


def copy_variants(
    pairs: Sequence[Pair], cfg: CopyAugment, fits: Callable[[Example], bool] = lambda _: True
) -> tuple[list[Example], AugmentReport]:
    """`cfg.copies` renamed variants of every pair that has names, in pair order; `fits`
    says whether a variant is still within the prompt and target budgets."""
    report = AugmentReport()
    vocab = vocabulary(pairs, cfg)
    out: list[Example] = []
    for index, pair in enumerate(pairs):
        if not pair.key:
            continue
        report.pairs += 1
        found = names(pair, vocab.get(pair.key, set()), cfg)
        if not found:
            continue
        report.renamable += 1
        for copy in range(cfg.copies):
            rng = random.Random(f"{cfg.seed}:{index}:{copy}")
            variant = rename(pair, found, rng)
            if fits(variant):
                out.append(variant)
                report.variants += 1
            else:
                report.over_budget += 1
    return out, report


__all__ = [
    "AugmentReport",
    "CopyAugment",
    "Pair",
    "copy_variants",
    "fresh",
    "names",
    "rename",
    "vocabulary",
    "words",
]
