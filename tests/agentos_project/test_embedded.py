"""The embedded PostgreSQL and Redis: a first start opens no folder it does not own, and both want a password."""

import os
import shutil
import uuid
from pathlib import Path

import psycopg2
import pytest
import redis

from agentos_project.embedded import SHARED, EmbeddedPostgres, EmbeddedRedis
from tests.support.http import free_port
from tests.support.processes import ROOT

pytestmark = pytest.mark.slow


def modes_above(*paths: Path) -> dict[str, int]:
    return {str(folder): folder.stat().st_mode for path in paths for folder in [path, *path.parents] if folder.exists()}


@pytest.fixture
def first_starts(tmp_path):
    """Folders never started before: one inside the checkout, one under pytest's private (0700) temp folder."""
    roots = [ROOT / ".run" / f"first-start-{uuid.uuid4().hex[:8]}", tmp_path / "run"]
    yield roots
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def test_a_first_start_changes_no_folder_mode_and_refuses_connections_without_the_password(first_starts):
    wheel_bin = EmbeddedPostgres(first_starts[0]).bin
    before = modes_above(ROOT, first_starts[1].parent, wheel_bin)

    for root in first_starts:
        server = EmbeddedPostgres(root, f"postgresql://postgres@127.0.0.1:{free_port()}/agentos")
        url = server.start()
        try:
            psycopg2.connect(url).close()
            for password in (None, "guess"):
                with pytest.raises(psycopg2.OperationalError, match="password"):
                    psycopg2.connect(host="127.0.0.1", port=server.port, user="postgres", password=password)
            assert (root / "postgres.password").stat().st_mode & 0o777 == 0o600
            if os.geteuid() == 0:
                assert server.pgdata.owner() == "embedded_postgres"
                beyond_reach = root == first_starts[1]
                assert server.pgdata.is_relative_to(SHARED) == beyond_reach, server.pgdata
        finally:
            server.stop()
            shutil.rmtree(server.pgdata.parent if server.pgdata.is_relative_to(SHARED) else server.pgdata)

    assert modes_above(ROOT, first_starts[1].parent, wheel_bin) == before


def test_the_embedded_redis_wants_its_password(tmp_path):
    server = EmbeddedRedis(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    url = server.start()
    try:
        assert redis.Redis.from_url(url).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port).ping()
    finally:
        server.stop()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()


def test_the_embedded_redis_is_bounded_and_evicts_event_buffers_never_broker_messages(tmp_path):
    server = EmbeddedRedis(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    client = redis.Redis.from_url(server.start())
    try:
        configured = (client.config_get("maxmemory")["maxmemory"], client.config_get("maxmemory-policy"))
        client.config_set("maxmemory", "4mb")  # the same policy, a bound the test can reach
        messages = [f"message {n} " + "m" * 200 for n in range(2000)]
        client.rpush("celery", *messages)  # a broker queue: a list without an expiry
        for n in range(400):  # ~8 MB of event buffers, each with its hour
            client.zadd(f"run:{n}:events", {f"event {i} " + "e" * 200: i for i in range(40)})
            client.expire(f"run:{n}:events", 3600)
        buffers = sum(1 for _ in client.scan_iter("run:*:events"))
        queued = client.lrange("celery", 0, -1)
    finally:
        server.stop()

    assert configured == (str(512 * 1024 * 1024), {"maxmemory-policy": "volatile-lru"})
    assert [message.decode() for message in queued] == messages
    assert 0 < buffers < 400
