"""The worker's handling of messages, and what accept publishes, read back from the real Redis broker."""

import base64
import datetime
import json
import time

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from agentos_project.conf import current
from agents_registry.chat_models import StubModel
from agents_registry.components import Agent
from agents_registry.registry import registry
from queueing import router
from queueing.executor import Outcome
from queueing.tickets import ticket_finish, ticket_retry
from queueing.worker import worker_execute
from runs.models import Run

from .conftest import accept, claim, set_budget, snapshot

QUEUE = "agentos"


def broker_messages(redis_db) -> list[dict]:
    """The Celery messages waiting in the test broker, oldest first: (args, kwargs, headers)."""
    messages = []
    for raw in reversed(redis_db.lrange(QUEUE, 0, -1)):
        envelope = json.loads(raw)
        args, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
        messages.append({"args": args, "kwargs": kwargs, "headers": envelope["headers"]})
    return messages


@pytest.mark.django_db(transaction=True)
def test_accept_publishes_only_after_commit_and_the_message_carries_only_the_ticket_id(redis_db):
    with transaction.atomic():
        ticket_id = accept(session_id="publish-1")
        assert router.publisher.flush()
        assert broker_messages(redis_db) == []

    assert router.publisher.flush()
    messages = broker_messages(redis_db)
    assert [(m["args"], m["kwargs"], m["headers"]["task"]) for m in messages] == [
        ([ticket_id], {}, "agentos.execute_ticket")
    ]


@pytest.mark.django_db(transaction=True)
def test_a_ticket_behind_its_session_head_gets_no_message(redis_db):
    accept(session_id="publish-2")
    accept(session_id="publish-2")

    assert router.publisher.flush()
    assert len(broker_messages(redis_db)) == 1


@pytest.mark.django_db
def test_an_early_message_for_a_ticket_in_backoff_is_published_again_for_when_it_ends(redis_db):
    ticket_id = accept(session_id="early-1")
    set_budget(ticket_id, 2)
    owner = claim(ticket_id)
    assert ticket_retry(claim=owner, outcome=Outcome("failed", error="boom", retryable=True), delay_seconds=60)
    redis_db.delete(QUEUE)

    assert worker_execute(ticket_id=ticket_id) is False

    [message] = broker_messages(redis_db)
    assert message["args"] == [ticket_id]
    eta = datetime.datetime.fromisoformat(message["headers"]["eta"])
    assert timezone.now() + datetime.timedelta(seconds=50) < eta < timezone.now() + datetime.timedelta(seconds=61)


@pytest.mark.django_db
def test_a_message_for_a_finished_ticket_is_dropped(redis_db):
    ticket_id = accept(session_id="late-1")
    assert worker_execute(ticket_id=ticket_id) is True
    redis_db.delete(QUEUE)

    assert worker_execute(ticket_id=ticket_id) is False
    assert broker_messages(redis_db) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("hand_off", [True, False])
def test_the_end_of_a_head_claims_its_successor_in_the_same_transaction_or_publishes_it(redis_db, hand_off):
    head, successor = accept(session_id=f"handoff-{hand_off}"), accept(session_id=f"handoff-{hand_off}")
    assert router.publisher.flush()
    redis_db.delete(QUEUE)

    finished = ticket_finish(claim=claim(head), outcome=Outcome("completed"), hand_off=hand_off)
    assert router.publisher.flush()

    run = Run.objects.get(pk=successor)
    if hand_off:
        assert (finished.next_claim.ticket_id, finished.next_claim.attempt) == (successor, 1)
        assert snapshot(successor)["status"] == "running"
        assert (run.status, run.attempt) == ("RUNNING", 1)
        assert run.started_at >= snapshot(head)["completed_at"]
        assert broker_messages(redis_db) == []
    else:
        assert finished.next_claim is None
        assert (snapshot(successor)["status"], run.status) == ("queued", "PENDING")
        assert [m["args"] for m in broker_messages(redis_db)] == [[successor]]


@pytest.mark.django_db
def test_an_attempt_longer_than_the_timeout_ends_with_the_contract_text(redis_db):
    ticket_id = accept(session_id="timeout-1", message="slow sleep=30")

    with override_settings(AGENTOS=current().replace("queue", timeout_seconds=0.2)):
        started = time.monotonic()
        assert worker_execute(ticket_id=ticket_id) is True

    assert time.monotonic() - started < 5
    run = Run.objects.get(pk=ticket_id)
    assert (run.status, run.content) == ("ERROR", "Run exceeded timeout_seconds=0.2")
    assert snapshot(ticket_id)["error"] == "Run exceeded timeout_seconds=0.2"


@pytest.mark.django_db
def test_a_permanent_error_is_not_retried_whatever_the_budget(redis_db):
    agent = registry.register(Agent(id="retired-agent", name="Retired", model=StubModel()))
    ticket_id = accept(session_id="permanent-1", component="retired-agent")
    set_budget(ticket_id, 3)
    registry.unregister(agent.kind, agent.id)

    assert worker_execute(ticket_id=ticket_id) is True

    assert (snapshot(ticket_id)["status"], snapshot(ticket_id)["attempt"]) == ("failed", 1)
    assert Run.objects.get(pk=ticket_id).content == "Component agent 'retired-agent' is not registered here"
