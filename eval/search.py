"""Simulated against real search: how close the world model's passages are to the BM25
retriever's on held-out queries, and who answers (cache, real, model) when the router runs
over them. `simworld bench search` prints and saves both.

    simworld bench search --model out/search/wm --split test --limit 300 --json f.json

    from simworld.eval.search import passage_scores
    passage_scores(simulated_hits, real_hits, encoder)   # one dict of scores per query

Per query (real hits R, simulated hits S, each a list of {"id", "title", "text", "score"};
S is None when the model's answer could not be read, and then scores 0 everywhere):
- `rank_cosine`: the mean over R's ranks of the embedding cosine (all-MiniLM-L6-v2) of the
  passage S has at that rank with R's (a rank S lacks scores 0);
- `best_cosine`: the mean over R's passages of their best cosine with any of S (order-free);
- `content_overlap`: the share of R's passages whose text S returns verbatim (whitespace
  collapsed), whatever the id; `id_overlap`: the share of R's ids that S returns;
- `token_f1`: the F1 of S's and R's word bags (title and text);
- `verbatim`: the share of S's passages that are verbatim passages of the corpus.
A passage is embedded as its contents, `"Title"\\ntext`. Where R is empty, every score is 1
when S is empty too, else 0. Rows: `model` scores the answers as served (an answer whose
JSON does not parse is unreadable: 0), which for an env that grounds model answers
(search: `SearchGrounder`, each passage the model names taken from the corpus) are the
grounded ones; `model_ungrounded` scores the answers as the model wrote them
(`RouterConfig(ground=False)`, a second run over the same queries); `model_salvaged`
scores the passages an ungrounded answer still holds where its JSON is broken
(`salvage`: its "id", "title", "text" and "score" read one by one), i.e. what the model
writes apart from its JSON slips; `random` scores k seeded random corpus
passages the same way: what unrelated passages of the same corpus reach (the floor). A model
trained with example blocks (`--example-tokens`) adds `nearest_recorded`: the hits of the
recorded train step its memory retrieves for the query (the step its example block shows),
grounded like the model's answers: what lookup alone reaches, the bar such a model has to
clear. With it comes `against_lookup` (`top_against_lookup`): over the queries, how often
the model's top passage (as served) is the lookup's, and how often that is the real top
one; where they differ, how often the model is right, the lookup is right, or neither.

Shares: a fresh router with `RouterConfig(max_real_cost=C)` over the held-out queries, each
a one-call session of the env's task, the whole list `passes` times (RL rollouts repeat
prompts): the share of answers from the cache, the real backend and the model, per pass.
The similarity run uses its own router with the real backend off (every answer the model's
or, for a query asked twice, the cache's); its answers never reach the shares run.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simworld.data.envs.search import hits_json, salvage_hits, search_call
from simworld.data.envs.seeding import derive_seed
from simworld.data.records import Episode, Task, ToolCallsAction, ToolResultsObservation
from simworld.data.search_corpus import (
    SPLITS,
    BM25Index,
    Hit,
    load_corpus,
    make_needs,
    query_set,
    terms,
)
from simworld.eval.embedding import Encoder
from simworld.simulators.env import SimEnv
from simworld.simulators.envs.search import TASK_ID, build_search_env
from simworld.simulators.router import Router, RouterConfig
from simworld.worldmodel.retrieval import Retriever
from simworld.worldmodel.world_model import WorldModel

Hits = list[dict[str, Any]]
ROWS = ("model", "model_ungrounded", "model_salvaged", "nearest_recorded", "random")
SCORES = ("rank_cosine", "best_cosine", "content_overlap", "id_overlap", "token_f1", "verbatim")
Handler = Callable[[argparse.Namespace], int]


# ---------------------------------------------------------------------------- metrics


def _contents(hit: dict[str, Any]) -> str:
    return f'"{hit.get("title", "")}"\n{hit.get("text", "")}'


def _flat(text: str) -> str:
    return " ".join(str(text).split())


def _f1(pred: Counter[str], real: Counter[str]) -> float:
    common = sum((pred & real).values())
    if common == 0:
        return 1.0 if not pred and not real else 0.0
    precision, recall = common / sum(pred.values()), common / sum(real.values())
    return 2 * precision * recall / (precision + recall)


def passage_scores(
    simulated: Sequence[Hits | None],
    real: Sequence[Hits],
    encoder: Encoder,
    corpus_texts: frozenset[str] = frozenset(),
) -> list[dict[str, float]]:
    """The module docstring's scores, one dict per query (parallel sequences)."""
    if len(simulated) != len(real):
        raise ValueError(f"{len(simulated)} simulated results for {len(real)} real ones")
    texts = sorted({_contents(h) for hits in (*real, *(s or [] for s in simulated)) for h in hits})
    row = {text: i for i, text in enumerate(texts)}
    vectors = encoder.encode(texts) if texts else np.zeros((0, 1), dtype=np.float32)  # (T, d)
    out = []
    for sim, ref in zip(simulated, real, strict=True):
        if not ref:
            same = 1.0 if sim is not None and not sim else 0.0
            out.append(dict.fromkeys(SCORES, same))
            continue
        sim = sim or []
        r_vec = vectors[[row[_contents(h)] for h in ref]]  # (R, d)
        s_vec = vectors[[row[_contents(h)] for h in sim]] if sim else np.zeros((0, r_vec.shape[1]))
        cos = r_vec @ s_vec.T  # (R, S), rows L2-normalised
        ranked = [float(cos[i, i]) if i < len(sim) else 0.0 for i in range(len(ref))]
        best = cos.max(axis=1) if sim else np.zeros(len(ref))
        sim_texts = {_flat(h.get("text", "")) for h in sim}
        sim_ids = {str(h.get("id")) for h in sim}
        words = (Counter(terms(" ".join(_contents(h) for h in hits))) for hits in (sim, ref))
        out.append(
            {
                "rank_cosine": sum(ranked) / len(ref),
                "best_cosine": float(best.mean()),
                "content_overlap": sum(_flat(h["text"]) in sim_texts for h in ref) / len(ref),
                "id_overlap": sum(h["id"] in sim_ids for h in ref) / len(ref),
                "token_f1": _f1(*words),
                "verbatim": (
                    sum(_flat(h.get("text", "")) in corpus_texts for h in sim) / len(sim)
                    if sim
                    else 0.0
                ),
            }
        )
    return out


def mean_scores(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each score's mean over the queries (0.0 for none)."""
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) if rows else 0.0 for k in SCORES}


# ---------------------------------------------------------------------------- routing


def _history(env: SimEnv) -> Episode:
    """A fresh session's episode as the server starts one: the task, its tools and the env's
    rules (prompts read as they do when served, and as the recorded logs read)."""
    task = env.tasks[TASK_ID]
    return Episode(
        "bench",
        env.name,
        Task(task.id, task.instruction),
        [],
        list(task.tools),
        rules=list(env.rules),
    )


@dataclass(frozen=True)
class Asked:
    """One search's answer: the hits (None when the result is not a list of objects), who
    answered, and the result text as given."""

    hits: Hits | None
    source: str
    text: str


def _one_search(query: str, top_k: int) -> ToolCallsAction:
    """A held-out query as the one-call action of a fresh session."""
    return ToolCallsAction([search_call("call_0_0", query, top_k)])


def _hits(observation: object) -> Hits | None:
    """The hits of a search's observation: its first result's JSON list of objects; None
    when there is none, it is an error, or it does not read as such a list."""
    if not isinstance(observation, ToolResultsObservation) or not observation.results:
        return None
    result = observation.results[0]
    try:
        hits = json.loads(result.text)
    except ValueError:
        return None
    readable = not result.is_error and isinstance(hits, list)
    return hits if readable and all(isinstance(h, dict) for h in hits) else None


def ask(router: Router, query: str, top_k: int, seed: int) -> Asked:
    """One search through `router` as a fresh one-call session."""
    routed = router.answer(_history(router.env), None, _one_search(query, top_k), seed)
    observation = routed.answer.observation
    assert isinstance(observation, ToolResultsObservation)
    return Asked(_hits(observation), routed.source, observation.results[0].text)


def nearest_recorded(memory: Retriever, env: SimEnv, query: str, top_k: int) -> Hits | None:
    """The hits of the recorded step `memory` retrieves for `query` asked alone (as `ask`
    asks it: no previous observation), grounded as the env grounds a model's answer (a
    memory recorded without passage texts gets them from the corpus, as the model does);
    None when nothing is retrieved or it is unreadable."""
    action = _one_search(query, top_k)
    found = memory.neighbour(env.name, action, "")
    if found is None:
        return None
    observation = found.observation
    if env.ground is not None and isinstance(observation, ToolResultsObservation):
        grounded = env.ground(action, observation, observation.results[0].text)
        if grounded is not None:
            observation = grounded[0]
    return _hits(observation)


def top_against_lookup(
    model: Sequence[Hits | None], lookup: Sequence[Hits | None], real: Sequence[Hits]
) -> dict[str, int]:
    """Per query, the first hit's id of the model's answer and of the lookup's against the
    real first hit's (an unreadable or empty answer has none): `same` (of which
    `same_right` are the real top passage), and where they differ `model_right`,
    `lookup_right` or `neither`."""
    counts = dict.fromkeys(("same", "same_right", "model_right", "lookup_right", "neither"), 0)
    for m, lk, r in zip(model, lookup, real, strict=True):
        top_m, top_l = (h[0].get("id") if h else None for h in (m, lk))
        top_r = r[0].get("id") if r else None
        if top_m == top_l:
            counts["same"] += 1
            counts["same_right"] += top_m == top_r
        else:
            key = (
                "model_right" if top_m == top_r else "lookup_right" if top_l == top_r else "neither"
            )
            counts[key] += 1
    return counts


def salvage(text: str) -> Hits:
    """The passages a result text holds even where its JSON is broken (`salvage_hits`),
    each with the fields it lacks empty (score 0.0)."""
    return [{"id": "", "title": "", "text": "", "score": 0.0, **h} for h in salvage_hits(text)]


def route_shares(
    env: SimEnv, model: WorldModel, queries: Sequence[str], top_k: int, config: RouterConfig,
    passes: int,
) -> list[dict[str, float]]:  # fmt: skip
    """Per pass over `queries`: the share of answers by source (a fresh router)."""
    router = Router(env, model, config)
    rows = []
    for p in range(passes):
        sources = Counter(
            ask(router, q, top_k, derive_seed("bench-search", p, q)).source for q in queries
        )
        total = max(sum(sources.values()), 1)
        rows.append({s: round(sources[s] / total, 4) for s in ("cache", "real", "model")})
    return rows


# ---------------------------------------------------------------------------- the bench


@dataclass(frozen=True)
class SearchBenchConfig:
    """One `simworld bench search` run (see the module docstring)."""

    model: str = "default"
    corpus: str | None = None  # a JSONL corpus; None: the pydoc demo corpus
    split: str = "test"
    top_k: int = 1
    limit: int | None = None  # the first N held-out queries (seeded order)
    max_real_cost: float = 0.1
    passes: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {self.split!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be at least 1 (or None), got {self.limit}")
        if self.passes < 1:
            raise ValueError(f"passes must be at least 1, got {self.passes}")


def run_search_bench(
    cfg: SearchBenchConfig, model: WorldModel, encoder: Encoder, env: SimEnv | None = None
) -> dict[str, Any]:
    """The similarity and shares figures for `model` on the held-out queries of `cfg`."""
    corpus = load_corpus(cfg.corpus)
    index = BM25Index(corpus.passages)
    env = env or build_search_env(corpus)
    queries = query_set(make_needs(corpus, index, cfg.split))
    random.Random(derive_seed("bench-search", cfg.seed)).shuffle(queries)
    queries = queries[: cfg.limit]
    real = [hits_json(index.search(q, cfg.top_k)) for q in queries]
    runs = {}
    for ground in (True, False) if env.ground is not None else (True,):
        started = time.perf_counter()
        simulator = Router(env, model, RouterConfig(ground=ground))
        asked = [ask(simulator, q, cfg.top_k, derive_seed("bench-search", q)) for q in queries]
        runs[ground] = (asked, (time.perf_counter() - started) / max(len(queries), 1))
    asked, seconds = runs[True]
    written, written_seconds = runs[False] if False in runs else runs[True]
    simulated = [a.hits for a in asked]
    salvaged = [a.hits if a.hits is not None else salvage(a.text) for a in written]
    rng = random.Random(derive_seed("bench-search-random", cfg.seed))
    floor = [
        hits_json([Hit(p, 0.0) for p in rng.sample(corpus.passages, cfg.top_k)]) for _ in queries
    ]
    texts = frozenset(_flat(p.text) for p in corpus.passages)
    config = RouterConfig(max_real_cost=cfg.max_real_cost)
    rows: dict[str, Sequence[Hits | None]] = {"model": simulated}
    if False in runs:
        rows["model_ungrounded"] = [a.hits for a in written]
    rows |= {"model_salvaged": salvaged, "random": floor}
    memory = getattr(model, "memory", None)
    extra: dict[str, Any] = {}
    if isinstance(memory, Retriever):
        rows["nearest_recorded"] = [nearest_recorded(memory, env, q, cfg.top_k) for q in queries]
        extra["against_lookup"] = top_against_lookup(simulated, rows["nearest_recorded"], real)
    return {
        "config": asdict(cfg),
        "corpus": corpus.version,
        "queries": len(queries),
        **{
            row: mean_scores(passage_scores(hits, real, encoder, texts))
            for row, hits in rows.items()
        },
        "unreadable": sum(s is None for s in simulated),
        "unreadable_ungrounded": sum(a.hits is None for a in written),
        "model_seconds_per_query": round(seconds, 4),
        "ungrounded_seconds_per_query": round(written_seconds, 4),
        "shares": route_shares(env, model, queries, cfg.top_k, config, cfg.passes),
        **extra,
    }


def render(report: dict[str, Any]) -> str:
    """The report as a small Markdown table."""
    lines = [
        f"{report['queries']} held-out queries ({report['config']['split']}), "
        f"top_k {report['config']['top_k']}, {report['corpus']}",
        "",
        "| answers | " + " | ".join(SCORES) + " |",
        "|---|" + "---|" * len(SCORES),
    ]
    for row in (r for r in ROWS if r in report):
        lines.append(f"| {row} | " + " | ".join(f"{report[row][k]:.3f}" for k in SCORES) + " |")
    lines += ["", f"unreadable model answers: {report['unreadable']} as served"]
    if "model_ungrounded" in report:
        lines[-1] += f", {report['unreadable_ungrounded']} as written (ungrounded)"
    if "against_lookup" in report:
        c = report["against_lookup"]
        lines.append(
            f"top passage against nearest_recorded: the same on {c['same']} queries "
            f"({c['same_right']} the real top one); where they differ, the model right "
            f"{c['model_right']}, the lookup right {c['lookup_right']}, neither {c['neither']}"
        )
    lines += [""]
    cost = report["config"]["max_real_cost"]
    lines += [f"router shares (max_real_cost {cost}):", "| pass | cache | real | model |"]
    lines.append("|---|---|---|---|")
    for i, share in enumerate(report["shares"], start=1):
        lines.append(f"| {i} | {share['cache']:.3f} | {share['real']:.3f} | {share['model']:.3f} |")
    return "\n".join(lines)


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """`simworld bench search`'s arguments and its handler."""
    if command != "bench search":
        raise ValueError(f"unknown eval benchmark command {command!r}")
    parser.description = "Simulated against real search on held-out queries, and router shares."
    add, defaults = parser.add_argument, SearchBenchConfig()
    add("--model", default=defaults.model, help='a checkpoint directory (or "default")')
    add("--corpus", help="a JSONL corpus (default: the pydoc demo corpus)")
    add("--split", default=defaults.split, choices=SPLITS, help="the held-out queries")
    add("--top-k", type=int, default=defaults.top_k, help="passages per search")
    add("--limit", type=int, help="the first N held-out queries (seeded order)")
    add("--max-real-cost", type=float, default=defaults.max_real_cost, help="router threshold")
    add("--passes", type=int, default=defaults.passes, help="passes over the queries")
    add("--seed", type=int, default=defaults.seed)
    add("--json", type=Path, metavar="FILE", help="also write the report here")
    return _bench


def _bench(args: argparse.Namespace) -> int:
    from simworld.eval.embedding import load_encoder
    from simworld.worldmodel.world_model import load_world_model

    try:
        cfg = SearchBenchConfig(
            args.model, args.corpus, args.split, args.top_k, args.limit,
            args.max_real_cost, args.passes, args.seed,
        )  # fmt: skip
        model = load_world_model(cfg.model)
        report = run_search_bench(cfg, model, load_encoder())
    except (ValueError, OSError) as exc:
        print(f"simworld bench search: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


__all__ = [
    "SCORES",
    "Asked",
    "SearchBenchConfig",
    "ask",
    "configure",
    "mean_scores",
    "nearest_recorded",
    "passage_scores",
    "render",
    "route_shares",
    "run_search_bench",
    "salvage",
]
