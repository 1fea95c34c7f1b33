"""The ASGI application: Django behind a body limit that holds for every path and every kind of body, with
its synchronous code (all of it: middleware and views) entered once per request, on a few long-lived threads.

Django runs each request's synchronous part (middleware and DRF views) on a thread of that request's own,
kept until the response ends: with streams open for minutes, that is a thread per open stream. Here each
request gets one of SYNC_THREADS single-thread executors instead, the one with the least work waiting, so its
synchronous steps still run on one thread, a slow request holds up none that another thread could serve, and
a stream, once its view has returned, holds no thread at all.
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

from .bodylimit import BodyLimit
from .conf import SYNC_THREADS
from .postgres.base import warm

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentos_project.settings.base")


class CountingExecutor(ThreadPoolExecutor):
    """One thread, and how many calls it has queued or running."""

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
    def __init__(self, app, threads: int = SYNC_THREADS):
        self.app = app
        self._executors = [CountingExecutor(f"agentos-sync-{n}") for n in range(threads)]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        executor = min(self._executors, key=lambda candidate: candidate.load)
        async with ThreadSensitiveContext(executor=executor):
            await self.app(scope, receive, send)


class SyncChainHandler(ASGIHandler):
    """Django's ASGI handler with its middleware chain and views called as one synchronous call.

    Django builds an ASGI handler's chain around its asynchronous core: with synchronous middleware, a request
    leaves the event loop for the middleware, comes back to it for the core, and leaves it again for a
    synchronous view, then the same way back. Every view and middleware here is synchronous, so the whole chain is
    built synchronous and entered once, on the request's thread (`SharedThreads`).
    """

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)
        self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)


django.setup(set_prefix=False)
from queueing.lifecycle import freeze_loaded_objects  # noqa: E402 (the apps are loaded only now)

application = BodyLimit(SharedThreads(SyncChainHandler()), limit=settings.MAX_BODY_BYTES)
freeze_loaded_objects()  # full collections walk only what requests made, not what start-up loaded
threading.Thread(target=warm, args=(SYNC_THREADS,), name="agentos-pool-warm", daemon=True).start()
