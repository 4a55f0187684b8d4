"""Keeping secrets out of what simworld writes down: recorded transitions, captured envs.

    redactor = Redactor(extra=["session[_-]?code"], secrets=["Bearer abc123..."])
    redactor.value({"user": "ann", "password": "pw"})   # {"user": "ann", "password": "[REDACTED]"}
    redactor.text('{\\n  "token": "x1",\\n  "n": 2\\n}')    # the same text, only "x1" replaced
    redactor.url("https://u:pw@host/mcp?api_key=k&q=1")     # userinfo and api_key replaced
    redactor.argv(["srv", "--token", "x", "--api-key=y"])    # the values after secret flags

Rules:
- A field is secret when its name matches one of the patterns (regular expressions, searched
  case-insensitively): DEFAULT_PATTERNS plus any `extra` ones. Its whole value (a string, an
  object, anything) becomes the MARKER; nothing under it is kept.
- JSON text is redacted in place: only the secret values' spans change, so everything else
  keeps its bytes (key order, spacing); text that is not JSON is kept as it is.
- `secrets` are values known to be secret (the headers a client authenticated with): every
  occurrence inside any string is replaced, wherever it turns up (a server echoing a token).
  Values shorter than MIN_SECRET characters are not searched for (they would hit by chance).
- Headers are never written down at all; `is_secret_header` says which ones carry secrets
  (Authorization, Cookie, API keys), so that their values join `secrets`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from simworld.data.canonical import parse
from simworld.data.records import JSON
from simworld.server.mcp_client import value_spans

MARKER = "[REDACTED]"
DEFAULT_PATTERNS = (
    "password",
    "passwd",
    "secret",
    "token",
    "api[_-]?key",
    "authorization",
    "cookie",
    "credential",
)
MIN_SECRET = 8
_SECRET_HEADERS = re.compile(
    r"(proxy-)?authorization|cookie|set-cookie|.*(api[_-]?key|token|secret).*", re.I
)


def is_secret_header(name: str) -> bool:
    """Whether a header named `name` carries a secret (never recorded, and its value is
    searched for in everything recorded)."""
    return bool(_SECRET_HEADERS.fullmatch(name))


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """The secret values among `headers`: each value, and the credential after its scheme
    ("Bearer <credential>")."""
    found: list[str] = []
    for name, value in headers.items():
        if is_secret_header(name):
            found.append(value)
            scheme, _, credential = value.partition(" ")
            if credential and scheme.isalpha():
                found.append(credential)
    return found


class Redactor:
    """Replaces secret fields and known secret values (see the module docstring)."""

    def __init__(self, extra: Sequence[str] = (), secrets: Iterable[str] = ()) -> None:
        patterns = [*DEFAULT_PATTERNS, *extra]
        for pattern in extra:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"redact pattern {pattern!r} is not a regular expression: {exc}"
                ) from None
        self.patterns = tuple(patterns)
        self._fields = re.compile("|".join(f"(?:{p})" for p in patterns), re.I)
        # Longest first, so that a value containing a shorter secret is replaced whole.
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len)[::-1])

    def with_secrets(self, secrets: Iterable[str]) -> Redactor:
        """This redactor, also searching for `secrets`."""
        return Redactor(self.patterns[len(DEFAULT_PATTERNS) :], (*self.secrets, *secrets))

    def is_secret_field(self, name: str) -> bool:
        return bool(self._fields.search(name))

    def value(self, value: JSON) -> JSON:
        """A JSON value with secret fields and secret values replaced (a new value)."""
        if isinstance(value, dict):
            return {
                k: MARKER if self.is_secret_field(k) else self.value(v) for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, str):
            return self.string(value)
        return value

    def string(self, text: str) -> str:
        """`text` with every known secret value replaced."""
        for secret in self.secrets:
            text = text.replace(secret, MARKER)
        return text

    def text(self, text: str) -> str:
        """JSON text with the values of secret fields replaced in place (the rest keeps its
        bytes); any text with the known secret values replaced."""
        if parse(text)[0] and self._fields.search(text):
            chosen: list[tuple[int, int]] = []
            spans = sorted(value_spans(text), key=lambda span: (span[1], -span[2]))
            for path, start, end in spans:
                inside = chosen and start < chosen[-1][1]
                key = path[-1] if path else None
                if isinstance(key, str) and self.is_secret_field(key) and not inside:
                    chosen.append((start, end))
            for start, end in reversed(chosen):
                text = f'{text[:start]}"{MARKER}"{text[end:]}'
        return self.string(text)

    def url(self, url: str) -> str:
        """`url` without its userinfo and with secret query parameters replaced."""
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        query = [
            (k, MARKER if self.is_secret_field(k) else self.string(v))
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        ]
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="[]")))

    def argv(self, argv: Sequence[str]) -> list[str]:
        """A command line with the values of secret flags (`--token X`, `--api-key=X`) and
        known secret values replaced."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            flag, eq, _ = arg.partition("=")
            if hide_next:
                out.append(MARKER)
            elif arg.startswith("-") and eq and self.is_secret_field(flag):
                out.append(f"{flag}={MARKER}")
            else:
                out.append(self.string(arg))
            hide_next = arg.startswith("-") and not eq and self.is_secret_field(arg)
        return out


__all__ = [
    "DEFAULT_PATTERNS",
    "MARKER",
    "MIN_SECRET",
    "Redactor",
    "header_secrets",
    "is_secret_header",
]
