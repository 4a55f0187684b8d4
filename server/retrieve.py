"""The Search-R1 retriever route, `POST /retrieve`, answered by a served search env: what
Search-R1's and SkyRL's search tools call, so an RL run points its retriever URL here.

    curl -s localhost:8000/retrieve -H 'content-type: application/json' \
         -d '{"queries": ["class definition"], "topk": 2, "return_scores": true}'
    -> {"result": [[{"document": {"id": "class-0", "title": "Class definitions",
                                  "contents": "\\"Class definitions\\"\\nA class definition ..."},
                     "score": 7.66}, ...]],
        "sources": ["real"]}

Routes: `POST /retrieve` (the one served env with a `search` tool; with several, name it
in `env`) and `POST /envs/{env}/retrieve`.

Request: `{"queries": [str, ...]}` (Search-R1 and SkyRL) or `{"query": str}` (one query),
exactly one of the two; `topk` (default 3, 1..10); `return_scores` (default false, as in
Search-R1); `env` (which search env, for `/retrieve` only). Unknown fields are refused.

Response: `{"result": [[item, ...] per query], "sources": [source per query]}`. An item is
`{"document": {"id", "title", "contents"}, "score"}`, or `{"document": ...}` alone when
return_scores is false; `contents` is Search-R1's `"Title"\\ntext`. `sources` says who
answered each query: "real" (BM25), "cache" or "model" (the world model's own passages).

Each query is one `search` call through `Hub.simulate` (a throwaway session on the env's
task, never recorded), so the env's router applies (see simulators/envs/search.py for
cache, real and model) and the server's metrics count each answer by source. Errors:
- 422: a body that is not a request as above (FastAPI's message names the field), an
  empty query (the tool's input schema refuses it: its message), `env` on a per-env route;
- 404: no such env, an env without a `search` tool, or no search env to choose from;
- 503: a query only the world model could answer on a server without one, or a world
  model answer that is not a list of passages even after the router's retries (the model's
  failure, not the client's; the message names the query).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simworld.data.records import ToolCall, ToolCallsAction, ToolResultsObservation
from simworld.server.deps import HubDep
from simworld.server.hub import BadRequest, Hub, NotFound, Unavailable
from simworld.simulators.env import SimEnv

TOOL = "search"  # the tool a search env answers /retrieve with
DEFAULT_TOPK = 3
MAX_TOPK = 10

router = APIRouter(tags=["Search-R1 retriever"])


class RetrieveRequest(BaseModel):
    """Search-R1's QueryRequest (`queries`, `topk`, `return_scores`), or one `query`."""

    model_config = ConfigDict(extra="forbid")

    queries: list[str] | None = Field(default=None, min_length=1, max_length=256)
    query: str | None = Field(default=None, description="one query (instead of queries)")
    topk: int = Field(default=DEFAULT_TOPK, ge=1, le=MAX_TOPK)
    return_scores: bool = False
    env: str | None = Field(default=None, description="the search env (POST /retrieve only)")

    @model_validator(mode="after")
    def _one_form(self) -> RetrieveRequest:
        if (self.queries is None) == (self.query is None):
            raise ValueError('give either "queries" (a list of strings) or "query" (a string)')
        return self

    def texts(self) -> list[str]:
        return self.queries if self.queries is not None else [self.query or ""]


class RetrieveResponse(BaseModel):
    result: list[list[dict[str, Any]]]
    sources: list[str]


@router.post("/retrieve")
def retrieve(body: RetrieveRequest, hub: HubDep) -> RetrieveResponse:
    """Search-R1's retriever over the served search env."""
    return _answer(hub, body.env or _only_search_env(hub), body)


@router.post("/envs/{env}/retrieve")
def retrieve_in(env: str, body: RetrieveRequest, hub: HubDep) -> RetrieveResponse:
    """Search-R1's retriever over search env `env`."""
    if body.env is not None and body.env != env:
        raise BadRequest(f"env: the route names env {env!r}, the body {body.env!r}")
    return _answer(hub, env, body)


def _answer(hub: Hub, env: str, body: RetrieveRequest) -> RetrieveResponse:
    task_id = _search_task(hub.env(env), env)
    result, sources = [], []
    for query in body.texts():
        arguments = {"query": query, "top_k": body.topk}
        call = ToolCall("call_0", TOOL, arguments, json.dumps(arguments, ensure_ascii=False))
        _, step, _ = hub.simulate(env, ToolCallsAction([call]), task_id=task_id)
        observation = step.observation
        assert isinstance(observation, ToolResultsObservation)  # a tool env answers a tool call
        source = str(step.info["source"])
        answer = observation.results[0]
        if source == "validation":
            raise BadRequest(f"query {query!r}: {_error_text(answer.text)}")
        items = _items(answer.text, answer.is_error, query, body.return_scores)
        result.append(items[: body.topk])  # a model may write more than asked
        sources.append(source)
    return RetrieveResponse(result=result, sources=sources)


def _items(text: str, is_error: bool, query: str, scores: bool) -> list[dict[str, Any]]:
    """A search result's hits as Search-R1 items; Unavailable when it holds none readable."""
    try:
        hits = json.loads(text)
    except ValueError:
        hits = None
    ok = not is_error and isinstance(hits, list) and all(_is_hit(h) for h in hits)
    if not ok:
        raise Unavailable(
            f"query {query!r}: the simulator could not produce a list of passages "
            f"(it answered {text[:120]!r}); retry, or serve the real retriever for it"
        )
    items = []
    for hit in hits:
        document = {
            "id": hit["id"],
            "title": hit["title"],
            "contents": f'"{hit["title"]}"\n{hit["text"]}',
        }
        items.append(
            {"document": document, "score": hit["score"]} if scores else {"document": document}
        )
    return items


def _is_hit(hit: Any) -> bool:
    return (
        isinstance(hit, dict)
        and all(isinstance(hit.get(k), str) for k in ("id", "title", "text"))
        and isinstance(hit.get("score"), int | float)
        and not isinstance(hit.get("score"), bool)
    )


def _error_text(text: str) -> str:
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return text
    return error if isinstance(error, str) else text


def _has_search(env: SimEnv) -> bool:
    return any(tool.name == TOOL for task in env.tasks.values() for tool in task.tools)


def _search_task(env: SimEnv, name: str) -> str:
    for task in env.tasks.values():
        if any(tool.name == TOOL for tool in task.tools):
            return task.id
    raise NotFound(f"env {name!r} has no {TOOL!r} tool to answer /retrieve with")


def _only_search_env(hub: Hub) -> str:
    found = [name for name, env in hub.envs.items() if _has_search(env)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(f"no served env has a {TOOL!r} tool; serve one (e.g. --env search)")
    raise BadRequest(f"env: several served envs can search ({', '.join(found)}); name one")


__all__ = ["RetrieveRequest", "RetrieveResponse", "retrieve", "retrieve_in", "router"]
