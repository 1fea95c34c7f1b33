"""The lease heartbeat: one thread per worker process refreshes every lease the process holds.

It runs apart from the pool, so an agent blocked in a model or tool call cannot starve its own lease.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections, connection

from agentos_project.core.postgres.pool import reserved

from .tickets import ticket_heartbeat

log = logging.getLogger("agentos.queue")


class Heartbeat(threading.Thread):
    """Every `interval` seconds, refresh the leases of the attempts `attempts()` names."""

    def __init__(self, *, worker_id: str, interval: float, attempts: Callable[[], list[tuple[str, int]]]):
        super().__init__(name="agentos-heartbeat", daemon=True)
        self.worker_id = worker_id
        self.interval = interval
        self.attempts = attempts
        self.stopped = threading.Event()

    def run(self) -> None:
        reserved()  # a pool busy with runs must never keep the leases from being refreshed
        try:
            while not self.stopped.wait(self.interval):
                self.beat()
        finally:
            connection.close()

    def beat(self) -> None:
        try:
            attempts = self.attempts()
            if attempts:
                close_old_connections()
                ticket_heartbeat(worker_id=self.worker_id, attempts=attempts)
        except Exception as error:  # the database is away: keep beating, it may come back within the grace
            log.warning("heartbeat failed worker=%s error=%s", self.worker_id, error)
            connection.close()

    def stop(self) -> None:
        self.stopped.set()
