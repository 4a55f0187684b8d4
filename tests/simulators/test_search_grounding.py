"""Grounding a model's search answers in the corpus (SearchGrounder, the search env's
`ground`): hits by id or title become corpus passages verbatim, broken JSON still counts,
what cannot be placed is named, and the router applies it unless told not to.

    python -m pytest -q tests/simulators/test_search_grounding.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted import ScriptedModel

from simworld.data.envs.search import salvage_hits, search_call
from simworld.data.records import Episode, Task, ToolCallsAction, ToolResult, ToolResultsObservation
from simworld.data.search_corpus import BM25Index, load_corpus
from simworld.simulators.env import SimEnv
from simworld.simulators.envs.search import TASK_ID, SearchGrounder, build_search_env
from simworld.simulators.router import Router, RouterConfig
from simworld.worldmodel.context import Context
from simworld.worldmodel.render import format_target, parse_target

ROWS = [
    {"id": "fruit", "title": "Fruit", "text": "apple banana cherry apple"},
    {"id": "tree", "title": "Trees", "text": "oak apple birch"},
    {"id": "rare", "title": "Rare", "text": "zebra quagga"},
    {"id": "more", "title": "Trees", "text": "willow elm"},
]


@pytest.fixture
def env(tmp_path: Path) -> SimEnv:
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return build_search_env(load_corpus(path))


def grounder(env: SimEnv) -> SearchGrounder:
    assert isinstance(env.ground, SearchGrounder)
    return env.ground


def ground(env: SimEnv, written: str, query: str = "apple", top_k: int = 3) -> object:
    action = ToolCallsAction([search_call("c", query, top_k)])
    observation = ToolResultsObservation([ToolResult("c", written)])
    return grounder(env)(action, observation, f"c ok {written}")


def hits_of(grounded: object) -> list[dict[str, object]]:
    assert isinstance(grounded, tuple)
    observation, _ = grounded
    assert isinstance(observation, ToolResultsObservation)
    hits = json.loads(observation.results[0].text)
    assert observation.results[0].structured == hits
    return list(hits)


def test_a_named_id_becomes_the_corpus_passage_with_the_models_score(env: SimEnv) -> None:
    written = '[{"id":"tree-0","title":"Tres","text":"oak oak oak","score":4.5}]'
    grounded = ground(env, written)
    assert hits_of(grounded) == [
        {"id": "tree-0", "title": "Trees", "text": "oak apple birch", "score": 4.5}
    ]
    assert isinstance(grounded, tuple) and grounded[1] == []


def test_an_unknown_id_with_a_known_title_takes_the_closest_passage_of_it(env: SimEnv) -> None:
    # Two passages are titled "Trees"; the written text shares "elm" with the second only.
    written = '[{"id":"trees-9","title":"Trees","text":"an elm","score":2.0}]'
    assert [h["id"] for h in hits_of(ground(env, written))] == ["more-0"]
    # No words shared: the first of that title, in corpus order.
    written = '[{"id":"trees-9","title":"Trees","text":"nothing","score":2.0}]'
    assert [h["id"] for h in hits_of(ground(env, written))] == ["tree-0"]


def test_broken_json_is_grounded_and_a_missing_score_is_the_passages_bm25(env: SimEnv) -> None:
    cut = '[{"id":"fruit-0","title":"Fruit","text":"apple the mgcer the mgcer the'
    (hit,) = hits_of(ground(env, cut))
    (real,) = grounder(env).index.search("apple", 1)
    assert hit == {"id": "fruit-0", "title": "Fruit", "text": ROWS[0]["text"], "score": real.score}
    assert real.passage.id == "fruit-0"


def test_what_cannot_be_placed_is_left_out_and_named(env: SimEnv) -> None:
    written = json.dumps(
        [
            {"id": "nope-1", "title": "Nope", "text": "x", "score": 3.0},
            {"id": "rare-0", "title": "Rare", "text": "x", "score": 2.0},
            {"id": "rare-0", "title": "Rare", "text": "x", "score": 1.5},
            {"id": "fruit-0", "title": "Fruit", "text": "x", "score": 1.0},
            {"id": "tree-0", "title": "Trees", "text": "x", "score": 0.5},
        ]
    )
    grounded = ground(env, written, top_k=2)
    assert [h["id"] for h in hits_of(grounded)] == ["rare-0", "fruit-0"]
    assert isinstance(grounded, tuple)
    assert grounded[1] == [
        "hit 0 of 'c': no corpus passage has its id or title, left out",
        "hit 2 of 'c': passage 'rare-0' again, left out",
        "hit 4 of 'c' and later: past top_k 2, left out",
    ]


def test_an_answer_without_any_placeable_hit_stands_as_the_model_wrote_it(env: SimEnv) -> None:
    assert ground(env, "the mgcerationce the mgcerationce") is None
    assert ground(env, '[{"id":"made-0","title":"Made","text":"x","score":1.0}]') is None
    assert hits_of(ground(env, "[]")) == []  # the real retriever's answer to unknown words
    # A text action, or a call the model gave no result for, is not grounded either.
    action = ToolCallsAction([search_call("a", "apple", 1), search_call("b", "oak", 1)])
    one = ToolResultsObservation([ToolResult("a", '[{"id":"fruit-0"}]')])
    assert grounder(env)(action, one, "a ok [...]") is None


def test_salvage_reads_fields_in_order_and_only_whole_scores() -> None:
    text = '[{"title":"T","id":"z","score":1},{"title":"Q","id":"w","score":7. oops'
    assert salvage_hits(text) == [
        {"title": "T", "id": "z", "score": 1.0},
        {"title": "Q", "id": "w"},
    ]
    whole = '[{"id":"a","title":"T","text":"x","score":2.5}]'
    assert salvage_hits(whole) == json.loads(whole)
    assert salvage_hits("nothing") == [] and salvage_hits("[]") == []


def test_bm25_scores_one_passage_as_search_ranks_it() -> None:
    corpus = load_corpus(None)
    index = BM25Index(corpus.passages)
    position = {p.id: i for i, p in enumerate(index.passages)}
    for query in ("class definition", "for loop else clause", "import statement relative"):
        hits = index.search(query, 5)
        assert hits and all(index.score(query, position[h.passage.id]) == h.score for h in hits)
    assert index.score("zzzz qqqq", 0) == 0.0


def cut_answer(ctx: Context, attempt: int) -> str:
    """The fruit passage's id, then degenerate text cut at its token bound: a small model's
    typical search answer (README, "Search")."""
    action = ctx.action_record
    assert isinstance(action, ToolCallsAction)
    return f'{action.calls[0].id} ok [{{"id":"fruit-0","title":"Fruit","text":"the mgc the'


def test_the_router_grounds_model_answers_unless_told_not_to(env: SimEnv) -> None:
    task = env.tasks[TASK_ID]
    fresh = Episode("e", env.name, Task(task.id, task.instruction), [], list(task.tools))
    action = ToolCallsAction([search_call("client-7", "banana", 1)])
    model = ScriptedModel(cut_answer)
    routed = Router(env, model, RouterConfig()).answer(fresh, None, action, 0)
    assert routed.source == "model" and routed.problems == [] and routed.retries == 0
    assert model.asked == 1
    observation = routed.answer.observation
    assert isinstance(observation, ToolResultsObservation)
    (result,) = observation.results
    assert result.call_id == "client-7" and not result.is_error
    assert json.loads(result.text)[0]["text"] == ROWS[0]["text"]
    # Off: the cut answer is what the model wrote, its problems reported and retried.
    model = ScriptedModel(cut_answer)
    routed = Router(env, model, RouterConfig(ground=False)).answer(fresh, None, action, 0)
    assert routed.problems and routed.retries == 2 and model.asked == 3
    observation = routed.answer.observation
    assert isinstance(observation, ToolResultsObservation)
    (result,) = observation.results
    assert result.structured is None and result.text.endswith('"text":"the mgc the')


def test_formatted_targets_round_trip_through_grounding(env: SimEnv) -> None:
    hit = [{"id": "rare-0", "title": "Rare", "text": "zebra quagga", "score": 1.25}]
    target = format_target(ToolResultsObservation([ToolResult("c", json.dumps(hit))]), None)
    action = ToolCallsAction([search_call("c", "zebra", 1)])
    parsed = parse_target(target, action)
    grounded = grounder(env)(action, parsed.observation, target)
    assert hits_of(grounded) == hit
