"""Waiting in a test: polling for a condition (`wait_until`), and work released on several threads at once
(`in_threads`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection


def wait_until(predicate: Callable[[], object], *, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def in_threads(count: int, work: Callable[[int], object]) -> list:
    """Run `work(i)` on `count` threads released together; each thread has its own database connection."""
    barrier = threading.Barrier(count)

    def run(index):
        try:
            barrier.wait()
            return work(index)
        finally:
            connection.close()

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))
