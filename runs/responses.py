"""Responses that outlive their view: SSE streams and inline runs, served by the event loop, not a thread.

The view does its reads and writes, then returns one of these; before it does, the request's database
connection is closed, so an open stream holds none.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import Future

from django.db import connection
from django.http import StreamingHttpResponse

from .cancellation import cancel_request


def sse_response(frames: AsyncIterator[str]) -> StreamingHttpResponse:
    connection.close()
    response = StreamingHttpResponse(_encoded(frames), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must not hold frames back
    return response


async def _encoded(frames: AsyncIterator[str]) -> AsyncIterator[bytes]:
    async for sse in frames:
        yield sse.encode()


async def cancelled_on_disconnect(run_id, frames: AsyncIterator[str]) -> AsyncIterator[str]:
    """An inline run's stream: a client that goes away before the run's stream ended cancels the run."""
    ended = False
    try:
        async for sse in frames:
            yield sse
        ended = True
    finally:
        if not ended:
            cancel_request(run_id)


def inline_json_response(run_id, done: Future) -> StreamingHttpResponse:
    """The run's poll body once it has ended (background=false, stream=false); a disconnect cancels the run."""
    connection.close()
    return StreamingHttpResponse(_when_done(run_id, done), content_type="application/json")


async def _when_done(run_id, done: Future) -> AsyncIterator[bytes]:
    try:
        body = await asyncio.wrap_future(done)
    except asyncio.CancelledError:
        cancel_request(run_id)
        raise
    yield json.dumps(body).encode()
