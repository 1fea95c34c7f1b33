"""What a process does when it stops gracefully: work the apps register (`at_stop`), done once (`stop`).

The web calls `stop` from the ASGI lifespan's shutdown (`Lifespan`), which uvicorn sends once it has stopped
accepting and its open connections have closed (or its graceful timeout passed), and before it exits: uvicorn ends
by raising again the SIGTERM it caught, so the interpreter's `atexit` hooks never run there. Any other process calls
it at its exit.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("agentos.stop")
# What a web process spends of AGENTOS_STOP_TIMEOUT_SECONDS before its lifespan's shutdown: the time uvicorn gives
# open connections (`serve`'s --timeout-graceful-shutdown), so the whole stop fits in what `serve` allows before
# SIGKILL (the stop timeout and 5 s).
WEB_GRACEFUL_SECONDS = 5.0


class _Callbacks:
    registered: list[Callable[[], object]] = []
    done = False
    lock = threading.Lock()


def at_stop(callback: Callable[[], object]) -> None:
    """Have `callback` called once when this process stops gracefully (registering it again changes nothing)."""
    with _Callbacks.lock:
        if callback not in _Callbacks.registered:
            _Callbacks.registered.append(callback)


def stop() -> None:
    """Call the registered callbacks, in order, the first time only; one that raises is logged and the next runs."""
    with _Callbacks.lock:
        if _Callbacks.done:
            return
        _Callbacks.done = True
        callbacks = list(_Callbacks.registered)
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("stopping: %r failed", callback)


atexit.register(stop)


class Lifespan:
    """The ASGI app `app`, answering the lifespan protocol itself: its startup at once, its shutdown once `stop`
    has run (on a thread: it may wait for work to end)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await asyncio.to_thread(stop)
                await send({"type": "lifespan.shutdown.complete"})
                return
