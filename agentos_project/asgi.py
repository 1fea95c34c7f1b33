"""The ASGI application: Django behind a body limit that holds for every path and every kind of body, with
its synchronous code on a few long-lived threads.

Django runs each request's synchronous part (middleware and DRF views) on a thread of that request's own,
kept until the response ends: with streams open for minutes, that is a thread per open stream. Here each
request gets one of SYNC_THREADS single-thread executors instead (round robin), so its synchronous steps
still run on one thread, and a stream, once its view has returned, holds none.
"""

import itertools
import os
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.asgi import get_asgi_application

from .bodylimit import BodyLimit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentos_project.settings.base")

SYNC_THREADS = 16


class SharedThreads:
    def __init__(self, app, threads: int = SYNC_THREADS):
        self.app = app
        self._executors = itertools.cycle(
            [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"agentos-sync-{n}") for n in range(threads)]
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        async with ThreadSensitiveContext(executor=next(self._executors)):
            await self.app(scope, receive, send)


application = BodyLimit(SharedThreads(get_asgi_application()), limit=settings.MAX_BODY_BYTES)
