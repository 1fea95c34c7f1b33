"""An ASGI wrapper that bounds every request's head (its request line and header fields), whatever server runs the
app.

A head larger than `AGENTOS_MAX_HEADER_BYTES`, measured as HTTP/1.1 sends it, or with more than
`AGENTOS_MAX_HEADERS` fields, or with an `Authorization` field over `MAX_AUTHORIZATION_BYTES` (far beyond any
token agentos verifies), is answered 431 `{"detail": ...}` and its connection closed before anything reads it: no
bearer token is compared or verified at a cost that grows with what a client sends. The server has taken the
whole head in by then: `serve`'s uvicorn protocol (`agentos_project.httpserver`) refuses oversized heads while
they arrive, so that one costs no more memory than the limit.
"""

from __future__ import annotations

from .core.conf import HttpLimits
from .refusals import HEADERS_TOO_LARGE, authorization_too_large, headers_too_large, send_refusal, too_many_headers

MAX_AUTHORIZATION_BYTES = 16 * 1024


class HeaderLimit:
    def __init__(self, app, limits: HttpLimits):
        self.app = app
        self.limits = limits

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            refusal = head_refusal(scope, self.limits)
            if refusal is not None:
                return await send_refusal(send, HEADERS_TOO_LARGE, refusal)
        return await self.app(scope, receive, send)


def head_refusal(scope, limits: HttpLimits) -> str | None:
    """Why the head of the request `scope` is refused, or None."""
    if head_size(scope) > limits.max_header_bytes:
        return headers_too_large(limits.max_header_bytes)
    if len(scope["headers"]) > limits.max_headers:
        return too_many_headers(limits.max_headers)
    if any(name == b"authorization" and len(value) > MAX_AUTHORIZATION_BYTES for name, value in scope["headers"]):
        return authorization_too_large(MAX_AUTHORIZATION_BYTES)
    return None


def head_size(scope) -> int:
    """The head's bytes as HTTP/1.1 sends it: `METHOD target HTTP/1.1`, a line `name: value` per field, a blank line."""
    target = len(scope.get("raw_path") or scope["path"].encode())
    if scope["query_string"]:
        target += 1 + len(scope["query_string"])
    fields = sum(len(name) + len(value) + 4 for name, value in scope["headers"])
    return len(scope["method"]) + 1 + target + len(" HTTP/1.1\r\n") + fields + 2
