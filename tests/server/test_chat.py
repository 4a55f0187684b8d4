"""`POST /v1/chat/completions` serves the world model itself: simworld's own OpenAI-
compatible engine, pointed at a real server, predicts what the model predicts in-process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from simworld.data.bundle import load_bundled
from simworld.server.app import create_app
from simworld.server.batching import BatchingModel
from simworld.server.hub import Hub
from simworld.server.settings import Settings
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.openai_http import OpenAIEngine
from simworld.worldmodel.render import render_messages
from simworld.worldmodel.world_model import TextWorldModel, WorldModel

NO_KEYS = Settings(model=None, envs=("frozenlake",), api_keys=())


@pytest.fixture
def contexts(tiny_model: WorldModel) -> list[Any]:
    assert isinstance(tiny_model, TextWorldModel)
    lake = [e for e in load_bundled("test", env="frozenlake")][:3]
    return [tiny_model.context(ep, i) for ep in lake for i in range(min(3, len(ep.steps)))]


def test_the_openai_engine_on_the_server_predicts_what_the_model_does(
    serve: Callable[..., str], make_hub: Callable[..., Hub], tiny_model: WorldModel, contexts: Any
) -> None:
    assert isinstance(tiny_model, TextWorldModel)
    batching = BatchingModel(tiny_model, max_batch=8, max_wait_ms=2)
    base = serve(create_app(NO_KEYS, hub=make_hub(("frozenlake",), model=batching)))
    remote = TextWorldModel(
        OpenAIEngine(f"{base}/v1", "default", json_mode=False, max_retries=0),
        budget=tiny_model.budget,
        generation=tiny_model.generation,
        chat=True,
    )
    local = [p.text for p in tiny_model.predict(contexts)]
    assert [p.text for p in remote.predict(contexts)] == local
    sampled = GenerationConfig(tiny_model.generation.max_new_tokens, do_sample=True, seed=5)
    again = [p.text for p in remote.predict(contexts[:2], sampled)]
    assert again == [p.text for p in remote.predict(contexts[:2], sampled)]  # seeded
    batching.close()


def test_the_reply_has_openai_s_shape_and_bad_requests_are_4xx(
    serve: Callable[..., str], make_hub: Callable[..., Hub], tiny_model: WorldModel, contexts: Any
) -> None:
    base = serve(create_app(NO_KEYS, hub=make_hub(("frozenlake",), model=tiny_model)))
    messages = render_messages(contexts[0])
    with httpx.Client(base_url=base, timeout=60) as http:
        reply = http.post("/v1/chat/completions", json={"model": "m", "messages": messages})
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["object"] == "chat.completion" and body["model"] == "m"
        (choice,) = body["choices"]
        assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
        assert choice["finish_reason"] in ("stop", "length")
        usage = body["usage"]
        assert usage["prompt_tokens"] > 0 and usage["total_tokens"] == (
            usage["prompt_tokens"] + usage["completion_tokens"]
        )
        one = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 1})
        assert one.json()["choices"][0]["finish_reason"] == "length"
        wrong = http.post("/v1/chat/completions", json={"messages": messages[1:]})
        assert wrong.status_code == 422 and "roles ['user']" in wrong.json()["error"]["message"]
        two = http.post("/v1/chat/completions", json={"messages": messages, "n": 2})
        assert two.status_code == 422


def test_a_server_without_a_model_answers_503(
    serve: Callable[..., str], make_hub: Callable[..., Hub], contexts: Any
) -> None:
    base = serve(create_app(NO_KEYS, hub=make_hub(("frozenlake",), model=None)))
    body = {"messages": render_messages(contexts[0])}
    reply = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 503 and "chat completions need" in reply.json()["error"]["message"]


def test_the_chat_rendering_turns_back_into_the_plain_prompt(tiny_model: WorldModel) -> None:
    from simworld.worldmodel.context import Budget, build_context
    from simworld.worldmodel.render import prompt_from_messages, render_prompt

    assert isinstance(tiny_model, TextWorldModel)
    episodes = load_bundled("test", env="frozenlake")[:2] + load_bundled("test", env="bfcl")[:2]
    plain = [build_context(ep, i, Budget()) for ep in episodes for i in range(len(ep.steps))]
    lake = [tiny_model.context(ep, i) for ep in episodes[:2] for i in range(len(ep.steps))]
    assert any(ctx.example for ctx in lake)  # the tiny preset's example block
    for ctx in plain + lake:
        assert prompt_from_messages(render_messages(ctx)) == render_prompt(ctx)
