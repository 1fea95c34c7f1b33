"""What a worker process does around its pool: long-lived connections, the lease heartbeat, the sweeper (when
asked), the collector's start-up freeze, the warm drain, and the reader of the execute queue (a consumer step).

Connected to Celery's worker signals by `QueueingConfig.ready()`; outside a worker they never fire.
"""

from __future__ import annotations

import functools
import threading

from celery import current_app
from celery.signals import worker_init, worker_ready, worker_shutting_down
from django.db import connections

from agentos_project.core.conf import current
from agentos_project.core.process import freeze_loaded_objects

from . import shutdown
from .heartbeat import Heartbeat
from .reader import ExecuteReader
from .settle import settle_attempt
from .sweeper import run_forever
from .worker import active_claims, worker_identity


def keep_worker_connections(**_kwargs) -> None:
    """Worker threads are long-lived, so their database connections may be too (unlike ASGI request threads)."""
    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = 300


def start_heartbeat(**_kwargs) -> None:
    """Refresh this process's leases on a thread of its own, every max(1, grace/3) seconds."""
    interval = current().queue.heartbeat_interval
    Heartbeat(worker_id=worker_identity(), interval=interval, attempts=active_claims.snapshot).start()


class _Sweeper:
    stop = threading.Event()


def start_sweeper(**_kwargs) -> None:
    """With AGENTOS_SWEEPER_IN_WORKER, this process sweeps too, on a thread of its own (a sweeper process less)."""
    conf = current().queue
    if conf.sweeper_in_worker:
        threading.Thread(target=run_forever, args=(conf, _Sweeper.stop), name="agentos-sweeper", daemon=True).start()


def drain(**_kwargs) -> None:
    """Warm shutdown: stop claiming, let runs finish within AGENTOS_STOP_TIMEOUT_SECONDS, interrupt the rest.

    Stragglers settled from outside get a short patience, so an unreachable database cannot hold the exit."""
    _Sweeper.stop.set()
    shutdown.begin(active_claims=active_claims, settle=functools.partial(settle_attempt, patience=2.0))


def connect() -> None:
    current_app.steps["consumer"].add(ExecuteReader)
    worker_init.connect(keep_worker_connections, weak=False)
    worker_ready.connect(start_heartbeat, weak=False)
    worker_ready.connect(start_sweeper, weak=False)
    worker_ready.connect(freeze_loaded_objects, weak=False)
    worker_shutting_down.connect(drain, weak=False)
