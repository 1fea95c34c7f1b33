"""Responses that outlive their view: SSE streams and inline runs, served by the event loop, not a thread.

The view does its reads and writes, then returns one of these; before it does, the request's database
connection is closed, so an open stream holds none. A client that goes away from an inline run cancels it
(`run_cancel_by_id`, on a thread: the event loop never waits on the database or Redis).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from concurrent.futures import Future

from django.db import connection
from django.http import StreamingHttpResponse

from agentos_project.core.exceptions import first_line
from agentos_project.core.streaming import Ending, PartsResponse

from .services.cancel import run_cancel_by_id

log = logging.getLogger("agentos.runs")


def sse_response(frames: AsyncIterator[str]) -> StreamingHttpResponse:
    """SSE of `frames` (the handler encodes them); the one that ends the stream (an `Ending`) goes out as the end of the
    body."""
    connection.close()
    response = PartsResponse(frames, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must not hold frames back
    return response


def cancel_soon(run_id) -> None:
    """Cancel the run on a thread (`run_cancel_by_id`): the event loop never waits on the database or Redis."""

    def cancel():
        try:
            run_cancel_by_id(run_id=run_id)
        except Exception:
            log.exception("run=%s not cancelled after its client went away", run_id)
        finally:
            connection.close()

    asyncio.get_running_loop().run_in_executor(None, cancel)


async def cancelled_on_disconnect(run_id, frames: AsyncIterator[str]) -> AsyncIterator[str]:
    """An inline run's stream: a client that goes away before the run's stream ended cancels the run."""
    ended = False
    try:
        async for sse in frames:
            ended = ended or isinstance(sse, Ending)  # the run's stream has ended: a disconnect cancels nothing now
            yield sse
        ended = True
    finally:
        if not ended:
            cancel_soon(run_id)


def inline_json_response(run_id, done: Future) -> StreamingHttpResponse:
    """The run's poll body once it has ended (background=false, stream=false); a disconnect cancels the run,
    whether it executes already or still waits for a thread of the inline pool."""
    connection.close()
    return StreamingHttpResponse(_when_done(run_id, done), content_type="application/json")


async def _when_done(run_id, done: Future) -> AsyncIterator[bytes]:
    try:
        body = await asyncio.shield(asyncio.wrap_future(done))
    except asyncio.CancelledError:
        cancel_soon(run_id)
        raise
    except Exception as error:  # the 200 has gone out: the body says what happened
        log.exception("run=%s inline execution failed", run_id)
        body = {"run_id": str(run_id), "status": "ERROR", "detail": f"Run could not be executed: {first_line(error)}"}
    yield json.dumps(body, separators=(",", ":")).encode()
