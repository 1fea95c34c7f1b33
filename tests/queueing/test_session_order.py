"""Per-session order through the ticket API (CONTRACT 5): who may start, who waits on whom, who keeps a place."""

import pytest
from django.test import override_settings

from agentos_project.conf import current
from agents_registry.chat_models import StubModel
from agents_registry.components import Agent
from agents_registry.registry import registry
from queueing.executor import Outcome
from queueing.models import Ticket
from queueing.selectors import ticket_waiting_on
from queueing.tickets import RequeueResult, ticket_continue, ticket_requeue, ticket_retry
from queueing.worker import worker_execute
from runs.models import Run

from .conftest import accept, claim, finish, set_budget, snapshot

pytestmark = pytest.mark.django_db


def test_a_paused_holder_keeps_its_session_until_continued_and_finished(session_id):
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    owner = claim(a)
    assert finish(owner, "paused")

    assert claim(b) is None
    assert ticket_waiting_on(ticket_id=b) == a
    assert ticket_continue(ticket_id=a)
    assert claim(b) is None, "a continued run keeps its place"
    assert ticket_waiting_on(ticket_id=b) == a

    assert finish(claim(a), "completed")
    assert ticket_waiting_on(ticket_id=b) is None
    assert claim(b) is not None


def test_a_run_waiting_out_its_retry_backoff_keeps_its_place(session_id):
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    set_budget(a, 2)
    assert ticket_retry(claim=claim(a), outcome=Outcome("failed", error="boom", retryable=True), delay_seconds=60)

    assert claim(b) is None
    assert ticket_waiting_on(ticket_id=b) == a
    assert snapshot(a)["is_head"] is True


def test_a_requeued_run_goes_to_the_back_of_its_session(session_id):
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    assert finish(claim(a), "failed", error="boom")
    assert snapshot(b)["is_head"] is True

    assert ticket_requeue(ticket_id=a, grace_seconds=60, force=True) == RequeueResult.REQUEUED

    assert snapshot(a)["session_seq"] == snapshot(b)["session_seq"] + 1
    assert claim(a) is None
    assert ticket_waiting_on(ticket_id=a) == b
    assert finish(claim(b), "completed")
    assert claim(a) is not None


def test_waiting_on_names_the_head_not_the_run_just_ahead(session_id):
    a, b, c = (accept(session_id=session_id) for _ in range(3))
    claim(a)

    assert [ticket_waiting_on(ticket_id=t) for t in (a, b, c)] == [None, a, a]


def test_duplicate_and_early_messages_for_a_blocked_ticket_do_not_start_it(session_id):
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    claim(a)
    before = snapshot(b)

    assert worker_execute(ticket_id=b) is False
    assert worker_execute(ticket_id=b) is False
    assert snapshot(b) == before
    assert Run.objects.get(pk=b).status == "PENDING"


def test_the_end_of_a_run_hands_its_session_to_the_next_on_the_same_thread(session_id):
    a, b, c = (accept(session_id=session_id) for _ in range(3))

    assert worker_execute(ticket_id=a) is True

    runs = [Run.objects.get(pk=t) for t in (a, b, c)]
    assert [r.status for r in runs] == ["COMPLETED"] * 3
    assert runs[0].completed_at <= runs[1].started_at and runs[1].completed_at <= runs[2].started_at
    assert [r.content.rsplit("(", 1)[1] for r in runs] == [
        "history: 0 messages)",
        "history: 2 messages)",
        "history: 4 messages)",
    ]


def test_without_per_session_order_runs_neither_wait_nor_block(session_id):
    with override_settings(AGENTOS=current().replace("queue", per_session=False)):
        a, b = accept(session_id=session_id), accept(session_id=session_id)

    assert (snapshot(a)["serialized"], snapshot(b)["serialized"]) == (False, False)
    assert claim(a) is not None and claim(b) is not None
    assert ticket_waiting_on(ticket_id=b) is None


@pytest.fixture
def one_turn_agent():
    agent = registry.register(Agent(id="one-turn", name="One turn", model=StubModel(), one_turn_per_session=True))
    yield agent
    registry.unregister(agent.kind, agent.id)


def test_one_turn_per_session_components_are_serialized_even_without_order(session_id, one_turn_agent):
    with override_settings(AGENTOS=current().replace("queue", per_session=False)):
        a, b = accept(session_id=session_id, component="one-turn"), accept(session_id=session_id, component="one-turn")

    claim(a)
    assert claim(b) is None
    assert ticket_waiting_on(ticket_id=b) == a


def test_the_claim_itself_refuses_a_ticket_with_a_live_one_ahead(session_id):
    """Even if the head flag were wrong, the claim's own NOT EXISTS check keeps the order."""
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    Ticket.objects.filter(pk=a).update(is_head=False)
    Ticket.objects.filter(pk=b).update(is_head=True)

    assert claim(b) is None
