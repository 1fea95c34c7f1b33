"""Celery's threads pool of a worker, on `ElasticThreads` (`agentos_project.core.elastic`).

A worker holds a thread per run in flight (AGENTOS_MAX_CONCURRENCY, thousands when runs wait on their models).
Celery's pool (`ThreadPoolExecutor`) keeps every thread it ever made, and with it the thread's memory; here a
thread idle for 5 s ends.
"""

from __future__ import annotations

from celery.concurrency.thread import TaskPool as CeleryThreadsPool

from agentos_project.core.elastic import ElasticThreads


class ElasticTaskPool(CeleryThreadsPool):
    """Celery's threads pool (`--pool threads`) on an `ElasticThreads`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.executor = ElasticThreads(self.limit)
