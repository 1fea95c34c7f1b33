"""An ASGI wrapper that bounds every request body, whatever its path and however it is sent (CONTRACT 3.1), in size
and in time."""

from __future__ import annotations

import asyncio

from .core.exceptions import BodyTooLarge
from .refusals import TOO_SLOW, body_too_slow, send_refusal


class BodyLimit:
    """Reads each HTTP request's body before Django does, at most `limit` bytes within `timeout` seconds (None: no
    limit), and answers 413 beyond the size, 408 past the time, closing the connection.

    A declared Content-Length over the limit is refused before a byte of the body is read; a chunked body
    (no Content-Length) is read until it passes the limit, then refused, so an endless body costs at most
    `limit` bytes of memory, and a body that stops coming, or trickles, holds its connection `timeout` seconds at
    most. The time counts from the end of the head to the end of the body: the answer (a stream of any length)
    is not timed. A body that fits is handed to Django whole, with the Content-Length it lacked (Django reads a
    request without one as empty).
    """

    def __init__(self, app, limit: int, timeout: float | None = None):
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            return await send_refusal(send, BodyTooLarge.status_code, BodyTooLarge.default_detail)
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._read(receive)
        except _Oversized:
            return await send_refusal(send, BodyTooLarge.status_code, BodyTooLarge.default_detail)
        except TimeoutError:
            return await send_refusal(send, TOO_SLOW, body_too_slow(self.timeout))
        if body is None:
            return None
        if declared is None and body:
            scope = {**scope, "headers": [*scope["headers"], (b"content-length", str(len(body)).encode())]}
        return await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive) -> bytes | None:
        """The whole body; None when the client left first."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise _Oversized
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class _Oversized(Exception):
    pass


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
