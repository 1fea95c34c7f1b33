"""The ASGI side of a web process: each request's synchronous code (middleware and views) entered once, on one of
a few long-lived threads.

Django runs each request's synchronous part on a thread of that request's own, kept until the response ends: with
streams open for minutes, a thread per open stream. Here each request gets the least loaded of
`AGENTOS_WEB_THREADS` request threads instead, so its synchronous steps still run on one thread, a slow
request holds up none that another thread could serve, and a stream whose view has returned holds no thread.
A few threads serve best: the synchronous part is mostly Python, which one thread at a time runs, and database
round trips, which the others overlap (docs/benchmarks.md has the figures behind the default of 4).
"""

import asyncio
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.urls import set_script_prefix

from .core.conf import current
from .core.streaming import Ending, LastPart, PartsResponse


class RequestThread(ThreadPoolExecutor):
    """One thread (a `concurrent.futures` executor of one), and how many calls it has queued or running."""

    def __init__(self, name: str):
        super().__init__(max_workers=1, thread_name_prefix=name)
        self.load = 0
        self._count = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        with self._count:
            self.load += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future) -> None:
        with self._count:
            self.load -= 1


class SharedThreads:
    def __init__(self, app, threads: int | None = None):
        self.app = app
        if threads is None:
            threads = current().server.web_threads
        self._threads = [RequestThread(f"agentos-sync-{n}") for n in range(threads)]

    @property
    def size(self) -> int:
        """How many request threads there are (one database connection each, warmed at start)."""
        return len(self._threads)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        thread = min(self._threads, key=lambda candidate: candidate.load)
        async with ThreadSensitiveContext(executor=thread):
            await self.app(scope, receive, send)


class SyncChainHandler(ASGIHandler):
    """Django's ASGI handler with each request's synchronous work done in one call, on the request's thread.

    Django's handler leaves the event loop three times per request: for the `request_started` receivers, for its
    middleware chain and view (and, with synchronous middleware around an asynchronous core, more often still), and
    for `response.close()` (the `request_finished` receivers, which give the database connection back). Every
    view and middleware here is synchronous, so the chain is built synchronous, and the three are one call
    (`_respond`): for a response with a body, `close()` comes before it is sent, the body being complete by then;
    so does `finish()` for a `PartsResponse` (SSE), whose body comes later. A streamed response is sent while
    listening for a disconnect that cancels it, and closed afterwards: a `PartsResponse` part by part
    (`send_parts`), another as Django sends it.
    """

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def handle(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await sync_to_async(self._respond, thread_sensitive=True)(scope, body_file)
            if response.streaming:
                await self.stream_response(response, receive, send)
            else:
                await self.send_response(response, send)
        finally:
            body_file.close()

    def _respond(self, scope, body_file):
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self._middleware_chain(request)
            response._handler_class = self.__class__
        if not response.streaming:
            response.close()
        elif isinstance(response, PartsResponse):
            response.finish()
        return response

    async def stream_response(self, response, receive, send):
        """Send the stream on this task while another listens for the client's disconnect, which cancels the sending,
        unless the body has ended (its last part sent): then what the stream's iterator does after it (its clean-up)
        runs to its end. One task and no `asyncio.wait` per stream, where Django's way makes two and waits twice."""
        sending = _Sending(send)
        listening = asyncio.create_task(sending.cut_on_disconnect(receive, asyncio.current_task()))
        try:
            if isinstance(response, PartsResponse):
                await send_parts(response, sending)
            else:
                await self.send_response(response, sending)
        except asyncio.CancelledError:
            if not sending.cut:  # cancelled from outside (the server stops): not the client's leaving
                raise
            asyncio.current_task().uncancel()
        finally:
            listening.cancel()
            # On the event loop, not the request's thread: a streamed response's view gave its database
            # connection back before returning (runs.responses), and the `request_finished` receivers find none
            # of this thread's to close (a `PartsResponse` has had them already). No thread is woken for it.
            response.close()


async def send_parts(response: PartsResponse, send) -> None:
    """Send `response` as Django's `send_response` sends a streamed one, without its three layers per part: each part
    encoded as it comes, an `Ending` or a `LastPart` as the end of the body."""
    await send({"type": "http.response.start", "status": response.status_code, "headers": asgi_headers(response)})
    async with contextlib.aclosing(response.parts) as parts:
        async for part in parts:
            body = part.encode(response.charset) if isinstance(part, str) else bytes(part)
            last = isinstance(part, Ending | LastPart)
            await send({"type": "http.response.body", "body": body, "more_body": not last})
    await send({"type": "http.response.body"})


def asgi_headers(response) -> list[tuple[bytes, bytes]]:
    """The response's headers and cookies as ASGI carries them, as Django's `send_response` makes them."""
    headers = [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]
    return headers + [(b"Set-Cookie", c.output(header="").encode("ascii").strip()) for c in response.cookies.values()]


class _Sending:
    """`send` of a streamed response: `ended` once its body has ended (the empty message by which Django ends a
    body after its last part is left out); `cut` once the client left before."""

    def __init__(self, send) -> None:
        self.send = send
        self.ended = False
        self.cut = False

    async def __call__(self, message) -> None:
        if message["type"] == "http.response.body":
            if self.ended:
                if message.get("body") or message.get("more_body"):
                    raise RuntimeError("a streamed response went on after its last part")
                return
            self.ended = not message.get("more_body", False)
        await self.send(message)

    async def cut_on_disconnect(self, receive, sending: asyncio.Task) -> None:
        """Cancel `sending` when the client leaves before the body has ended (the server reports a disconnect once
        the response is complete, too)."""
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.ended:
            self.cut = True
            sending.cancel()
