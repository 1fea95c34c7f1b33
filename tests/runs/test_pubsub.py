"""A web process's raw pub/sub connection (`runs.events.pubsub`), against the real Redis: it logs in as the URL
says and is named, and each read's replies come together, a reply longer than a read whole."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis
from redis.asyncio.connection import parse_url

from agentos_project.core import resp
from agentos_project.core.conf import current
from runs.events import pubsub


@pytest.fixture
def user(redis_db):
    """A Redis user of its own (ACL), removed afterwards: (name, password)."""
    name, password = f"agentos-test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    redis_db.execute_command("ACL", "SETUSER", name, "on", f">{password}", "~*", "&*", "+@all")
    yield name, password
    redis_db.execute_command("ACL", "DELUSER", name)


def url_for(name: str, password: str) -> str:
    options = parse_url(current().services.redis_url)
    return f"redis://{name}:{password}@{options.get('host', 'localhost')}:{options.get('port', 6379)}/0"


def client_named(redis_db, name: str) -> dict | None:
    return next((client for client in redis_db.client_list() if client["name"] == name), None)


def test_a_connection_logs_in_as_the_urls_user_under_its_name(redis_db, user):
    async def call():
        reader, writer = await pubsub.connect(url_for(*user), 2.0, name="agentos-test-hub")
        try:
            return client_named(redis_db, "agentos-test-hub")
        finally:
            writer.close()

    client = asyncio.run(call())

    assert client is not None and client["user"] == user[0]


def test_a_refused_login_is_a_connection_error_that_does_not_show_the_password(redis_db, user):
    async def call():
        await pubsub.connect(url_for(user[0], "not-the-password"), 2.0)

    with pytest.raises(redis.ConnectionError, match="Redis refused AUTH") as refused:
        asyncio.run(call())

    assert "not-the-password" not in str(refused.value)


def test_what_one_read_brought_comes_as_one_batch_and_a_long_message_whole(redis_db):
    channel = f"agentos-test-{uuid.uuid4().hex}"
    long = "x" * (3 * pubsub.READ_BYTES)

    async def call():
        reader, writer = await pubsub.connect(current().services.redis_url, 2.0)
        batches = pubsub.replies(reader)
        try:
            writer.write(resp.command("SUBSCRIBE", channel))
            confirmed = await anext(batches)
            with redis_db.pipeline(transaction=False) as pipeline:
                for message in ("one", "two", "three"):
                    pipeline.publish(channel, message)
                pipeline.execute()
            together = await anext(batches)
            redis_db.publish(channel, long)
            return confirmed, together, await anext(batches)
        finally:
            await batches.aclose()
            writer.close()

    confirmed, together, whole = asyncio.run(call())

    assert confirmed == [[b"subscribe", channel.encode(), 1]]
    assert together == [[b"message", channel.encode(), word] for word in (b"one", b"two", b"three")]
    assert whole == [[b"message", channel.encode(), long.encode()]]
