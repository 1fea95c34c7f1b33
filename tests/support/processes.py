"""Real agentos processes a test starts: workers, sweepers, `serve`, web replicas, each with its log, and the
environments they start with."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from django.db import connection

from agentos_project.core.conf import current
from agentos_project.httpserver import HTTP_PROTOCOL

from .database import database_url
from .http import RunsOverHttp, free_port
from .waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def process_env(**overrides: str) -> dict[str, str]:
    """The environment of a worker or server the test starts: the test database and Redis, plus `overrides`."""
    settings = connection.settings_dict
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="agentos_project.settings.test",
        DATABASE_URL=database_url(settings),
        REDIS_URL=current().services.redis_url,
        CELERY_BROKER_URL=current().services.celery_broker_url,
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def embedded_env(**overrides: str) -> dict[str, str]:
    """The environment of `make serve` as a new user runs it: development settings, no service URLs."""
    env = {**process_env(**overrides), "DJANGO_SETTINGS_MODULE": "agentos_project.settings.base"}
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        env.pop(name, None)
    return env


class ChildProcess:
    """A real agentos process the test started, its output in a log file; stopped with `stop_signal`."""

    stop_signal = signal.SIGTERM

    def __init__(self, command: list[str], log_path: Path, env: dict[str, str]):
        self.log_path = log_path
        self.log_file = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log_file, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text()

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait_for(self, predicate: Callable[[], object], *, timeout: float, what: str):
        def ready():
            if self.process.poll() is not None:
                pytest.fail(f"{what}: the process exited with {self.process.returncode}:\n{self.log()}")
            return predicate()

        return wait_until(ready, timeout=timeout, interval=0.1, what=what)

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()
        return self.process.returncode


class WorkerProcess(ChildProcess):
    """`celery -A agentos_project worker` (threads pool)."""

    def __init__(self, name: str, log_path: Path, env: dict[str, str], concurrency: int):
        self.name = name
        celery = [sys.executable, "-m", "celery", "-A", "agentos_project", "worker", "-l", "info"]
        options = ["-c", str(concurrency), "-n", f"{name}@%h", "--without-gossip", "--without-mingle"]
        super().__init__(celery + options, log_path, env)

    def wait_ready(self, timeout: float = 30) -> WorkerProcess:
        self.wait_for(lambda: " ready." in self.log(), timeout=timeout, what=f"worker {self.name} to be ready")
        return self


class ServeProcess(ChildProcess, RunsOverHttp):
    """`python manage.py serve` (web + worker + sweeper) on a free port; stopped like Ctrl-C."""

    stop_signal = signal.SIGINT

    def __init__(self, log_path: Path, env: dict[str, str], port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__([sys.executable, "manage.py", "serve", "--port", str(self.port)], log_path, env)

    def wait_ready(self, timeout: float = 60) -> ServeProcess:
        ready = lambda: " ready." in self.log() and self.get("/health") is not None  # noqa: E731
        self.wait_for(ready, timeout=timeout, what="serve to be ready")
        return self


class WebProcess(ChildProcess, RunsOverHttp):
    """One web replica: uvicorn serving agentos_project.asgi on a free port, as `serve` runs it (with its HTTP
    protocol), or `plain`: as an operator may run it, with uvicorn's own."""

    def __init__(self, log_path: Path, env: dict[str, str], *, plain: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        uvicorn = [sys.executable, "-m", "uvicorn", "agentos_project.asgi:application", "--port", str(self.port)]
        options = ["--no-access-log", "--timeout-graceful-shutdown", "2", "--lifespan", "on"]
        protocol = [] if plain else ["--http", HTTP_PROTOCOL]
        super().__init__(uvicorn + options + protocol, log_path, env)

    def wait_ready(self, timeout: float = 30) -> WebProcess:
        def healthy():
            try:
                return requests.get(f"{self.url}/health", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        self.wait_for(healthy, timeout=timeout, what="the web replica to answer /health")
        return self

    def post(self, path: str, *, streaming: bool = False, timeout: float = 30, **fields) -> requests.Response:
        """POST `fields` as a form; `streaming` reads the answer as it arrives (an SSE stream)."""
        return requests.post(f"{self.url}{path}", data=fields, stream=streaming, timeout=timeout)
