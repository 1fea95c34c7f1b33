"""Shared fixtures: real worker processes, the test Redis database, an HTTP client, polling helpers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import requests
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
def start_sweeper(transactional_db, tmp_path):
    """Start real `manage.py sweeper` processes; stopped (SIGTERM) before the tables are flushed."""
    sweepers: list[subprocess.Popen] = []

    def start(**env: str) -> subprocess.Popen:
        log = open(tmp_path / f"sweeper{len(sweepers) + 1}.log", "w")  # noqa: SIM115 - the child owns it
        command = [sys.executable, "manage.py", "sweeper"]
        sweepers.append(subprocess.Popen(command, cwd=ROOT, env=process_env(**env), stdout=log, stderr=log))
        return sweepers[-1]

    yield start
    for sweeper in sweepers:
        sweeper.terminate()
        sweeper.wait(10)


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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServeProcess:
    """A real `python manage.py serve` (web + worker + sweeper) on a free port."""

    def __init__(self, log_path: Path, env: dict[str, str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log_file = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, timeout: float = 60) -> ServeProcess:
        def ready():
            if self.process.poll() is not None:
                pytest.fail(f"serve exited with {self.process.returncode}:\n{self.log()}")
            return " ready." in self.log() and self.get("/health") is not None

        wait_until(ready, timeout=timeout, interval=0.2, what="serve to be ready")
        return self

    def get(self, path: str, **params):
        try:
            response = requests.get(f"{self.url}{path}", params=params, timeout=5)
        except requests.RequestException:
            return None
        return response.json() if response.status_code == 200 else None

    def submit(self, session_id: str, message: str, agent: str = "stub-agent") -> requests.Response:
        return requests.post(
            f"{self.url}/agents/{agent}/runs",
            data={"message": message, "session_id": session_id, "background": "true", "stream": "false"},
            timeout=30,
        )

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()
        return self.process.returncode


@pytest.fixture
def start_serve(transactional_db, redis_db, tmp_path):
    """Start `manage.py serve` processes against the test database; all are stopped before the tables are flushed."""
    served: list[ServeProcess] = []

    def start(*, ready: bool = True, **env: str) -> ServeProcess:
        serve = ServeProcess(tmp_path / f"serve{len(served) + 1}.log", process_env(**env))
        served.append(serve)
        return serve.wait_ready() if ready else serve

    yield start
    for serve in served:
        serve.stop()
