"""Shared fixtures: real worker processes, the test Redis database, an HTTP client, polling helpers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.db import connection
from rest_framework.test import APIClient

from agentos_project.postgres.base import close_pools
from queueing.conf import current

ROOT = Path(__file__).resolve().parent.parent


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


def process_env(**overrides: str) -> dict[str, str]:
    """The environment of a worker or server the test starts: the test database and Redis, plus `overrides`."""
    settings = connection.settings_dict
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="agentos_project.settings.test",
        DATABASE_URL=f"postgresql://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}",
        REDIS_URL=current().redis_url,
        CELERY_BROKER_URL=current().celery_broker_url,
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


class WorkerProcess:
    """A real `celery -A agentos_project worker` subprocess, its output in a log file."""

    def __init__(self, name: str, log_path: Path, env: dict[str, str], concurrency: int):
        self.name = name
        self.log_path = log_path
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentos_project",
            "worker",
            "-l",
            "info",
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
        ]
        self.log_file = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log_file, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, timeout: float = 30) -> WorkerProcess:
        def ready():
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.name} exited with {self.process.returncode}:\n{self.log()}")
            return " ready." in self.log()

        wait_until(ready, timeout=timeout, what=f"worker {self.name} to be ready")
        return self

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()
        return self.process.returncode


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test databases; pooling stops before they are dropped (an idle connection would block it)."""
    yield
    close_pools()


@pytest.fixture
def redis_db():
    """The test Redis database, emptied before the test (no broker messages left from another test)."""
    client = redis.Redis.from_url(current().redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def start_worker(transactional_db, redis_db, tmp_path):
    """Start real worker processes against the test database; all are stopped before the tables are flushed."""
    workers: list[WorkerProcess] = []

    def start(*, concurrency: int = 8, ready: bool = True, **env: str) -> WorkerProcess:
        worker = WorkerProcess(
            f"w{len(workers) + 1}", tmp_path / f"worker{len(workers) + 1}.log", process_env(**env), concurrency
        )
        workers.append(worker)
        return worker.wait_ready() if ready else worker

    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture
def api() -> APIClient:
    return APIClient()
