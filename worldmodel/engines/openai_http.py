"""Any OpenAI-compatible endpoint as the simulator (a prompted LLM, the Simia way), via httpx.

    engine = OpenAIEngine("http://127.0.0.1:8000/v1", model="my-model")  # key from env
    engine.generate_chat(conversations, GenerationConfig(max_new_tokens=256), validate=ok)

`generate_chat` posts one `/chat/completions` request per conversation (`concurrency` at a
time) with `max_tokens`, `temperature` (0 when greedy), `top_p`, `seed` (conversation i
gets `cfg.row_seed(i)`, as the transformers engine's own path does), `stop`, and, with
`json_mode=True` (default), `response_format: {"type": "json_object"}` to ask for JSON-only
output. OpenAI, vLLM's and llama.cpp's servers accept that field; a server that rejects it
answers 400 and the error says to pass `json_mode=False`. Outputs that `validate` rejects
are retried (`max_retries`, with a new seed; see `base.generate_validated`) and counted in
`last_report`. `generate` posts plain prompts to `/completions` for servers that serve it.

Errors are `EndpointError`s naming the URL, the HTTP status and the start of the body;
429, 5xx and connection failures are retried `http_retries` times with backoff first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from simworld.worldmodel.engines.base import (
    ChatMessages,
    GenerationConfig,
    RetryReport,
    Validator,
    generate_validated,
)

TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


class EndpointError(RuntimeError):
    """The endpoint failed or answered something that is not a completion."""


class OpenAIEngine:
    """Chat (and optionally text) completions from an OpenAI-compatible HTTP endpoint."""

    independent_rows = True  # each row is a request of its own, with its own seed

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        json_mode: bool = True,
        max_retries: int = 2,
        http_retries: int = 2,
        concurrency: int = 8,
        client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.json_mode = json_mode
        self.max_retries = max_retries
        self.http_retries = http_retries
        self.concurrency = max(1, concurrency)
        key = os.environ.get(api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = client or httpx.Client(timeout=timeout, headers=headers)
        self.last_report = RetryReport()

    def generate_chat(
        self,
        messages: Sequence[ChatMessages],
        cfg: GenerationConfig,
        validate: Validator | None = None,
    ) -> list[str]:
        def run(rows: list[int], run_cfg: GenerationConfig) -> list[str]:
            bodies = [{**self._sampling(run_cfg, row), "messages": messages[row]} for row in rows]
            if self.json_mode:
                for body in bodies:
                    body["response_format"] = {"type": "json_object"}
            replies = self._post_all("/chat/completions", bodies)
            messages_out = [_choice(r, "message", self.base_url) for r in replies]
            return [str((m or {}).get("content") or "") for m in messages_out]

        outputs, self.last_report = generate_validated(
            run, len(messages), cfg, validate, self.max_retries
        )
        return outputs

    def generate(self, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
        """Plain-text completions through `/completions` (not every server has it)."""
        if isinstance(prompts, str):
            raise TypeError("pass a sequence of prompts, not one string")
        bodies = [{**self._sampling(cfg, i), "prompt": p} for i, p in enumerate(prompts)]
        replies = self._post_all("/completions", bodies)
        return [str(_choice(r, "text", self.base_url) or "") for r in replies]

    def _sampling(self, cfg: GenerationConfig, row: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": cfg.max_new_tokens,
            "temperature": cfg.temperature if cfg.do_sample else 0.0,
            "top_p": cfg.top_p,
            "seed": cfg.row_seed(row),
        }
        if cfg.stop:
            body["stop"] = list(cfg.stop)
        return body

    def _post_all(self, route: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(bodies) <= 1 or self.concurrency == 1:
            return [self._post(route, b) for b in bodies]
        with ThreadPoolExecutor(min(self.concurrency, len(bodies))) as pool:
            return list(pool.map(lambda b: self._post(route, b), bodies))

    def _post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url + route
        for attempt in range(self.http_retries + 1):
            last = attempt == self.http_retries
            try:
                response = self.client.post(url, json=body)
            except httpx.TransportError as err:
                if last:
                    raise EndpointError(f"POST {url} failed: {err!r}") from err
            else:
                if response.status_code < 400:
                    return _json(response, url)
                if last or response.status_code not in TRANSIENT_STATUS:
                    raise EndpointError(_http_error_message(response, url, body))
            time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")


def _json(response: httpx.Response, url: str) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError as err:
        raise EndpointError(f"POST {url}: the reply is not JSON: {response.text[:300]!r}") from err
    if not isinstance(data, dict):
        raise EndpointError(f"POST {url}: expected a JSON object, got {response.text[:300]!r}")
    return data


def _http_error_message(response: httpx.Response, url: str, body: dict[str, Any]) -> str:
    message = f"POST {url} answered HTTP {response.status_code}: {response.text[:500]!r}"
    if "response_format" in body and "response_format" in response.text:
        message += " (this server may not support response_format json_object: json_mode=False)"
    return message


def _choice(reply: dict[str, Any], key: str, url: str) -> Any:
    """`choices[0][key]` of a reply ("message" for chat, "text" for completions)."""
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise EndpointError(f"{url}: the reply has no choices: {str(reply)[:300]!r}")
    if key not in choices[0]:
        raise EndpointError(f"{url}: the choice has no {key!r}: {str(choices[0])[:300]!r}")
    return choices[0][key]
