"""The search corpus and its real env: passage cutting, JSONL loading with line-numbered
errors, BM25 against hand-computed scores, the query splits, and the recorder's records.

    python -m pytest -q tests/data/test_search_corpus.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simworld.data.envs import load_env
from simworld.data.envs.search import SEARCH_TOOL, SearchEnv
from simworld.data.formats import write_episodes
from simworld.data.records import ToolCallsAction, ToolResultsObservation
from simworld.data.search_corpus import (
    SPLITS,
    BM25Index,
    CorpusError,
    Passage,
    cut_words,
    load_corpus,
    make_needs,
    pydoc_corpus,
    query_set,
    split_of,
    terms,
)

FRUIT = (
    Passage("a-0", "", "apple banana"),
    Passage("b-0", "", "apple apple cherry"),
    Passage("c-0", "", "cherry date"),
)


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sentences_are_packed_and_long_ones_cut_at_words() -> None:
    text = "One two three. Four five six seven. Eight."
    assert cut_words(text, 4) == ["One two three.", "Four five six seven.", "Eight."]
    assert cut_words(text, 8) == ["One two three. Four five six seven. Eight."]
    assert cut_words("a b c d e f g h i j", 4) == ["a b c d", "e f g h", "i j"]


def test_bm25_matches_hand_computed_scores() -> None:
    index = BM25Index(FRUIT)
    # N=3, lengths 2, 3, 2 (mean 7/3), k1=1.2, b=0.75.
    # banana: df 1, idf ln(1 + 2.5/1.5) = 0.98083; A: tf 1, K = 1.2 (0.25 + 0.75 * 2/(7/3))
    # = 1.07143, score 0.98083 * 2.2 / 2.07143 = 1.0417.
    idf = math.log(1 + 2.5 / 1.5)
    assert index.idf("banana") == pytest.approx(idf)
    assert [(h.passage.id, h.score) for h in index.search("banana", 3)] == [("a-0", 1.04)]
    # apple: df 2, idf ln(1.6) = 0.47000; B: tf 2, K = 1.2 (0.25 + 0.75 * 3/(7/3)) = 1.45714,
    # 0.47 * 2 * 2.2 / 3.45714 = 0.5982; A: 0.47 * 2.2 / 2.07143 = 0.4992.
    assert [(h.passage.id, h.score) for h in index.search("apple", 3)] == [
        ("b-0", 0.6),
        ("a-0", 0.5),
    ]
    assert [h.passage.id for h in index.search("the APPLE", 1)] == ["b-0"]  # stopword, case
    assert index.search("zebra", 3) == []
    assert index.postings("apple cherry apple") == 4  # each distinct term's postings once
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        index.search("apple", 0)


def test_equal_scores_keep_corpus_order() -> None:
    twins = [Passage(f"t-{i}", "", "same words here") for i in range(4)]
    hits = BM25Index(twins).search("words", 3)
    assert [h.passage.id for h in hits] == ["t-0", "t-1", "t-2"]
    assert len({h.score for h in hits}) == 1


def test_jsonl_corpus_reads_ids_titles_and_search_r1_contents(tmp_path: Path) -> None:
    rows = [
        {"id": "doc", "title": "Doc", "text": "First sentence here. Second one there."},
        {"contents": '"Quoted Title"\nBody of the second document.'},
        {"id": 7, "contents": "No title line at all."},
    ]
    corpus = load_corpus(write_jsonl(tmp_path / "c.jsonl", rows), words=8)
    got = [(p.id, p.title, p.text) for p in corpus.passages]
    assert got == [
        ("doc-0", "Doc", "First sentence here. Second one there."),
        ("2-0", "Quoted Title", "Body of the second document."),
        ("7-0", "", "No title line at all."),
    ]
    assert corpus.passages[1].contents == '"Quoted Title"\nBody of the second document.'


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"text": "ok"}', "{not json"], r"c.jsonl:2: not JSON"),
        (['{"text": "ok"}', "", '{"title": "t"}'], r"c.jsonl:3: expected a non-empty string"),
        (['["a list"]'], r"c.jsonl:1: expected a JSON object"),
        (['{"id": true, "text": "x"}'], r'c.jsonl:1: "id" must be a string or an integer'),
        (['{"id": "x", "text": "a"}', '{"id": "x", "text": "b"}'], "'x' occurs twice"),
        ([""], "no document with any text"),
    ],
)
def test_bad_corpus_lines_are_named(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorpusError, match=message):
        load_corpus(path)


def test_the_demo_corpus_is_pythons_pydoc_topics_in_short_passages() -> None:
    corpus = pydoc_corpus()
    ids = [p.id for p in corpus.passages]
    assert len(ids) == len(set(ids)) > 1000
    assert all(1 <= len(p.text.split()) <= 40 for p in corpus.passages)
    first_for = next(p for p in corpus.passages if p.id == "for-0")
    assert first_for.title == 'The "for" statement' and "for" in first_for.text
    assert "Python 3." in corpus.version


def test_query_splits_are_disjoint_and_need_the_asked_split() -> None:
    corpus = pydoc_corpus()
    index = BM25Index(corpus.passages)
    sets = {s: set(query_set(make_needs(corpus, index, s))) for s in SPLITS}
    assert all(sets.values())
    assert not sets["train"] & sets["test"] and not sets["train"] & sets["val"]
    assert not sets["val"] & sets["test"]
    assert all(split_of(q) == "test" for q in sets["test"])
    assert split_of("Yield Expressions!") == split_of("yield expressions")  # by normalized text
    assert len(sets["train"]) > 5 * len(sets["test"])  # about 80 / 10 / 10
    for need in make_needs(corpus, index, "test")[:50]:
        assert all(terms(q) for q in need.queries)


def test_record_is_byte_reproducible_and_logs_bm25(tmp_path: Path) -> None:
    env = load_env("search", split="test", top_k=2)
    assert isinstance(env, SearchEnv)
    paths = [tmp_path / f"{n}.jsonl" for n in range(3)]
    write_episodes(env.record(5, seed=3), paths[0])
    write_episodes(load_env("search", split="test", top_k=2).record(5, seed=3), paths[1])
    write_episodes(env.record(5, seed=4), paths[2])
    assert paths[0].read_bytes() == paths[1].read_bytes() != paths[2].read_bytes()
    episode = next(iter(env.record(1, seed=3)))
    assert episode.tools == [SEARCH_TOOL] and episode.task.id.startswith("search-test-")
    for step in episode.steps:
        assert isinstance(step.action, ToolCallsAction)
        assert isinstance(step.observation, ToolResultsObservation)
        arguments = step.action.calls[0].arguments or {}
        assert split_of(arguments["query"]) == "test" and arguments["top_k"] == 2
        hits = env.index.search(arguments["query"], 2)
        assert step.observation.results[0].structured == [
            {"id": h.passage.id, "title": h.passage.title, "text": h.passage.text, "score": h.score}
            for h in hits
        ]
    with pytest.raises(ValueError, match="information needs; ask for at most"):
        next(iter(env.record(10**6, seed=0)))


def test_record_takes_a_user_corpus_and_refuses_bad_options(tmp_path: Path) -> None:
    rows = [
        {"id": f"d{i}", "title": f"Topic {i}", "text": f"alpha{i} beta{i} gamma"} for i in range(40)
    ]
    env = load_env("search", corpus=str(write_jsonl(tmp_path / "c.jsonl", rows)))
    episodes = list(env.record(None, seed=0))
    assert episodes and all(e.provenance.version.startswith("c.jsonl") for e in episodes)
    with pytest.raises(ValueError, match="split must be one of"):
        load_env("search", split="dev")
    with pytest.raises(ValueError, match="top_k must be an integer from 1 to 10"):
        load_env("search", top_k=0)
