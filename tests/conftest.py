"""The tests' fixtures: real worker, sweeper, web and `serve` processes, the test Redis database, the test client,
Agno's client's event loop, a fake OpenAI-compatible server. What the tests share besides fixtures is in
`tests/support/`."""

from __future__ import annotations

import asyncio
import sys

import pytest
import redis
from rest_framework.test import APIClient

from agentos_project.core.conf import current

from .fake_openai import FakeOpenAI
from .support.database import close_pools
from .support.processes import ChildProcess, ServeProcess, WebProcess, WorkerProcess, embedded_env, process_env

# What makes a test `slow` (pyproject.toml's marker; `make test-fast` runs the others): a real process of ours or a
# browser, which every test of tests/e2e has, and tests elsewhere have through these fixtures.
PROCESS_FIXTURES = {"start_worker", "start_sweeper", "start_web", "start_serve", "browser", "throwaway_postgres"}


def pytest_collection_modifyitems(items):
    for item in items:
        if "e2e" in item.path.parts or PROCESS_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)


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
