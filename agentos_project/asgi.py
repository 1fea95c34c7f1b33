"""The ASGI application: Django behind a head limit and a body limit that hold for every path and every kind of
request, its synchronous code entered once per request on a few long-lived threads (`agentos_project.handlers`); the
lifespan's shutdown lets the process's own work end first (`agentos_project.core.stopping`)."""

import os
import threading

import django
from django.conf import settings

from .bodylimit import BodyLimit
from .core.postgres.base import warm
from .core.process import freeze_loaded_objects
from .core.stopping import Lifespan
from .handlers import SharedThreads, SyncChainHandler
from .headerlimit import HeaderLimit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentos_project.settings.base")

django.setup(set_prefix=False)
from .core.conf import current  # noqa: E402
from .logs import access_lines_in  # noqa: E402

access_lines_in(current().server.log_format)

request_threads = SharedThreads(SyncChainHandler())
limits = current().http
application = Lifespan(
    HeaderLimit(BodyLimit(request_threads, limit=settings.MAX_BODY_BYTES, timeout=limits.body_timeout_seconds), limits)
)
freeze_loaded_objects()  # full collections walk only what requests made, not what start-up loaded
threading.Thread(target=warm, args=(request_threads.size,), name="agentos-pool-warm", daemon=True).start()
