"""The Celery app: `celery -A agentos_project worker` runs agentos workers (threads pool, acks late, prefetch 1)."""

import os

from celery import Celery
from celery.signals import worker_init, worker_ready, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentos_project.settings.base")

app = Celery("agentos_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["queueing"])


@worker_init.connect
def keep_worker_connections(**_kwargs) -> None:
    """Worker threads are long-lived, so their database connections may be too (unlike ASGI request threads)."""
    from django.db import connections

    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = 300


@worker_ready.connect
def start_heartbeat(**_kwargs) -> None:
    """Refresh this process's leases on a thread of its own, every max(1, grace/3) seconds."""
    from queueing.conf import current
    from queueing.heartbeat import Heartbeat
    from queueing.worker import active_claims, worker_identity

    interval = current().heartbeat_interval
    Heartbeat(worker_id=worker_identity(), interval=interval, claims=active_claims.snapshot).start()


@worker_shutting_down.connect
def drain(**_kwargs) -> None:
    """Warm shutdown: stop claiming, let runs finish within AGENTOS_STOP_TIMEOUT_SECONDS, interrupt the rest."""
    from queueing import shutdown
    from queueing.worker import active_claims, settle_attempt

    shutdown.begin(active_claims=active_claims, settle=settle_attempt)
