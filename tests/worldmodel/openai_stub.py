"""A small OpenAI-compatible endpoint for the tests: `/v1/chat/completions` and
`/v1/completions` served by a `TransformersEngine` (stdlib http.server on 127.0.0.1, a free
port, a daemon thread). It can answer the first `garbage` chat requests with text that is
not JSON, or every request with HTTP `fail_status`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.hf import TransformersEngine


@dataclass
class StubState:
    engine: TransformersEngine
    garbage: int = 0
    fail_status: int | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _config(body: dict[str, Any]) -> GenerationConfig:
    temperature = float(body.get("temperature", 1.0))
    return GenerationConfig(
        max_new_tokens=int(body.get("max_tokens", 16)),
        do_sample=temperature > 0,
        temperature=temperature if temperature > 0 else 1.0,
        top_p=float(body.get("top_p", 1.0)),
        seed=int(body.get("seed", 0)),
        stop=tuple(body.get("stop") or ()),
    )


def _answer(state: StubState, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with state.lock:
        state.requests.append(body)
        if state.fail_status is not None:
            return state.fail_status, {"error": {"message": "stub failure", "type": "server"}}
        garbage = path.endswith("/chat/completions") and state.garbage > 0
        state.garbage -= int(garbage)
    cfg = _config(body)
    if path.endswith("/chat/completions"):
        text = "not json {" if garbage else state.engine.generate_chat([body["messages"]], cfg)[0]
        choice: dict[str, Any] = {"message": {"role": "assistant", "content": text}}
    elif path.endswith("/completions"):
        choice = {"text": state.engine.generate([body["prompt"]], cfg)[0]}
    else:
        return 404, {"error": {"message": f"no route {path}"}}
    choice |= {"index": 0, "finish_reason": "stop"}
    return 200, {
        "id": "stub-1",
        "object": "chat.completion",
        "model": body.get("model"),
        "choices": [choice],
    }


@contextmanager
def serve_stub(state: StubState) -> Iterator[str]:
    """Serve `state` and yield the base URL (ending in /v1)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, reply = _answer(state, self.path, json.loads(raw))
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
