"""Search as a real env: a BM25 retriever over a passage corpus, logged on a seeded query set
generated from that corpus (SSRL's self-search trains a world model on such logs).

    from simworld.data.envs import load_env
    env = load_env("search", split="train", top_k=1)          # the pydoc demo corpus
    env = load_env("search", corpus="docs.jsonl", split="test")
    episodes = list(env.record(episodes=100, seed=0))

    simworld record --env search --episodes all --option split=train --option top_k=1 \
        --out search_train.jsonl.gz

What an episode holds: one information need (a passage of the corpus) and one to three
searches for it, the need's queries that fall in the asked split (see search_corpus.py):

- `tools`: [SEARCH_TOOL], `search(query, top_k=3)`, with input and output JSON Schemas;
- a step's `action`: one call `search({"query": q, "top_k": top_k})` with id `call_<i>_0`;
- its `observation`: one result, the JSON array of hits best first, each {"id", "title",
  "text", "score"} (`result_text`); an empty array when no passage shares a term with the
  query. No state (None): search is stateless; `reward` None (the source has none);
- `outcome.success`: whether some search returned the need's own passage;
- `task.id`: "search-<split>-<passage id>", so the same need in two splits has two ids;
  every task has the same instruction (`instruction(corpus)`), as a served search env's
  task does, so prompts at training and at serving time read alike.

Decisions:
- Options: `corpus` (a JSONL path; default the pydoc demo corpus), `split` (train, val,
  test; default train), `top_k` (default 1: the default world-model recipe's 112-token
  target holds one ~40-word passage with its id, title and score, not three; the tool's
  own default stays 3), `words` (passage length limit, default 40).
- Order: the split's needs shuffled with `random.Random(derive_seed("search", seed,
  split))`; `episodes` takes the first N (None: all). The same options and seed give the
  same records, byte for byte, on one Python version (the demo corpus is that Python's).
- No volatile fields: BM25 is deterministic.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from simworld.data.envs.seeding import derive_seed
from simworld.data.records import (
    JSON,
    Episode,
    Outcome,
    Provenance,
    Step,
    Task,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
    VolatileField,
)
from simworld.data.search_corpus import (
    DEFAULT_WORDS,
    SPLITS,
    BM25Index,
    Corpus,
    Hit,
    Need,
    load_corpus,
    make_needs,
)

TOOL_NAME = "search"
DEFAULT_TOP_K = 3
MAX_TOP_K = 10
BM25_VERSION = "bm25(k1=1.2,b=0.75)"
# Terse on purpose: the schemas are in every world-model prompt (RULES say the rest).
_HIT_SCHEMA: dict[str, JSON] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "title": {"type": "string"},
        "text": {"type": "string"},
        "score": {"type": "number"},
    },
    "required": ["id", "title", "text", "score"],
    "additionalProperties": False,
}
SEARCH_TOOL = ToolSpec(
    name=TOOL_NAME,
    description="Search the corpus: the top_k passages that best match the query, best first.",
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "top_k": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TOP_K,
                "default": DEFAULT_TOP_K,
                "description": "passages at most",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    output_schema={"type": "array", "items": _HIT_SCHEMA, "maxItems": MAX_TOP_K},
)
RULES = (
    "search(query, top_k) ranks the corpus's passages by BM25 over their lower-case words"
    " (title and text; common English words ignored) and returns at most top_k of them,"
    ' best first, as a JSON array of {"id", "title", "text", "score"} (score: BM25, higher'
    " is better).",
    "Only passages that share a word with the query are returned: a query without any"
    " known word gets []. Equal scores keep the corpus order. Scores have two decimals.",
    "Passages are verbatim slices of the corpus; a passage id is <document id>-<n>.",
)


def instruction(corpus: Corpus) -> str:
    """The one task instruction of a search env over `corpus`."""
    what = "the Python language reference" if corpus.name == "pydoc" else f"'{corpus.name}'"
    return f"Search {what} for passages that answer your questions."


def hits_json(hits: Sequence[Hit]) -> list[JSON]:
    """Hits as the search tool's structured result."""
    return [
        {"id": h.passage.id, "title": h.passage.title, "text": h.passage.text, "score": h.score}
        for h in hits
    ]


def result_text(hits: Sequence[Hit]) -> str:
    """The search tool's result text: compact JSON, non-ASCII kept."""
    return json.dumps(hits_json(hits), ensure_ascii=False, separators=(",", ":"))


_FIELD = re.compile(
    r'"(id|title|text)"\s*:\s*"((?:[^"\\]|\\.)*)"'  # a string field
    r'|"score"\s*:\s*(-?\d+(?:\.\d+)?)(?=\s*[,}\]])'  # a whole number, then , } or ]
)


def salvage_hits(text: str) -> list[dict[str, JSON]]:
    """The hits a result text holds even where its JSON is broken (a model's answer cut at
    its token bound, a slipped quote): the `"id"`, `"title"`, `"text"` and `"score"`
    fields in order, a field already in the current hit (or an id after its score)
    starting the next hit; a field the text lacks is missing from the hit. A text that is
    a JSON array of objects is read as it is."""
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, list) and all(isinstance(h, dict) for h in whole):
        return whole
    hits: list[dict[str, JSON]] = []
    for key, literal, score in _FIELD.findall(text):
        if score:
            if hits and "score" not in hits[-1]:
                hits[-1]["score"] = float(score)
            continue
        try:
            value = json.loads(f'"{literal}"')
        except ValueError:
            continue
        if not hits or key in hits[-1] or (key == "id" and "score" in hits[-1]):
            hits.append({})
        hits[-1][key] = value
    return hits


def search_call(call_id: str, query: str, top_k: int) -> ToolCall:
    arguments: dict[str, JSON] = {"query": query, "top_k": top_k}
    return ToolCall(call_id, TOOL_NAME, arguments, json.dumps(arguments, ensure_ascii=False))


class SearchEnv:
    """Records BM25 retrievals on the corpus's query set; see the module docstring."""

    name = "search"

    def __init__(
        self,
        corpus: str | None = None,
        split: str = "train",
        top_k: int = 1,
        words: int = DEFAULT_WORDS,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
        if not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be an integer from 1 to {MAX_TOP_K}; got {top_k!r}")
        self.corpus = load_corpus(None if corpus is None else Path(corpus), words)
        self.index = BM25Index(self.corpus.passages)
        self.split = split
        self.top_k = top_k
        self.version = f"{self.corpus.version}; {BM25_VERSION}"
        self.volatile: list[VolatileField] = []

    def record(self, episodes: int | None, seed: int) -> Iterator[Episode]:
        """Yield `episodes` episodes (None: one per need of the split) determined by `seed`."""
        needs = make_needs(self.corpus, self.index, self.split)
        random.Random(derive_seed("search", seed, self.split)).shuffle(needs)
        if episodes is not None and episodes > len(needs):
            raise ValueError(
                f"the {self.split} split of {self.corpus.name} has {len(needs)} information "
                f"needs; ask for at most that many episodes (or 'all')"
            )
        for index, need in enumerate(needs[:episodes]):
            yield self._episode(need, seed, index)

    def _episode(self, need: Need, seed: int, index: int) -> Episode:
        steps: list[Step] = []
        found = False
        for i, query in enumerate(need.queries[:3]):
            call = search_call(f"call_{i}_0", query, self.top_k)
            hits = self.index.search(query, self.top_k)
            found = found or any(h.passage.id == need.passage.id for h in hits)
            result = ToolResult(call.id, result_text(hits), hits_json(hits))
            steps.append(Step(ToolCallsAction([call]), ToolResultsObservation([result])))
        detail = "a search returned the need's passage" if found else "no search returned it"
        return Episode(
            episode_id=f"search-{self.split}-{seed}-{index}",
            env=self.name,
            task=Task(f"search-{self.split}-{need.passage.id}", instruction(self.corpus)),
            steps=steps,
            tools=[SEARCH_TOOL],
            rules=list(RULES),
            seed=seed,
            provenance=Provenance(
                source=self.name,
                version=self.version,
                origin=f"record(seed={seed}, split={self.split}) need {need.passage.id}",
                policy="templated queries from the passage's title and salient terms",
            ),
            outcome=Outcome(success=found, detail=detail),
            volatile=list(self.volatile),
        )


__all__ = [
    "BM25_VERSION",
    "DEFAULT_TOP_K",
    "MAX_TOP_K",
    "RULES",
    "SEARCH_TOOL",
    "TOOL_NAME",
    "SearchEnv",
    "hits_json",
    "instruction",
    "result_text",
    "salvage_hits",
    "search_call",
]
