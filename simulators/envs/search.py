"""The `search` simulated env: one stateless `search(query, top_k)` tool over a passage
corpus, answered by a world model that writes the top-k passages itself (SSRL's
self-search), by the exact cache, or by the real BM25 retriever.

    from simworld.simulators.envs.search import SearchReal, search_env
    env = search_env()                           # the pydoc demo corpus
    env = search_env("docs.jsonl")               # a user corpus (see data/search_corpus.py)
    task = env.task_for("search")                # the one task; tools (SEARCH_TOOL,)
    real = SearchReal(index)                     # env.real: BM25 over the same passages
    real.execute(None, action).observation       # [{"id", "title", "text", "score"}, ...]

`load_sim_env("search")` builds the env over the corpus in the JSONL file that the
environment variable SIMWORLD_SEARCH_CORPUS names, else over the pydoc demo corpus; a
server thus serves a user corpus with `SIMWORLD_SEARCH_CORPUS=docs.jsonl simworld serve
--env search`. The world model must have been trained on logs of that same corpus.

Routing (the issue's "cache, then real, then model"), as simulators/router.py runs it:
- default (real off, the project's rule): the exact cache, then the world model. A query
  seen before in the same situation (for a one-call session: the same query and top_k) is
  answered as the model first answered it; a new one is generated.
- `RouterConfig(real_tools={"search"})` (`simworld serve --real-tool search`): BM25 answers
  every search; the cache and the model are not asked. This is the real retriever served
  through simworld, what `simworld record --env search` logs offline.
- `RouterConfig(max_real_cost=C)`: cost-aware. A search costs the postings BM25 reads for
  it (the summed document frequencies of its known terms) over the passage count, so a
  query of rare words is cheap and one of common words dear: the real backend answers the
  searches that cost at most C, the cache then the model the others.
The router asks a routed real backend before the cache, not after: the cache holds only
model answers, and a real answer is preferred to a remembered model answer. For a query
the real backend is routed to, cache-then-real and real-first give the same answer only
where the cached model answer was right; simworld keeps real first. Every answer's source
("cache", "real", "model", or "validation" for a call the input schema refused) is in
the step's info and the server's metrics.

Grounding (`SearchGrounder`, the env's `ground`; `RouterConfig(ground=False)` and
`simworld serve --no-ground` switch it off): a model answer is rebuilt from the corpus,
each hit the model names (by id, else by title) given as the corpus passage, verbatim, in
the model's order and with the model's score. The model then decides which passages a
query gets, the part a retriever's simulation is about, and never has to write 40 words
of a corpus from memory, which a small model cannot (README, "Search"). Writing text
from memory, SSRL's pure self-search, is what `ground=False` serves.

Decisions:
- One task, "search", with the recorder's instruction for the corpus (`instruction`): the
  prompts a served search sees read like the recorded ones. No state, no reward (`check`
  is no_reward; an agent's reward comes from its own task), 10 steps at most.
- Calls the input schema refuses (an empty query, top_k outside 1..10, an unknown
  argument) get DefaultStyle's {"error": "..."} without reaching any backend.
- SearchReal answers every call of an action; a call of another tool (which validation
  stops first) gets an error result.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from simworld.data.envs.search import (
    DEFAULT_TOP_K,
    RULES,
    SEARCH_TOOL,
    TOOL_NAME,
    hits_json,
    instruction,
    result_text,
    salvage_hits,
)
from simworld.data.records import (
    JSON,
    Action,
    Observation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.data.search_corpus import BM25Index, Corpus, Hit, load_corpus, terms
from simworld.simulators.env import Answer, SimEnv, SimTask
from simworld.simulators.validation import DefaultStyle

CORPUS_VARIABLE = "SIMWORLD_SEARCH_CORPUS"
TASK_ID = "search"
MAX_STEPS = 10


class SearchReal:
    """BM25 as the env's real backend: exact, deterministic, and cheap or dear by query."""

    def __init__(self, index: BM25Index) -> None:
        self.index = index

    def execute(self, state: JSON, action: Action) -> Answer:
        if not isinstance(action, ToolCallsAction):
            raise ValueError(f"the search env takes tool calls, not a {action.kind} action")
        results = []
        for call in action.calls:
            arguments = call.arguments or {}
            query = arguments.get("query")
            if call.name != TOOL_NAME or not isinstance(query, str):
                error = json.dumps({"error": f"invalid call of '{call.name}'"})
                results.append(ToolResult(call.id, error, json.loads(error), is_error=True))
                continue
            top_k = arguments.get("top_k", DEFAULT_TOP_K)
            hits = self.index.search(query, int(top_k))
            results.append(ToolResult(call.id, result_text(hits), hits_json(hits)))
        return Answer(ToolResultsObservation(results))

    def cost(self, state: JSON, action: Action) -> float:
        """The postings BM25 reads for the action's searches, over the passage count."""
        if not isinstance(action, ToolCallsAction):
            return 0.0
        reads = 0
        for call in action.calls:
            query = (call.arguments or {}).get("query")
            reads += self.index.postings(query) if isinstance(query, str) else 0
        return reads / len(self.index.passages)


class SearchGrounder:
    """Grounds a model's search answers in the corpus (`SimEnv.ground`): the model names
    the passages, the corpus supplies them. Each hit the model wrote (read leniently, so
    an answer cut at its token bound still counts: `salvage_hits`) becomes the corpus
    passage with its id, else one with its title (of several, the one sharing the most
    words with the text the model wrote; ties: corpus order), with the model's score, or
    where the model wrote none that reads, that passage's own BM25 score for the query
    (one passage scored, nothing ranked). A hit matching no passage, one naming a passage
    already given, and hits past the call's top_k are left out, each named in the
    problems. A call whose answer holds no hit that can be placed (and is not `[]`) cannot
    be grounded: then the model's answer stands as it is (None)."""

    def __init__(self, index: BM25Index) -> None:
        self.index = index
        self._by_id = {p.id: i for i, p in enumerate(index.passages)}
        self._by_title: dict[str, list[int]] = {}
        for i, p in enumerate(index.passages):
            self._by_title.setdefault(p.title, []).append(i)

    def __call__(
        self, action: Action, observation: Observation | None, text: str
    ) -> tuple[Observation, list[str]] | None:
        if not isinstance(action, ToolCallsAction):
            return None
        written = observation.results if isinstance(observation, ToolResultsObservation) else []
        if len(written) < len(action.calls) and not (len(action.calls) == 1 and text):
            return None
        results: list[ToolResult] = []
        problems: list[str] = []
        for i, call in enumerate(action.calls):
            answer = written[i].text if i < len(written) else text
            hits = self._hits(call, answer, problems)
            if hits is None:
                return None
            results.append(ToolResult(call.id, result_text(hits), hits_json(hits)))
        return ToolResultsObservation(results), problems

    def _hits(self, call: ToolCall, answer: str, problems: list[str]) -> list[Hit] | None:
        arguments = call.arguments or {}
        query, top_k = arguments.get("query"), arguments.get("top_k", DEFAULT_TOP_K)
        if call.name != TOOL_NAME or not isinstance(query, str) or not isinstance(top_k, int):
            return None
        named = salvage_hits(answer)
        if not named:
            return [] if answer.strip() == "[]" else None
        hits: list[Hit] = []
        given: set[int] = set()
        for n, hit in enumerate(named):
            where = f"hit {n} of {call.id!r}"
            if len(hits) == top_k:
                problems.append(f"{where} and later: past top_k {top_k}, left out")
                break
            place = self._place(hit)
            if place is None:
                problems.append(f"{where}: no corpus passage has its id or title, left out")
                continue
            if place in given:
                again = self.index.passages[place].id
                problems.append(f"{where}: passage {again!r} again, left out")
                continue
            given.add(place)
            score = hit.get("score")
            if not isinstance(score, int | float) or isinstance(score, bool):
                score = self.index.score(query, place)
            hits.append(Hit(self.index.passages[place], float(score)))
        if not hits:
            return None
        return hits

    def _place(self, hit: dict[str, JSON]) -> int | None:
        """The corpus index of the passage a written hit names, or None."""
        named_id, title = hit.get("id"), hit.get("title")
        if isinstance(named_id, str) and named_id in self._by_id:
            return self._by_id[named_id]
        if not isinstance(title, str) or title not in self._by_title:
            return None
        candidates = self._by_title[title]
        written = set(terms(str(hit.get("text", ""))))
        shared = [len(written & set(terms(self.index.passages[i].text))) for i in candidates]
        return candidates[shared.index(max(shared))]


def build_search_env(corpus: Corpus) -> SimEnv:
    """The search SimEnv over `corpus`, with BM25 over it as the real backend and the
    corpus grounding the model's answers."""
    index = BM25Index(corpus.passages)
    task = SimTask(
        id=TASK_ID, instruction=instruction(corpus), initial_state=None, tools=(SEARCH_TOOL,)
    )
    return SimEnv(
        name="search",
        tasks={task.id: task},
        action_kind="tool_calls",
        rules=RULES,
        max_steps=MAX_STEPS,
        real=SearchReal(index),
        ground=SearchGrounder(index),
        error_style=DefaultStyle(),
    )


@functools.cache
def search_env(corpus: str | None = None) -> SimEnv:
    """The search SimEnv over the JSONL corpus `corpus` (None: SIMWORLD_SEARCH_CORPUS, else
    the pydoc demo corpus); built once per process and path."""
    path = corpus if corpus is not None else os.environ.get(CORPUS_VARIABLE) or None
    return build_search_env(load_corpus(None if path is None else Path(path)))


__all__ = [
    "CORPUS_VARIABLE",
    "MAX_STEPS",
    "TASK_ID",
    "SearchGrounder",
    "SearchReal",
    "build_search_env",
    "search_env",
]
