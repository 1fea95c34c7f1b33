"""Shared fixtures: real worker processes, the test Redis database, an HTTP client, polling helpers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from urllib.parse import quote

import psycopg2
import pytest
import redis
import requests
from django.db import connection
from django.http import HttpResponse
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from agentos_project.core.conf import current
from agentos_project.core.postgres import base as postgres
from agentos_project.httpserver import HTTP_PROTOCOL

from .fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent
STUB_AGENT = "/agents/stub-agent"
HITL_AGENT = "/agents/hitl-agent"


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


def with_conf(section: str, **changes):
    """Override some agentos settings of one section (a context manager or decorator)."""
    return override_settings(AGENTOS=current().replace(section, **changes))


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text answer, by (name, sorted labels), parsed by prometheus-client."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def database_url(settings: dict) -> str:
    """The URL of the database a Django connection's settings name, password included."""
    password = f":{quote(settings['PASSWORD'], safe='')}" if settings["PASSWORD"] else ""
    return f"postgresql://{settings['USER']}{password}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"


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


def terminate_backend(pid: int) -> None:
    """Kill one PostgreSQL backend from another connection, as a server restart kills every one; returns once it
    has exited (up to 5 s)."""
    admin = psycopg2.connect(**connection.get_connection_params())
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    finally:
        admin.close()


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


@pytest.fixture(scope="session")
def run():
    """Run a coroutine of Agno's client to its end, on the one event loop of the test session: the client keeps one
    httpx client for the process, bound to the loop it first ran on."""
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()


@pytest.fixture
def fake_openai():
    """A fake OpenAI-compatible server of the test's own (`tests/fake_openai.py`); script it with `answer`."""
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test databases; pooling stops before they are dropped (an idle connection would block it)."""
    yield
    close_pools()


def close_pools() -> None:
    """Stop pooling in this process and close every idle connection of its pools."""
    with postgres._pools_lock:
        pools = list(postgres._pools.values())
        for pool in pools:
            pool.limit = 0
    for pool in pools:
        pool.clear()


def clear_pools() -> None:
    """Close the idle connections of this process's pools (pooling goes on): the next query opens a new one."""
    with postgres._pools_lock:
        pools = list(postgres._pools.values())
    for pool in pools:
        pool.clear()


@pytest.fixture
def start_sweeper(transactional_db, tmp_path):
    """Start real `manage.py sweeper` processes; stopped before the tables are flushed."""
    sweepers: list[ChildProcess] = []

    def start(**env: str) -> ChildProcess:
        log_path = tmp_path / f"sweeper{len(sweepers) + 1}.log"
        sweepers.append(ChildProcess([sys.executable, "manage.py", "sweeper"], log_path, process_env(**env)))
        return sweepers[-1]

    yield start
    for sweeper in sweepers:
        sweeper.stop()


@pytest.fixture
def redis_db():
    """The test Redis database, emptied before the test (no broker messages left from another test)."""
    client = redis.Redis.from_url(current().services.redis_url)
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


def submit(
    api: APIClient, *, prefix: str = STUB_AGENT, fmt: str = "multipart", environ: dict[str, str] | None = None, **fields
) -> HttpResponse:
    """POST `{prefix}/runs` in-process, background and not streamed unless `fields` say otherwise; the answer.
    `environ`: request headers by their WSGI names (HTTP_IDEMPOTENCY_KEY)."""
    body = {"background": "true", "stream": "false", **fields}
    return api.post(f"{prefix}/runs", body, format=fmt, **(environ or {}))


def submit_background(api: APIClient, session_id: str, message: str, *, max_attempts: int | None = None) -> str:
    """Submit a background, non-streaming stub-agent run in-process; returns its run_id (asserting the 202).
    `max_attempts`: the run's attempt budget, instead of the queue's setting."""
    budget = with_conf("queue", max_attempts=max_attempts) if max_attempts is not None else nullcontext()
    with budget:
        response = submit(api, message=message, session_id=session_id)
    assert response.status_code == 202, response.content
    return response.json()["run_id"]


def poll_answer(api: APIClient, run_id: str, session_id: str | None, *, prefix: str = STUB_AGENT) -> HttpResponse:
    """GET `{prefix}/runs/{run_id}` in-process, with `session_id` unless it is None; the answer."""
    return api.get(f"{prefix}/runs/{run_id}", {"session_id": session_id} if session_id is not None else {})


def poll(api: APIClient, run_id: str, session_id: str, *, prefix: str = STUB_AGENT) -> dict:
    """The run's body as GET `{prefix}/runs/{run_id}` answers it in-process."""
    return poll_answer(api, run_id, session_id, prefix=prefix).json()


def wait_status(
    api: APIClient, run_id: str, session_id: str, *statuses: str, prefix: str = STUB_AGENT, timeout: float = 20
) -> dict:
    """Poll the run in-process until its status is one of `statuses`; its body then."""
    return wait_until(
        lambda: (body := poll(api, run_id, session_id, prefix=prefix))["status"] in statuses and body,
        timeout=timeout,
        what=f"run {run_id} to be {' or '.join(statuses)}",
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class RunsOverHttp:
    """A server of ours the test reaches over HTTP at `url`: background runs submitted to it and polled."""

    url: str

    def get(self, path: str, **params):
        """The JSON of a 200 answer to GET `path`; None for any other answer, or none (a server in an outage)."""
        try:
            response = requests.get(f"{self.url}{path}", params=params, timeout=5)
        except requests.RequestException:
            return None
        return response.json() if response.status_code == 200 else None

    def submit(
        self, session_id: str, message: str, *, prefix: str = STUB_AGENT, headers: dict[str, str] | None = None
    ) -> requests.Response:
        """POST a background, non-streaming run to `{prefix}/runs` as a form; the answer."""
        return requests.post(
            f"{self.url}{prefix}/runs",
            data={"message": message, "session_id": session_id, "background": "true", "stream": "false"},
            headers=headers,
            timeout=30,
        )

    def submitted(self, session_id: str, message: str, *, prefix: str = STUB_AGENT) -> str:
        """Submit as `submit` does; the run_id, once the answer is the 202 of an accepted run."""
        response = self.submit(session_id, message, prefix=prefix)
        assert response.status_code == 202, response.text
        return response.json()["run_id"]

    def poll(self, run_id: str, session_id: str, *, prefix: str = STUB_AGENT) -> dict:
        """The run's body as GET `{prefix}/runs/{run_id}` answers it (asserting the 200)."""
        response = requests.get(f"{self.url}{prefix}/runs/{run_id}", params={"session_id": session_id}, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def wait_status(
        self,
        run_id: str,
        session_id: str,
        *statuses: str,
        prefix: str = STUB_AGENT,
        timeout: float = 20,
        interval: float = 0.05,
        through_errors: bool = False,
    ) -> dict:
        """Poll the run until its status is one of `statuses`; its body then. `through_errors`: an answer other than
        200, or none, is polled again (as `get` reads it) instead of failing the test."""

        def reached():
            if through_errors:
                body = self.get(f"{prefix}/runs/{run_id}", session_id=session_id)
            else:
                body = self.poll(run_id, session_id, prefix=prefix)
            return body and body["status"] in statuses and body

        return wait_until(
            reached, timeout=timeout, interval=interval, what=f"run {run_id} to be {' or '.join(statuses)}"
        )


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


@pytest.fixture
def start_web(transactional_db, redis_db, tmp_path):
    """Start web replicas (uvicorn) against the test database; stopped before the tables are flushed."""
    replicas: list[WebProcess] = []

    def start(*, plain: bool = False, **env: str) -> WebProcess:
        """`plain`: uvicorn with its own HTTP protocol, not `serve`'s."""
        replica = WebProcess(tmp_path / f"web{len(replicas) + 1}.log", process_env(**env), plain=plain)
        replicas.append(replica)
        return replica.wait_ready()

    yield start
    for replica in replicas:
        replica.stop()


def sse_frames(response: requests.Response):
    """The frames of a `text/event-stream` response as they arrive: (event name, data) pairs, and
    ("keepalive", None) for a keepalive comment."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    buffer = b""
    for chunk in response.iter_content(chunk_size=None):
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            text = block.decode()
            if text.startswith(":"):
                yield ("keepalive" if text == ": keepalive" else text, None)
                continue
            fields = dict(line.split(": ", 1) for line in text.split("\n"))
            yield fields["event"], json.loads(fields["data"])


@pytest.fixture
def start_serve(transactional_db, redis_db, tmp_path):
    """Start `manage.py serve` processes against the test database; all are stopped before the tables are flushed."""
    served: list[ServeProcess] = []

    def start(*, ready: bool = True, port: int | None = None, embedded: bool = False, **env: str) -> ServeProcess:
        """`embedded`: without DATABASE_URL and REDIS_URL, as a new user runs it (the checkout's .run/)."""
        environment = embedded_env(**env) if embedded else process_env(**env)
        serve = ServeProcess(tmp_path / f"serve{len(served) + 1}.log", environment, port)
        served.append(serve)
        return serve.wait_ready() if ready else serve

    yield start
    for serve in served:
        serve.stop()


class AsgiServer:
    """The ASGI server's side of one streamed response, as uvicorn behaves: once the body is complete, `receive`
    answers `http.disconnect`."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self._complete = asyncio.Event()

    async def receive(self) -> dict:
        await self._complete.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._complete.set()
        self.sent.append(message)
