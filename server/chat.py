"""`POST /v1/chat/completions`: the served world model itself behind OpenAI's chat
completions API, for clients that want raw predictions (simworld's own OpenAI-compatible
engine, `simworld eval --model http://host:8000/v1#default`, any OpenAI client).

    {"model": "default", "messages": <render_messages(ctx)>, "max_tokens": 96,
     "temperature": 0, "seed": 0, "stop": ["..."]}
    -> {"id", "object": "chat.completion", "created", "model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": <target>},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}

Input: the messages exactly as the serialization's chat rendering writes them (a system
message holding the blocks, the example step as a solved user/assistant turn when there is
one, then the action as the last user message); the route turns them back into the
plain prompt the causal LM was trained on (`worldmodel.render.prompt_from_messages`), so a
chat client and the model's own plain-prompt path get the same answer for the same
context and seed. Anything else in the messages is a 422 that says what shape is expected.

Decisions:
- `temperature` 0 (or absent) is greedy; above 0 samples with `seed` (0 when absent) and
  `top_p`. `n` must be 1. Other OpenAI fields (`response_format`, `user`, ...) are accepted
  and ignored: the model writes the serialization's target format, not free JSON.
- `max_tokens` (or `max_completion_tokens`) is capped at the model's own bound: it was
  trained on targets no longer than that. `finish_reason` is "length" when the answer used
  the whole bound, else "stop".
- The model runs on the batcher's lock (`BatchingModel.exclusive`), never beside a batch.
- A server whose model is not a causal LM over plain prompts (none, or a chat endpoint
  itself) answers 503.
"""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from simworld.server.batching import BatchingModel
from simworld.server.deps import HubDep
from simworld.server.hub import BadRequest, Unavailable
from simworld.worldmodel.engines.base import Engine, GenerationConfig
from simworld.worldmodel.render import prompt_from_messages
from simworld.worldmodel.world_model import TextWorldModel, WorldModel

router = APIRouter(tags=["OpenAI chat completions"])


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[int | None, Field(ge=1)] = None
    max_completion_tokens: Annotated[int | None, Field(ge=1)] = None
    temperature: Annotated[float, Field(ge=0)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    seed: int | None = None
    stop: str | list[str] | None = None
    n: Annotated[int, Field(ge=1, le=1)] = 1


@router.post("/v1/chat/completions")
def chat_completions(body: ChatRequest, hub: HubDep) -> dict[str, Any]:
    model = _causal_lm(hub.model)
    try:
        prompt = prompt_from_messages([m.model_dump() for m in body.messages])
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    cfg = _generation(body, model.generation)

    def run(_locked: WorldModel) -> tuple[str, int, int]:
        assert isinstance(model.engine, Engine)
        (text,) = model.engine.generate([prompt], cfg)
        return text, _count(model, prompt), _count(model, text)

    outer = hub.model
    text, prompt_tokens, new_tokens = (
        outer.exclusive(run) if isinstance(outer, BatchingModel) else run(model)
    )
    finish = "length" if new_tokens >= cfg.max_new_tokens else "stop"
    return {
        "id": "chatcmpl-" + secrets.token_hex(12),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.model or "simworld",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": new_tokens,
            "total_tokens": prompt_tokens + new_tokens,
        },
    }


def _causal_lm(model: WorldModel | None) -> TextWorldModel:
    inner = model.model if isinstance(model, BatchingModel) else model
    if not isinstance(inner, TextWorldModel) or inner.chat:
        raise Unavailable(
            "this server's world model is not a causal LM over plain prompts (it runs without "
            "a model, or forwards to a chat endpoint itself): chat completions need one"
        )
    return inner


def _generation(body: ChatRequest, own: GenerationConfig) -> GenerationConfig:
    asked = body.max_tokens or body.max_completion_tokens or own.max_new_tokens
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if any(not s for s in stop):
        raise BadRequest("stop: stop strings must be non-empty")
    return GenerationConfig(
        max_new_tokens=min(asked, own.max_new_tokens),
        do_sample=body.temperature > 0,
        temperature=body.temperature if body.temperature > 0 else 1.0,
        top_p=body.top_p,
        seed=body.seed or 0,
        stop=own.stop + tuple(s for s in stop if s not in own.stop),
    )


def _count(model: TextWorldModel, text: str) -> int:
    tokenizer = getattr(model.engine, "tokenizer", None)
    if tokenizer is None:
        return 0
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


__all__ = ["ChatRequest", "router"]
