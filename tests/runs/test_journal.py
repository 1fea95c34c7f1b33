"""The step journal under the queue, in one process: what a leg writes as its steps complete, what a later attempt
replays, where a replay stops, and the fence, the size limit and pruning (processes and kills: tests/e2e)."""

from __future__ import annotations

import datetime

import pytest
from django.db.models import F

from agentos_project.core.conf import current
from agents_registry.chat_models import StubModel, ToolCall, Usage
from agents_registry.components import Agent, Team
from agents_registry.journal import COMPLETED, MODEL, TOOL
from agents_registry.registry import registry
from agents_registry.tools import tool
from queueing.models import Ticket
from queueing.sweeper import sweep_once
from queueing.tickets import ticket_claim, ticket_prune
from queueing.worker import worker_execute
from runs.events.sink import EventSink
from runs.models import Run, RunEvent, Step
from runs.services.journal import TAKEN, TOO_LARGE, RunJournal
from runs.services.submit import run_submit
from runs.submission import Submission
from tests.support.conf import with_conf

from .conftest import accept_run

pytestmark = pytest.mark.django_db


class ScriptedModel:
    """Asks for `lookup`, then `book`, then answers; raises at the request numbered in `fail_at` (1-based, counted
    over every request it was sent), as a provider's outage would."""

    id, provider = "scripted", "test"

    def __init__(self):
        self.requests: list[list[dict]] = []
        self.fail_at: set[int] = set()

    def stream(self, messages, tools, ctx):
        self.requests.append(list(messages))
        if len(self.requests) in self.fail_at:
            raise ConnectionError("the provider went away")
        done = [m["content"] for m in messages if m["role"] == "tool"]
        if len(done) == 0:
            yield ToolCall("call_1", "lookup", {"code": "A1"})
        elif len(done) == 1:
            yield ToolCall("call_2", "book", {"code": "A1"})
        else:
            yield f"booked after {' and '.join(done)}"
        yield Usage(input_tokens=10, output_tokens=2, total_tokens=12)


CALLS: list[str] = []


@tool
def lookup(code: str) -> str:
    """Look an order up."""
    CALLS.append("lookup")
    return f"{code} found"


@tool
def book(code: str) -> str:
    """Book it."""
    CALLS.append("book")
    return f"{code} booked"


@pytest.fixture
def booking():
    CALLS.clear()
    model = ScriptedModel()
    agent = registry.register(Agent(id="booking", name="Booking", model=model, tools=(lookup, book)))
    yield model
    registry.unregister(agent.kind, agent.id)


def executed_again(run_id: str) -> None:
    """The ticket's retry made due now, and executed."""
    Ticket.objects.filter(pk=run_id).update(available_at=F("created_at"))
    assert worker_execute(ticket_id=run_id) is True


def journal(run_id: str) -> list[tuple]:
    steps = Step.objects.filter(run_id=run_id).order_by("leg", "position")
    return list(steps.values_list("position", "kind", "tool", "status", "attempt", "replays"))


def test_a_leg_journals_each_step_and_a_retry_replays_them_calling_nothing_again(booking):
    booking.fail_at = {3}  # the last model call, after both tools ran
    run_id = accept_run(session_id="journal-1", component="booking", max_attempts=2)

    assert worker_execute(ticket_id=run_id) is True
    assert Run.objects.get(pk=run_id).status == "PENDING"
    assert journal(run_id) == [
        (0, MODEL, None, COMPLETED, 1, 0),
        (1, TOOL, "lookup", COMPLETED, 1, 0),
        (2, MODEL, None, COMPLETED, 1, 0),
        (3, TOOL, "book", COMPLETED, 1, 0),
    ]
    executed_again(run_id)

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.content) == ("COMPLETED", "booked after A1 found and A1 booked")
    assert CALLS == ["lookup", "book"]
    assert len(booking.requests) == 4, "three in the first attempt (the third failed), one in the second"
    assert booking.requests[3] == booking.requests[2]
    assert journal(run_id) == [
        (0, MODEL, None, COMPLETED, 1, 1),
        (1, TOOL, "lookup", COMPLETED, 1, 1),
        (2, MODEL, None, COMPLETED, 1, 1),
        (3, TOOL, "book", COMPLETED, 1, 1),
        (4, MODEL, None, COMPLETED, 2, 0),
    ]
    assert run.metrics["input_tokens"] == 30, "a replayed answer's tokens count: they are the run's"
    events = list(RunEvent.objects.filter(run_id=run_id).values_list("event", "attempt"))
    assert events == [
        ("RunStarted", 1),
        ("ToolCallStarted", 1),
        ("ToolCallCompleted", 1),
        ("ToolCallStarted", 1),
        ("ToolCallCompleted", 1),
        ("RunStarted", 2),
        ("CustomEvent", 2),
        ("RunCompleted", 2),
    ]


def test_a_replay_stops_at_the_first_step_whose_request_differs_and_forgets_what_followed(booking):
    booking.fail_at = {3}
    run_id = accept_run(session_id="journal-2", component="booking", max_attempts=2)
    worker_execute(ticket_id=run_id)
    Step.objects.filter(run_id=run_id, position=2).update(fingerprint="0" * 32)  # as if that request had changed

    executed_again(run_id)

    assert CALLS == ["lookup", "book", "book"], "the tool after the differing step ran again"
    assert journal(run_id) == [
        (0, MODEL, None, COMPLETED, 1, 1),
        (1, TOOL, "lookup", COMPLETED, 1, 1),
        (2, MODEL, None, COMPLETED, 2, 0),
        (3, TOOL, "book", COMPLETED, 2, 0),
        (4, MODEL, None, COMPLETED, 2, 0),
    ]


def test_a_run_of_one_model_call_journals_nothing():
    run_id = accept_run(session_id="journal-3", message="hello sleep=0")

    assert worker_execute(ticket_id=run_id) is True

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert journal(run_id) == []


def test_with_the_journal_off_a_retry_calls_everything_again(booking):
    booking.fail_at = {3}
    with with_conf("queue", step_journal=False):
        run_id = accept_run(session_id="journal-4", component="booking", max_attempts=2)
        worker_execute(ticket_id=run_id)
        executed_again(run_id)

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert CALLS == ["lookup", "book", "lookup", "book"]
    assert journal(run_id) == []


def test_an_attempt_whose_run_was_taken_writes_nothing_and_stops(booking, redis_db):
    run_id = accept_run(session_id="journal-5", component="booking")
    Run.objects.filter(pk=run_id).update(status="RUNNING", attempt=2)  # a newer attempt has claimed it
    run = Run.objects.get(pk=run_id)
    zombie = RunJournal(run, EventSink(run, 1, 0), attempt=1, entries={}, max_bytes=1 << 20)
    zombie.replay(TOOL, "f" * 32, {"name": "lookup", "call_id": "call_1", "arguments": {}})
    zombie.sink.emit("ToolCallStarted", {})

    with pytest.raises(RuntimeError, match=TAKEN):
        zombie.started()

    assert journal(run_id) == []
    assert not RunEvent.objects.filter(run_id=run_id).exists()


def test_a_step_larger_than_the_limit_fails_the_run_with_a_clear_error(booking):
    with with_conf("queue", step_max_bytes=1024):
        booking.fail_at = set()
        run_id = accept_run(session_id="journal-6", component="booking", message="x" * 10, max_attempts=2)
        CALLS.clear()
        original = lookup.function
        object.__setattr__(lookup, "function", lambda code: "y" * 2000)
        try:
            worker_execute(ticket_id=run_id)
        finally:
            object.__setattr__(lookup, "function", original)

    run = Run.objects.get(pk=run_id)
    assert run.status == "ERROR"
    assert run.content.startswith(TOO_LARGE.format(position=1, what="tool lookup", size=0, limit=1024).split(" is ")[0])
    assert run.content.endswith("above AGENTOS_STEP_MAX_BYTES=1024: it was not journaled, and the run cannot go on "
                                "without it")  # fmt: skip


def test_a_pruned_ticket_takes_its_runs_journal_with_it(booking):
    run_id = accept_run(session_id="journal-7", component="booking")
    worker_execute(ticket_id=run_id)
    assert len(journal(run_id)) == 5
    Ticket.objects.filter(pk=run_id).update(completed_at=F("completed_at") - datetime.timedelta(days=2))

    assert ticket_prune(retention_seconds=3600) == 1

    assert journal(run_id) == []
    assert Run.objects.get(pk=run_id).status == "COMPLETED", "the run itself stays"


@pytest.fixture
def team_of_stubs():
    member = Agent(id="scribe", name="Scribe", model=StubModel(default_sleep=0))
    team = registry.register(Team(id="scribes", leader=Agent(id="lead", model=StubModel(0)), members=(member,)))
    yield team
    registry.unregister(team.kind, team.id)


def test_a_leg_of_model_calls_only_keeps_each_answer_before_the_next_call(team_of_stubs):
    submission = Submission(
        component=team_of_stubs, message="hi sleep=0", session_id="journal-8", user_id=None,
        session_state=None, metadata=None, stream=False, background=True,
    )  # fmt: skip
    run_id = str(run_submit(submission=submission).run_id)

    assert worker_execute(ticket_id=run_id) is True

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert journal(run_id) == [(0, MODEL, None, COMPLETED, 1, 0), (1, MODEL, None, COMPLETED, 1, 0)]


def owned_journal(run_id: str) -> RunJournal:
    """The journal of the attempt that claimed the run just now, with one tool call started and its event."""
    claim = ticket_claim(ticket_id=run_id, worker_id="w", grace_seconds=60)
    run = Run.objects.get(pk=run_id)
    journal = RunJournal(run, EventSink(run, claim.attempt, 0), attempt=claim.attempt, entries={}, max_bytes=1 << 20)
    journal.sink.emit("RunStarted", {})
    journal.replay(TOOL, lambda: "f" * 32, {"name": "lookup", "call_id": "call_1", "arguments": {"code": "A1"}})
    journal.sink.emit("ToolCallStarted", {})
    return journal


def test_a_lost_runs_end_numbers_after_the_events_its_journal_stored_though_redis_lost_them(booking, redis_db):
    run_id = accept_run(session_id="journal-9", component="booking")
    owned_journal(run_id).started()
    assert list(RunEvent.objects.filter(run_id=run_id).values_list("event_index", "event")) == [
        (0, "RunStarted"),
        (1, "ToolCallStarted"),
    ]
    redis_db.flushdb()
    Ticket.objects.filter(pk=run_id).update(locked_at=F("locked_at") - datetime.timedelta(hours=1))

    sweep_once(current().queue)

    assert Run.objects.get(pk=run_id).status == "ERROR"
    assert list(RunEvent.objects.filter(run_id=run_id).values_list("event_index", "event")) == [
        (0, "RunStarted"),
        (1, "ToolCallStarted"),
        (2, "RunError"),
    ]


def test_the_leg_records_journal_statement_changes_nothing_so_a_settle_can_be_sent_again(booking, redis_db):
    run_id = accept_run(session_id="journal-10", component="booking")
    journal = owned_journal(run_id)
    journal.started()
    journal.replay(MODEL, lambda: "e" * 32)
    journal.completed(MODEL, {"text": "done", "calls": [], "reasoning": "", "usage": None}, duration=0.1)
    journal.sink.emit("RunCompleted", {})
    stored = list(journal.sink.stored)

    first, again = journal.write_call("fence"), journal.write_call("fence")

    assert first == again and first is not None
    assert journal.sink.stored == stored and len(journal.pending) == 1, "the events stay for the record to store"
    assert journal.write_call("fence", answered=False) is None, "a failed leg's answer is asked again, not kept"
