"""API-token authentication for HTTP requests and WebSockets, as plain ASGI middleware.

    app.add_middleware(ApiKeyAuth, keys=settings.api_keys, on_reject=metrics_error)

With keys set, a caller presents one of them either way:
- a header `Authorization: Bearer <token>`;
- a secret URL prefix `/k/<token>/...`, for clients that cannot send headers (openenv-core's
  client takes only a `base_url`, so `base_url = "http://host:port/k/<token>"` works for its
  HTTP calls and for its `/ws` WebSocket alike). The prefix is stripped before routing.

A prefix wins over a header. Tokens are compared with `secrets.compare_digest`, against
every key. The caller's owner identity (`scope["state"]["owner"]`, read by deps.OwnerDep)
is the matching token, so every key is its own namespace of sessions; without keys it is
"" and any `/k/<anything>/` prefix is stripped and ignored.

Refusals:
- HTTP: 401 with a JSON body `{"detail", "error": {"kind": "unauthorized", "message"}}`
  and `WWW-Authenticate: Bearer`.
- WebSocket: refused during the handshake, before any accept: an HTTP 401 denial response
  with the same JSON body where the server supports the ASGI `websocket.http.response`
  extension (uvicorn does), so clients raise a clear "HTTP 401" handshake error; otherwise
  a close with code 1008 (policy violation), which reaches clients as a 403 handshake.
- `/health` (and `/envs/<env>/health`) answer without a token, so load balancers and
  readiness probes need none; a token that is presented there is still checked.

The token is never logged: the prefix is stripped from the scope in place (see
`_strip_prefix`), so even the server's access log shows the path without it.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Sequence

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/k/"
KIND = "unauthorized"
_OPEN_PATHS = re.compile(r"/health|/envs/[^/]+/health")
MISSING = (
    "this server needs an API token: send the header `Authorization: Bearer <token>`, or "
    "prefix the path with /k/<token>/ (base_url = http://host:port/k/<token>)"
)


class ApiKeyAuth:
    """The middleware (see the module docstring). `on_reject(kind)` counts each refusal."""

    def __init__(
        self,
        app: ASGIApp,
        keys: Sequence[str] = (),
        on_reject: Callable[[str], None] | None = None,
    ) -> None:
        self.app = app
        self.keys = tuple(key.encode() for key in keys)
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        prefixed = _strip_prefix(scope)
        token = prefixed if prefixed is not None else _bearer(Headers(scope=scope))
        problem = self._problem(token, prefixed is not None, scope["path"])
        if problem is not None:
            if self.on_reject is not None:
                self.on_reject(KIND)
            await _refuse(scope, receive, send, problem)
            return
        owner = token if self.keys and token is not None else ""
        scope["state"] = {**scope.get("state", {}), "owner": owner}
        await self.app(scope, receive, send)

    def _problem(self, token: str | None, prefixed: bool, path: str) -> str | None:
        """Why the request is refused, or None when it may go on."""
        if not self.keys:
            return None
        if token is None:
            return None if _OPEN_PATHS.fullmatch(path) else MISSING
        given = token.encode()
        # Compare with every key, so the time taken does not say which key came close.
        matches = [secrets.compare_digest(given, key) for key in self.keys]
        if any(matches):
            return None
        how = "in the URL prefix /k/<token>/" if prefixed else "in the Authorization header"
        return f"the API token sent {how} is not valid for this server"


def _strip_prefix(scope: Scope) -> str | None:
    """Take a `/k/<token>` prefix off the scope's path; returns the token (None: no prefix).

    The scope is changed in place, against the ASGI habit of copying it: the server logs
    its access line from this same dict, so changing it in place keeps the token out of
    the log."""
    path: str = scope["path"]
    if not path.startswith(PREFIX):
        return None
    token, slash, rest = path[len(PREFIX) :].partition("/")
    scope["path"] = slash + rest if slash else "/"
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and raw.startswith(PREFIX.encode()):
        _, raw_slash, raw_rest = raw[len(PREFIX) :].partition(b"/")
        scope["raw_path"] = raw_slash + raw_rest if raw_slash else b"/"
    return token


def _bearer(headers: Headers) -> str | None:
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def _refuse(scope: Scope, receive: Receive, send: Send, message: str) -> None:
    body = json.dumps({"detail": message, "error": {"kind": KIND, "message": message}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b"Bearer"),
    ]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await receive()  # the handshake's websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        start = {"type": "websocket.http.response.start", "status": 401, "headers": headers}
        await send(start)
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})


__all__ = ["KIND", "MISSING", "PREFIX", "ApiKeyAuth"]
