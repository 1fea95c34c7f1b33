"""Publishing: the messages agentos writes into a Redis broker are the ones Celery would write."""

from __future__ import annotations

import json

import pytest
from celery import current_app

from agentos_project.celery import app
from queueing import router
from tests.support.waiting import in_threads

from .conftest import BROKER_QUEUE

pytestmark = pytest.mark.django_db

TICKET = "11111111-2222-3333-4444-555555555555"
FRESH = {("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id"), ("properties", "delivery_tag")}


def queued(redis_db) -> list[dict]:
    return [json.loads(raw) for raw in reversed(redis_db.lrange(BROKER_QUEUE, 0, -1))]


def flat(message: dict) -> dict:
    return {(part, key): value for part in ("headers", "properties") for key, value in message[part].items()} | {
        (key, None): value for key, value in message.items() if key not in ("headers", "properties")
    }


def test_a_message_written_straight_into_the_queue_is_the_one_celery_writes(redis_db):
    router.send_through_celery([(TICKET, None)])  # through Celery's send_task
    assert router.publish_many([(TICKET, None)]) == 1  # written by agentos
    celery, ours = (flat(message) for message in queued(redis_db))

    assert set(ours) == set(celery)
    assert {key: value for key, value in ours.items() if key not in FRESH} == {
        key: value for key, value in celery.items() if key not in FRESH
    }
    assert ours[("headers", "id")] == ours[("headers", "root_id")] == ours[("properties", "correlation_id")]
    assert ours[("headers", "id")] != celery[("headers", "id")]


def test_a_batch_marks_every_ticket_and_sends_a_countdown_through_celery_to_its_own_queue(redis_db):
    assert router.publish_many([("t-now", None), ("t-later", 30.0)]) == 2

    [now] = queued(redis_db)
    [later] = [json.loads(raw) for raw in redis_db.lrange(router.celery_queue(), 0, -1)]
    assert (now["headers"]["argsrepr"], now["headers"]["eta"]) == ("['t-now']", None)
    assert (later["headers"]["argsrepr"], later["properties"]["delivery_info"]["routing_key"]) == (
        "['t-later']",
        "agentos.celery",
    )
    assert later["headers"]["eta"] is not None
    assert all(redis_db.exists(router.MARKER.format(t)) for t in ("t-now", "t-later"))
    assert 29 <= redis_db.ttl(router.MARKER.format("t-later")) - redis_db.ttl(router.MARKER.format("t-now")) <= 31


def test_the_queue_is_celerys_default_queue():
    assert app.conf.task_default_queue == router.execute_queue() == BROKER_QUEUE
    assert router.celery_queue() == "agentos.celery"


def test_the_queue_finds_the_projects_celery_app_from_any_thread():
    # queueing reaches the app as Celery's current_app (it imports nothing of the composition root): Celery's Django
    # fixup makes the project's app the default one, so a thread that made no app (a request's, a worker pool's)
    # finds it too, not Celery's fallback app with its default broker and queue.
    found = in_threads(1, lambda _: (current_app._get_current_object(), router.execute_queue()))
    assert found == [(app, app.conf.task_default_queue)]
    assert app.conf.task_default_queue != "celery"
