"""Simulated against real search (eval/search.py): the passage scores on hand-computed
cases, the router shares per pass, and the bench end to end on a small corpus.

    python -m pytest -q tests/eval/test_search_eval.py
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from corpora import corpus_file
from numpy.typing import NDArray
from scripted import ScriptedModel

from simworld.data.envs.search import SearchEnv, search_call
from simworld.data.records import ToolCallsAction, ToolResult, ToolResultsObservation
from simworld.data.search_corpus import BM25Index, load_corpus, make_needs, query_set
from simworld.eval.search import (
    SCORES,
    SearchBenchConfig,
    ask,
    mean_scores,
    nearest_recorded,
    passage_scores,
    render,
    route_shares,
    run_search_bench,
    salvage,
    top_against_lookup,
)
from simworld.simulators.envs.search import TASK_ID, build_search_env
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import Session
from simworld.training.data import drop_fields_in_memory
from simworld.worldmodel.context import Context
from simworld.worldmodel.render import format_target, render_prompt
from simworld.worldmodel.retrieval import Retriever, recorded_steps


class WordEncoder:
    """One dimension per word of `vocabulary` (counts, L2-normalised): cosines by hand."""

    def __init__(self, vocabulary: Sequence[str]) -> None:
        self.vocabulary = list(vocabulary)

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        rows = np.zeros((len(texts), len(self.vocabulary)), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.replace('"', " ").split():
                if word in self.vocabulary:
                    rows[i, self.vocabulary.index(word)] += 1
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms == 0, 1, norms)


def made_passage(ctx: Context, attempt: int) -> str:
    """One made-up passage naming the query: a world model's answer to every search."""
    action = ctx.action_record
    assert isinstance(action, ToolCallsAction)
    query = (action.calls[0].arguments or {})["query"]
    hit = [{"id": "made-0", "title": "T", "text": f"about {query}", "score": 1.0}]
    return format_target(ToolResultsObservation([ToolResult("call_0_0", json.dumps(hit))]), None)


class PassageModel(ScriptedModel):
    """`made_passage` for every search; `memory`, when set, gives the bench its
    nearest_recorded row."""

    def __init__(self) -> None:
        super().__init__(made_passage)
        self.memory: Retriever | None = None


def hit(pid: str, text: str) -> dict[str, Any]:
    return {"id": pid, "title": "T", "text": text, "score": 1.0}


A, B = hit("a", "x y"), hit("b", "x z")
ENCODER = WordEncoder(["T", "x", "y", "z", "w"])
# Contents are '"T"\n<text>': A = (T, x, y), B = (T, x, z), so cos(A, B) = 2/3.


def test_scores_on_hand_computed_cases() -> None:
    corpus = frozenset({"x y", "x z"})
    real = [[A, B], [A, B], [A, B], [], []]
    sim = [[A], [B, A], None, [], [A]]
    rows = passage_scores(sim, real, ENCODER, corpus)
    assert rows[0]["rank_cosine"] == pytest.approx(0.5, abs=1e-6)  # (1 + missing 0) / 2
    assert rows[0]["best_cosine"] == pytest.approx((1 + 2 / 3) / 2, abs=1e-6)
    assert rows[0]["content_overlap"] == rows[0]["id_overlap"] == 0.5
    assert rows[0]["verbatim"] == 1.0
    # words without stopwords: sim {t, x, y}, real {t, x, y, t, x, z}: 3 common of 3 and 6
    assert rows[0]["token_f1"] == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert rows[1]["rank_cosine"] == pytest.approx(2 / 3, abs=1e-6)  # float32 embeddings
    assert rows[1]["best_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert rows[1]["content_overlap"] == 1.0 and rows[1]["token_f1"] == 1.0
    assert rows[2] == dict.fromkeys(SCORES, 0.0)  # unreadable
    assert rows[3] == dict.fromkeys(SCORES, 1.0) and rows[4] == dict.fromkeys(SCORES, 0.0)
    made_up = passage_scores([[hit("q", "w y")]], [[A]], ENCODER, corpus)[0]
    assert made_up["verbatim"] == 0.0 and made_up["id_overlap"] == 0.0
    assert made_up["rank_cosine"] == pytest.approx(2 / 3, abs=1e-6)  # (T, w, y) against (T, x, y)
    assert mean_scores(rows[:2])["content_overlap"] == 0.75
    with pytest.raises(ValueError, match="1 simulated results for 2 real ones"):
        passage_scores([[A]], [[A], [B]], ENCODER)


def test_top_passages_against_the_lookups_by_hand() -> None:
    real = [[A], [A], [A], [A], [A], [B]]
    model = [[A, B], [B], [A], None, [B], []]
    lookup = [[A], [B], [B], [A], [hit("c", "w")], []]
    assert top_against_lookup(model, lookup, real) == {
        "same": 3,  # A and A (right), B and B (wrong), nothing and nothing (B is real)
        "same_right": 1,
        "model_right": 1,  # A against B
        "lookup_right": 1,  # unreadable against A
        "neither": 1,  # B against c
    }
    with pytest.raises(ValueError):
        top_against_lookup([[A]], [], [[A]])


def test_salvage_reads_the_passages_of_broken_json() -> None:
    broken = '[{"id":"a-1","title":"T","text":"say \\"hi\\"","score":7. oops},{"id":"b-2","text":"x'
    assert salvage(broken) == [
        {"id": "a-1", "title": "T", "text": 'say "hi"', "score": 0.0},
        {"id": "b-2", "title": "", "text": "", "score": 0.0},  # its text never closes
    ]
    assert salvage('[{"title":"T"}]') == [{"id": "", "title": "T", "text": "", "score": 0.0}]
    assert salvage("nothing here") == []


def test_shares_per_pass_come_from_running_the_router(tmp_path: Path) -> None:
    env = build_search_env(load_corpus(corpus_file(tmp_path)))
    model = PassageModel()
    # alpha7 reads 1 posting of 60, oak 60 of 60: only the first is cheap enough.
    shares = route_shares(env, model, ["alpha7", "oak"], 1, RouterConfig(max_real_cost=0.1), 2)
    assert shares == [
        {"cache": 0.0, "real": 0.5, "model": 0.5},
        {"cache": 0.5, "real": 0.5, "model": 0.0},
    ]
    assert model.asked == 1


def test_the_bench_reports_model_random_and_shares(tmp_path: Path) -> None:
    cfg = SearchBenchConfig(corpus=str(corpus_file(tmp_path)), split="train", limit=6)
    model = PassageModel()
    report = run_search_bench(cfg, model, ENCODER)
    assert report["queries"] == 6 and report["unreadable"] == 0
    assert report["model"]["verbatim"] == 0.0 and report["model"]["id_overlap"] == 0.0
    assert report["random"]["verbatim"] == 1.0
    assert len(report["shares"]) == 2 and report["shares"][1]["model"] == 0.0
    assert sum(report["shares"][0].values()) == pytest.approx(1.0)
    assert "| model |" in render(report) and "| 2 |" in render(report)
    with pytest.raises(ValueError, match="split must be one of"):
        SearchBenchConfig(split="dev")


def test_a_model_with_a_memory_gets_the_nearest_recorded_row(tmp_path: Path) -> None:
    corpus = str(corpus_file(tmp_path))
    recorded = list(SearchEnv(corpus, split="train").record(None, seed=0))
    model = PassageModel()
    assert "nearest_recorded" not in run_search_bench(
        SearchBenchConfig(corpus=corpus), model, ENCODER
    )
    model.memory = Retriever([r for ep in recorded for r in recorded_steps(ep)])
    # Train queries: each is recorded, so its nearest recorded step is itself, BM25's answer.
    cfg = SearchBenchConfig(corpus=corpus, split="train", limit=6)
    report = run_search_bench(cfg, model, ENCODER)
    assert report["nearest_recorded"]["id_overlap"] == 1.0
    assert report["nearest_recorded"]["content_overlap"] == 1.0
    assert report["model"]["id_overlap"] == 0.0  # the model's own answers are still scored
    assert "| nearest_recorded |" in render(report)
    # the made-up passage is never the lookup's, which is always the real top one here
    assert report["against_lookup"] == {
        "same": 0, "same_right": 0, "model_right": 0, "lookup_right": 6, "neither": 0
    }  # fmt: skip
    assert "where they differ, the model right 0, the lookup right 6" in render(report)
    # A held-out query is never recorded: its neighbour is some train query's step.
    loaded = load_corpus(Path(corpus))
    held_out = query_set(make_needs(loaded, BM25Index(loaded.passages), "test"))[0]
    asked = {s.action.calls[0].arguments["query"] for ep in recorded for s in ep.steps
             if isinstance(s.action, ToolCallsAction)}  # fmt: skip
    assert held_out not in asked
    env = build_search_env(loaded)
    near = nearest_recorded(model.memory, env, held_out, 1)
    assert near is not None and len(near) == 1 and near[0]["id"].startswith("d")
    # A memory recorded without passage texts (a model trained with --drop-result-field
    # text) is grounded like the model's answers: the same passages, verbatim.
    entries = drop_fields_in_memory(model.memory.entries, ["text"])
    assert all('"text"' not in r.observation.results[0].text for r in entries)  # type: ignore[union-attr]
    model.memory = Retriever(entries)
    assert nearest_recorded(model.memory, env, held_out, 1) == near
    report = run_search_bench(cfg, model, ENCODER)
    assert report["nearest_recorded"]["content_overlap"] == 1.0


def naming_answer(ctx: Context, attempt: int) -> str:
    """Names corpus passage d3-0, then writes made-up text cut at its token bound."""
    action = ctx.action_record
    assert isinstance(action, ToolCallsAction)
    return f'{action.calls[0].id} ok [{{"id":"d3-0","title":"Topic 3","text":"made up'


def test_the_bench_asks_with_the_prompt_a_served_session_gives(tmp_path: Path) -> None:
    """The bench's one-call sessions carry the env's rules, as the server's sessions and
    the recorded logs do: a model is measured on the prompts it was trained on."""
    env = build_search_env(load_corpus(corpus_file(tmp_path)))
    seen: list[Context] = []

    def remember(ctx: Context, attempt: int) -> str:
        seen.append(ctx)
        return made_passage(ctx, attempt)

    ask(Router(env, ScriptedModel(remember), RouterConfig()), "alpha7", 1, 0)
    served = Session(env, Router(env, ScriptedModel(remember)), episode_id="s")
    served.reset(TASK_ID)
    served.step(ToolCallsAction([search_call("call_0_0", "alpha7", 1)]))
    assert len(seen) == 2 and "BM25" in seen[0].rules
    assert render_prompt(seen[0]) == render_prompt(seen[1])


def test_the_bench_scores_grounded_and_ungrounded_answers(tmp_path: Path) -> None:
    cfg = SearchBenchConfig(corpus=str(corpus_file(tmp_path)), split="train", limit=4)
    report = run_search_bench(cfg, ScriptedModel(naming_answer), ENCODER)
    # As served, the named passage comes from the corpus; as written, the JSON is broken.
    assert report["unreadable"] == 0 and report["unreadable_ungrounded"] == 4
    assert report["model"]["verbatim"] == 1.0 and report["model_ungrounded"]["verbatim"] == 0.0
    assert report["model_salvaged"]["verbatim"] == 0.0  # "made up" is no corpus text
    assert report["model_seconds_per_query"] > 0 and report["ungrounded_seconds_per_query"] > 0
    text = render(report)
    assert "| model_ungrounded |" in text and "4 as written (ungrounded)" in text


@pytest.mark.slow  # the command imports torch before it finds no checkpoint
def test_bench_command_refuses_a_missing_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simworld.cli import main

    assert main(["bench", "search", "--model", str(tmp_path / "none"), "--limit", "2"]) == 2
    assert capsys.readouterr().err.startswith("simworld bench search: ")


@pytest.mark.slow
def test_real_embeddings_score_bm25_against_itself_as_one(tmp_path: Path) -> None:
    from simworld.eval.embedding import load_encoder

    encoder = load_encoder()
    real = [[A, B], [hit("c", "The for statement iterates over a sequence.")]]
    same = passage_scores(real, real, encoder)
    assert all(row[k] == pytest.approx(1.0, abs=1e-5) for row in same for k in SCORES[:5])
    cfg = SearchBenchConfig(corpus=str(corpus_file(tmp_path)), split="train", limit=4)
    report = run_search_bench(cfg, PassageModel(), encoder)
    assert 0.0 < report["model"]["best_cosine"] < 1.0
    assert 0.0 < report["random"]["best_cosine"] < 1.0
