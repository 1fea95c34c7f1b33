"""An ASGI wrapper that bounds every request body, whatever its path and however it is sent (CONTRACT 3.1)."""

from __future__ import annotations

import json

from .exceptions import BodyTooLarge


class BodyLimit:
    """Reads each HTTP request's body before Django does, at most `limit` bytes, and answers 413 beyond it.

    A declared Content-Length over the limit is refused before a byte of the body is read; a chunked body
    (no Content-Length) is read until it passes the limit, then refused, so an endless body costs at most
    `limit` bytes of memory. A body that fits is handed to Django whole, with the Content-Length it lacked
    (Django reads a request without one as empty).
    """

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit
        self.refusal = json.dumps({"detail": BodyTooLarge.default_detail}).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            return await self._refuse(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await self._refuse(send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if declared is None and size:
            scope = {**scope, "headers": [*scope["headers"], (b"content-length", str(size).encode())]}
        return await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, send) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self.refusal)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": self.refusal})


def _content_length(scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _replay(body: bytes, receive):
    """A `receive` that gives the whole body first, then whatever the client sends next (its disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
