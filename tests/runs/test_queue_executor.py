"""The runs app under the queue: how each ticket change shows on the run, and what a leg's end writes."""

import datetime
import time

import pytest
from django.db.models import F
from django.db.models.functions import Now
from django.test import override_settings

from agentos_project.core.conf import current
from agents_registry.chat_models import StubModel, ToolCall
from agents_registry.components import Agent
from agents_registry.registry import registry
from agents_registry.tools import Tool
from queueing.models import Ticket
from queueing.seam import Outcome, get_executor
from queueing.selectors import ticket_running_for
from queueing.shutdown import INTERRUPTED
from queueing.sweeper import sweep_once
from queueing.tickets import (
    SWEEP_ERROR,
    RequeueResult,
    ticket_cancel,
    ticket_claim,
    ticket_continue,
    ticket_finish,
    ticket_requeue,
)
from queueing.worker import worker_execute
from runs.models import AgentSession, Run, RunEvent
from runs.selectors import session_history
from runs.services import cancel_signal
from runs.services.states import PARKED

from .conftest import accept_run

pytestmark = pytest.mark.django_db


def test_a_swept_run_is_error_with_the_sweep_text_and_a_stored_event(redis_db):
    run_id = accept_run(session_id="swept-1")
    ticket_claim(ticket_id=run_id, worker_id="gone", grace_seconds=60)
    Ticket.objects.filter(pk=run_id).update(locked_at=F("locked_at") - datetime.timedelta(hours=1))

    assert sweep_once(current().queue).failed == 1

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.content, run.attempt) == ("ERROR", SWEEP_ERROR, 1)
    assert list(RunEvent.objects.filter(run_id=run_id).values_list("event", "data__content")) == [
        ("RunError", SWEEP_ERROR)
    ]


@pytest.mark.parametrize(("state", "stage"), [("queued", "PENDING"), ("paused", "PAUSED")])
def test_cancelling_a_queued_or_paused_run_sets_its_stage(redis_db, state, stage):
    run_id = accept_run(session_id=f"cancel-{state}", message="delete sleep=0", component="hitl-agent")
    if state == "paused":
        assert worker_execute(ticket_id=run_id) is True
        assert Run.objects.get(pk=run_id).status == "PAUSED"

    assert ticket_cancel(ticket_id=run_id, error="cancelled before execution") == state

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.cancellation_stage, run.content) == ("CANCELLED", stage, "cancelled before execution")
    assert RunEvent.objects.filter(run_id=run_id).last().event == "RunCancelled"


def test_a_requeued_run_is_pending_again_with_its_output_cleared(redis_db):
    run_id = accept_run(session_id="requeue-1", message="explode sleep=0")
    worker_execute(ticket_id=run_id)
    assert Run.objects.get(pk=run_id).status == "ERROR"

    assert ticket_requeue(ticket_id=run_id, grace_seconds=60, force=True) == RequeueResult.REQUEUED

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.content, run.completed_at) == ("PENDING", None, None)


def test_an_attempt_longer_than_the_timeout_ends_with_the_contract_text(redis_db):
    run_id = accept_run(session_id="timeout-1", message="slow sleep=30")

    with override_settings(AGENTOS=current().replace("queue", timeout_seconds=0.2)):
        assert worker_execute(ticket_id=run_id) is True

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.content) == ("ERROR", "Run exceeded timeout_seconds=0.2")
    assert Ticket.objects.get(pk=run_id).error == "Run exceeded timeout_seconds=0.2"


def test_a_cancel_marked_on_the_row_before_the_leg_read_it_stops_the_run_at_once(redis_db):
    run_id = accept_run(session_id="marked-1", message="slow sleep=5")
    Run.objects.filter(pk=run_id).update(cancel_requested_at=Now())  # no intent in Redis, no announcement
    assert not cancel_signal.cancel_requested(run_id)

    started = time.monotonic()
    assert worker_execute(ticket_id=run_id) is True

    assert time.monotonic() - started < 2
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.cancellation_stage) == ("CANCELLED", "EXECUTING")
    assert Ticket.objects.get(pk=run_id).status == "cancelled"


class CallingModel:
    """A model that calls the tool `name` with `arguments` (a model's mistake the run loop cannot retry away)."""

    id, provider = "calling", "test"

    def __init__(self, name: str, arguments: dict):
        self.call = ToolCall(id="call_1", name=name, arguments=arguments)

    def stream(self, messages, tools, ctx):
        yield self.call


def read_file(path: str) -> str:
    return f"read {path}"


READ_FILE = Tool(name="read_file", description="", parameters={}, function=read_file, on_error="fail")


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (("read_file", {"file": "x"}), "Invalid arguments for tool read_file: read_file() got an unexpected keyword"),
        (("write_file", {"path": "x"}), "Agent calling-agent has no tool named 'write_file'"),
        (("retired", {}), "Component agent 'calling-agent' is not registered here"),
    ],
    ids=["invalid arguments", "unknown tool", "unregistered component"],
)
def test_a_permanent_error_is_not_retried_whatever_the_budget(redis_db, call, error):
    agent = registry.register(Agent(id="calling-agent", name="Calling", model=CallingModel(*call), tools=(READ_FILE,)))
    run_id = accept_run(session_id=f"permanent-{call[0]}", component="calling-agent", max_attempts=3)
    if call[0] == "retired":
        registry.unregister(agent.kind, agent.id)
    try:
        assert worker_execute(ticket_id=run_id) is True
    finally:
        registry.unregister(agent.kind, agent.id)

    ticket, run = Ticket.objects.get(pk=run_id), Run.objects.get(pk=run_id)
    assert (ticket.status, ticket.attempt, ticket.max_attempts, run.status) == ("failed", 1, 3, "ERROR")
    assert run.content.startswith(error) and ticket.error == run.content
    assert RunEvent.objects.filter(run_id=run_id).last().event == "RunError"


class WakeWatchingModel:
    """A model that notes the event its run sleeps on while it waits (`RunContext.woken`), and whether a cancel
    announced to the watcher sets it."""

    id, provider = "wake-watching", "test"

    def __init__(self):
        self.seen: list[tuple[bool, bool]] = []

    def stream(self, messages, tools, ctx):
        asleep = ctx.woken is not None and not ctx.woken.is_set()
        cancel_signal.watcher.notify(ctx.run_id)  # as the watcher does when a cancel is announced
        self.seen.append((asleep, ctx.woken is not None and ctx.woken.is_set()))
        yield "done"


def test_a_queued_run_sleeps_on_the_event_a_cancel_sets(redis_db):
    model = WakeWatchingModel()
    agent = registry.register(Agent(id="wake-watching", name="Wake", model=model))
    run_id = accept_run(session_id="wake-1", component="wake-watching")
    try:
        assert worker_execute(ticket_id=run_id) is True
    finally:
        registry.unregister(agent.kind, agent.id)

    assert model.seen == [(True, True)]
    assert Run.objects.get(pk=run_id).status == "CANCELLED"


def test_an_error_of_the_model_is_retried_while_budget_is_left(redis_db):
    run_id = accept_run(session_id="transient-1", message="explode sleep=0", max_attempts=3)

    assert worker_execute(ticket_id=run_id) is True

    ticket, run = Ticket.objects.get(pk=run_id), Run.objects.get(pk=run_id)
    assert (ticket.status, ticket.attempt, ticket.error, run.status) == ("queued", 1, "stub model exploded", "PENDING")


def test_the_hand_off_runs_the_session_in_order_each_run_seeing_the_history_before_it(redis_db):
    a, b, c = (accept_run(session_id="handoff-1", message=f"{n} sleep=0") for n in "abc")

    assert worker_execute(ticket_id=a) is True

    runs = [Run.objects.get(pk=t) for t in (a, b, c)]
    assert [r.status for r in runs] == ["COMPLETED"] * 3
    assert runs[0].completed_at <= runs[1].started_at and runs[1].completed_at <= runs[2].started_at
    assert [r.content for r in runs] == [
        "echo: a sleep=0 (history: 0 messages)",
        "echo: b sleep=0 (history: 2 messages)",
        "echo: c sleep=0 (history: 4 messages)",
    ]


@pytest.fixture
def one_turn_agent():
    agent = registry.register(Agent(id="one-turn", name="One turn", model=StubModel(), one_turn_per_session=True))
    yield agent
    registry.unregister(agent.kind, agent.id)


def test_one_turn_per_session_components_are_serialized_even_without_order(one_turn_agent):
    a = accept_run(session_id="one-turn-1", component="one-turn", per_session=False)
    b = accept_run(session_id="one-turn-1", component="one-turn", per_session=False)
    loose = accept_run(session_id="one-turn-2", per_session=False)

    assert [Ticket.objects.get(pk=t).serialized for t in (a, b, loose)] == [True, True, False]
    assert ticket_claim(ticket_id=a, worker_id="w", grace_seconds=60) is not None
    assert ticket_claim(ticket_id=b, worker_id="w", grace_seconds=60) is None


def test_an_answer_with_a_nul_completes_with_it_replaced_and_the_session_moves_on(redis_db):
    head = accept_run(session_id="nul-1", message="a \\u0000 b sleep=0")
    successor = accept_run(session_id="nul-1", message="next sleep=0")

    assert worker_execute(ticket_id=head) is True

    run = Run.objects.get(pk=head)
    assert (run.status, run.content) == ("COMPLETED", "echo: a \ufffd b sleep=0 (history: 0 messages)")
    assert RunEvent.objects.get(run_id=head, event="RunCompleted").data["content"] == run.content
    assert Run.objects.get(pk=successor).content == "echo: next sleep=0 (history: 2 messages)"


class UnstorableModel:
    """A model whose tool call, tool result, answer and session state hold what PostgreSQL refuses."""

    id, provider = "unstorable", "test"

    def stream(self, messages, tools, ctx):
        if not any(m["role"] == "tool" for m in messages):
            yield ToolCall(id="call_1", name="leak", arguments={"path": "x\x00"})
            return
        ctx.session_state["seen"] = "\ud800\x00"
        yield "done \udfff"


@pytest.fixture
def unstorable_agent():
    leak = Tool(name="leak", description="", parameters={}, function=lambda path: f"read {path}\x00")
    agent = registry.register(Agent(id="unstorable", name="Unstorable", model=UnstorableModel(), tools=(leak,)))
    yield agent
    registry.unregister(agent.kind, agent.id)


def test_nul_and_surrogates_in_tool_results_answers_and_state_are_stored_replaced(redis_db, unstorable_agent):
    run_id = accept_run(session_id="nul-2", component="unstorable")

    assert worker_execute(ticket_id=run_id) is True

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.content) == ("COMPLETED", "done \ufffd")
    tool_done = RunEvent.objects.get(run_id=run_id, event="ToolCallCompleted").data
    assert (tool_done["content"], tool_done["tool"]["tool_args"]) == ("read x\ufffd\ufffd", {"path": "x\ufffd"})
    session = AgentSession.objects.get(pk="nul-2")
    assert session.session_state == {"seen": "\ufffd\ufffd"}
    assert session_history(session_id="nul-2")[-1] == {"role": "assistant", "content": "done \ufffd"}


@pytest.fixture
def windowed_agent():
    agent = registry.register(Agent(id="windowed-2", name="Windowed", model=StubModel(), num_history_runs=2))
    yield agent
    registry.unregister(agent.kind, agent.id)


def test_a_component_with_a_history_window_sees_the_messages_of_its_last_runs_only(redis_db, windowed_agent):
    contents = []
    for turn in range(4):
        run_id = accept_run(session_id="window-1", message=f"turn {turn} sleep=0", component="windowed-2")
        assert worker_execute(ticket_id=run_id) is True
        contents.append(Run.objects.get(pk=run_id).content)

    assert contents == [
        "echo: turn 0 sleep=0 (history: 0 messages)",
        "echo: turn 1 sleep=0 (history: 2 messages)",
        "echo: turn 2 sleep=0 (history: 4 messages)",
        "echo: turn 3 sleep=0 (history: 4 messages)",
    ]
    assert [m["content"] for m in session_history(session_id="window-1", runs=2)] == [
        "turn 2 sleep=0",
        "echo: turn 2 sleep=0 (history: 4 messages)",
        "turn 3 sleep=0",
        "echo: turn 3 sleep=0 (history: 4 messages)",
    ]
    assert len(session_history(session_id="window-1")) == 8, "the whole history stays, a row per run"


def test_a_successor_found_after_a_lost_commit_answer_keeps_its_components_history_window(redis_db, windowed_agent):
    for turn in range(3):
        run_id = accept_run(session_id="window-2", message=f"turn {turn} sleep=0", component="windowed-2")
        assert worker_execute(ticket_id=run_id) is True
    successor = accept_run(session_id="window-2", message="turn 3 sleep=0", component="windowed-2")
    ticket_claim(ticket_id=successor, worker_id="w1", grace_seconds=60)  # as a hand-off whose answer was lost

    found = ticket_running_for(worker_id="w1", session_id="window-2", exclude=set())
    outcome = get_executor().execute(found)

    assert (found.ticket_id, outcome.status) == (successor, "completed")
    assert outcome.result.result.content == "echo: turn 3 sleep=0 (history: 4 messages)"


@pytest.mark.parametrize(
    ("outcome", "status", "stage", "content", "event"),
    [
        (Outcome("failed", error="lost its input"), "ERROR", None, "lost its input", "RunError"),
        (Outcome("cancelled"), "CANCELLED", "EXECUTING", "Run {run_id} was cancelled", "RunCancelled"),
    ],
)
def test_a_finish_with_no_leg_to_record_ends_the_run_in_the_same_message(
    redis_db, outcome, status, stage, content, event
):
    """An attempt that recorded no leg (interrupted, fenced, its outcome refused) is settled like any other: the
    run's end and its terminal event go with the ticket's change, after the events already stored."""
    run_id = accept_run(session_id=f"no-leg-{status}")
    owner = ticket_claim(ticket_id=run_id, worker_id="w-no-leg", grace_seconds=60)
    Run.objects.filter(pk=run_id).update(next_event_index=3)

    assert ticket_finish(claim=owner, outcome=outcome) is not None

    run = Run.objects.get(pk=run_id)
    expected = content.format(run_id=run_id)
    assert (run.status, run.cancellation_stage, run.content, run.next_event_index) == (status, stage, expected, 4)
    assert run.completed_at is not None
    stored = list(
        RunEvent.objects.filter(run_id=run_id).values_list("event_index", "attempt", "event", "data__content")
    )
    assert stored == [(3, 1, event, expected)]
    assert Ticket.objects.get(pk=run_id).status == outcome.status


def test_a_stale_attempt_with_no_leg_to_record_writes_nothing(redis_db):
    run_id = accept_run(session_id="no-leg-stale", max_attempts=2)
    stale = ticket_claim(ticket_id=run_id, worker_id="w-stale", grace_seconds=60)
    Ticket.objects.filter(pk=run_id).update(locked_at=F("locked_at") - datetime.timedelta(hours=1))
    ticket_claim(ticket_id=run_id, worker_id="w-new", grace_seconds=60)  # the lease is taken over (attempt 2)
    before = Run.objects.filter(pk=run_id).values().get()

    assert ticket_finish(claim=stale, outcome=Outcome("failed", error="late")) is None

    assert Run.objects.filter(pk=run_id).values().get() == before
    assert not RunEvent.objects.filter(run_id=run_id).exists()


def test_a_continuation_interrupted_before_it_ran_a_tool_is_paused_again_in_the_finish(redis_db):
    run_id = accept_run(session_id="no-leg-park", message="delete sleep=0", component="hitl-agent")
    assert worker_execute(ticket_id=run_id) is True
    paused = Run.objects.get(pk=run_id)
    tools = paused.tools
    Run.objects.filter(pk=run_id).update(continued_tools=[{**tools[0], "confirmed": True}])
    ticket_continue(ticket_id=run_id)
    owner = ticket_claim(ticket_id=run_id, worker_id="w-park", grace_seconds=60)

    assert ticket_finish(claim=owner, outcome=Outcome("paused", error=INTERRUPTED)) is not None

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.continued_tools, run.tools, run.attempt) == ("PAUSED", None, tools, 2)
    last = RunEvent.objects.filter(run_id=run_id).last()
    assert (last.event, last.attempt, last.event_index) == ("RunPaused", 2, paused.next_event_index)
    assert last.data["content"] == PARKED
    assert (run.next_event_index, Ticket.objects.get(pk=run_id).status) == (paused.next_event_index + 1, "paused")
