"""What the step journal promises a run (docs/operations.md, "Durable steps"), in one process with the real
executor: a retry, a continue and a requeue each see what a run without faults would: the session state its
completed tools left, the history its first attempt saw, and no completed tool called twice. (Kills of real
workers: tests/e2e/test_durable_steps.py.)"""

from __future__ import annotations

import datetime
import json
import threading

import pytest
from django.db import connection
from django.db.models import F

from agentos_project.core.conf import current
from agents_registry.chat_models import ToolCall
from agents_registry.components import Agent
from agents_registry.context import RunContext
from agents_registry.journal import TOOL
from agents_registry.registry import registry
from agents_registry.tools import tool
from queueing import shutdown
from queueing.models import Ticket
from queueing.seam import get_executor, register_executor
from queueing.sweeper import sweep_once
from queueing.tickets import ticket_claim, ticket_requeue
from queueing.worker import worker_execute
from runs.events.sink import EventSink
from runs.models import AgentSession, Run, Step
from runs.services.journal import TAKEN, RunJournal

from .conftest import accept_run

pytestmark = pytest.mark.django_db(transaction=True)
CALLS: list[str] = []


@tool
def note(text: str, ctx: RunContext) -> str:
    """Keep a note in the session."""
    CALLS.append(f"note {text}")
    ctx.session_state.setdefault("notes", []).append(text)
    return f"noted {text}"


@tool(requires_confirmation=True)
def refund(amount: int, ctx: RunContext) -> str:
    """Refund the customer, once a person confirms."""
    CALLS.append(f"refund {amount}")
    ctx.session_state["refunded"] = amount
    return f"refunded {amount}"


@tool(requires_confirmation=True)
def refund_at_shutdown(amount: int, ctx: RunContext) -> str:
    """Refund the customer; the worker's drain window closes as it returns."""
    CALLS.append(f"refund {amount}")
    ctx.session_state["refunded"] = amount
    shutdown._interrupt()
    return f"refunded {amount}"


class Scripted:
    """Answers by how many tool results the request carries after its last user message: `script[n]` is a list of
    tool calls (name, arguments), or the answer's text; raises at the requests numbered in `fail_at` (1-based, over
    every request sent)."""

    id, provider = "scripted", "test"

    def __init__(self, script: list):
        self.script, self.requests, self.fail_at = script, [], set()

    def stream(self, messages, tools, ctx):
        self.requests.append(list(messages))
        if len(self.requests) in self.fail_at:
            raise ConnectionError("the provider went away")
        last_user = max(number for number, message in enumerate(messages) if message["role"] == "user")
        done = sum(1 for message in messages[last_user:] if message["role"] == "tool")
        step = self.script[min(done, len(self.script) - 1)]
        if isinstance(step, str):
            yield f"{step} (history: {sum(1 for m in messages if m['role'] == 'user') - 1} earlier turns)"
            return
        for number, (name, arguments) in enumerate(step):
            yield ToolCall(f"call_{done}_{number}", name, arguments)


@pytest.fixture
def agent():
    """Registers `Agent(id="notes")` with the tools and a scripted model; yields a function that does it."""
    registered = []

    def make(script: list) -> Scripted:
        CALLS.clear()
        model = Scripted(script)
        registered.append(registry.register(Agent(id="notes", model=model, tools=(note, refund, refund_at_shutdown))))
        return model

    yield make
    for component in registered:
        registry.unregister(component.kind, component.id)


def executed_again(run_id: str) -> None:
    """The ticket's retry made due now, and executed."""
    Ticket.objects.filter(pk=run_id).update(available_at=F("created_at"))
    assert worker_execute(ticket_id=run_id) is True


def state(session_id: str) -> dict:
    return AgentSession.objects.get(pk=session_id).session_state


def continued(api, run_id: str, session_id: str) -> None:
    tools = [{**call, "confirmed": True} for call in Run.objects.get(pk=run_id).tools]
    fields = {"background": "true", "stream": "false", "session_id": session_id, "tools": json.dumps(tools)}
    response = api.post(f"/agents/notes/runs/{run_id}/continue", fields, format="multipart")
    assert response.status_code == 202, response.content
    assert worker_execute(ticket_id=run_id) is True


def requeued(run_id: str) -> None:
    assert ticket_requeue(ticket_id=run_id, grace_seconds=60, force=True).value == "requeued"
    assert worker_execute(ticket_id=run_id) is True


def test_a_replayed_tool_leaves_the_session_state_it_left_the_first_time(agent, redis_db):
    model = agent([[("note", {"text": "a"})], [("note", {"text": "b"})], "done"])
    model.fail_at = {3}
    run_id = accept_run(session_id="jp-1", component="notes", max_attempts=2)
    assert worker_execute(ticket_id=run_id) is True
    assert Run.objects.get(pk=run_id).status == "PENDING"

    executed_again(run_id)

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert CALLS == ["note a", "note b"]
    assert state("jp-1") == {"notes": ["a", "b"]}


def test_a_continuation_starts_from_the_state_its_paused_leg_reached(agent, api, redis_db):
    agent([[("note", {"text": "a"})], [("refund", {"amount": 5})], "done"])
    run_id = accept_run(session_id="jp-2", component="notes")
    assert worker_execute(ticket_id=run_id) is True
    assert Run.objects.get(pk=run_id).status == "PAUSED"
    assert state("jp-2") == {}, "a paused run leaves the session's state as it was"

    continued(api, run_id, "jp-2")

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert state("jp-2") == {"notes": ["a"], "refunded": 5}


def test_a_retried_continuation_replays_its_tool_with_the_state_it_left(agent, api, redis_db):
    model = agent([[("note", {"text": "a"})], [("refund", {"amount": 5})], "done"])
    model.fail_at = {3}  # the model call after the confirmed refund
    run_id = accept_run(session_id="jp-3", component="notes", max_attempts=2)
    worker_execute(ticket_id=run_id)
    continued(api, run_id, "jp-3")
    assert Run.objects.get(pk=run_id).status == "PENDING"

    executed_again(run_id)

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert CALLS == ["note a", "refund 5"]
    assert state("jp-3") == {"notes": ["a"], "refunded": 5}


def test_a_requeue_after_its_session_moved_on_replays_what_it_had_done(agent, redis_db):
    model = agent([[("note", {"text": "a"})], [("note", {"text": "b"})], "done"])
    model.fail_at = {3}
    run_id = accept_run(session_id="jp-4", component="notes", max_attempts=1)
    worker_execute(ticket_id=run_id)
    assert Run.objects.get(pk=run_id).status == "ERROR"
    later = accept_run(session_id="jp-4", component="notes")
    assert worker_execute(ticket_id=later) is True
    assert Run.objects.get(pk=later).status == "COMPLETED"
    CALLS.clear()

    requeued(run_id)

    run = Run.objects.get(pk=run_id)
    assert run.status == "COMPLETED"
    assert run.content == "done (history: 0 earlier turns)", "it sees the history its first attempt saw"
    assert CALLS == [], "its two completed notes were replayed, not made again"
    assert [step["replays"] for step in Step.objects.filter(run_id=run_id).values("replays")] == [1, 1, 1, 1, 0]


def test_a_retry_with_unordered_sessions_replays_though_another_run_completed_meanwhile(agent, redis_db):
    model = agent([[("note", {"text": "a"})], [("note", {"text": "b"})], "done"])
    model.fail_at = {3}
    run_id = accept_run(session_id="jp-5", component="notes", max_attempts=2, per_session=False)
    worker_execute(ticket_id=run_id)
    other = accept_run(session_id="jp-5", component="notes", per_session=False)
    assert worker_execute(ticket_id=other) is True
    assert Run.objects.get(pk=other).status == "COMPLETED"
    CALLS.clear()

    executed_again(run_id)

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.content) == ("COMPLETED", "done (history: 0 earlier turns)")
    assert CALLS == []


def test_a_run_cancelled_after_a_continue_and_requeued_replays_its_first_legs_tools(agent, api, redis_db):
    agent([[("note", {"text": "a"})], [("refund", {"amount": 5})], [("refund", {"amount": 7})], "done"])
    run_id = accept_run(session_id="jp-6", component="notes")
    worker_execute(ticket_id=run_id)
    continued(api, run_id, "jp-6")  # refunds 5, then pauses again on the refund of 7
    assert Run.objects.get(pk=run_id).status == "PAUSED"
    assert api.post(f"/agents/notes/runs/{run_id}/cancel?session_id=jp-6").status_code == 200
    CALLS.clear()

    requeued(run_id)  # from its input again: it pauses on the refund of 5, as it did
    assert CALLS == [], "the note of its first leg was replayed"
    run = Run.objects.get(pk=run_id)
    assert (run.status, [call["tool_args"] for call in run.tools]) == ("PAUSED", [{"amount": 5}])

    continued(api, run_id, "jp-6")
    assert CALLS == [], "the refund of 5 its earlier continue confirmed and ran was replayed too"
    continued(api, run_id, "jp-6")

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert CALLS == ["refund 7"]
    assert state("jp-6") == {"notes": ["a"], "refunded": 7}


@tool
def shout(text: str) -> str:
    """Say it loud, with a NUL."""
    CALLS.append(f"shout {text}")
    return f"{text.upper()}\x00!"


def test_a_nul_in_a_tools_result_or_arguments_does_not_break_the_replay(redis_db):
    CALLS.clear()
    model = Scripted([[("shout", {"text": "a\x00b"})], [("shout", {"text": "c"})], "done"])
    model.fail_at = {3}
    registry.register(Agent(id="shouter", model=model, tools=(shout,)))
    try:
        run_id = accept_run(session_id="jp-7", component="shouter", max_attempts=2)
        worker_execute(ticket_id=run_id)
        executed_again(run_id)
    finally:
        registry.unregister("agent", "shouter")

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert CALLS == ["shout a\ufffdb", "shout c"], "each tool ran once, with its arguments as they are stored"


class Racing:
    """The registered executor, but while the sweeper has it answer for a lost attempt, a zombie of that attempt
    (`write`) tries to journal its confirmed tool's start: given up to a second to get in."""

    def __init__(self, executor, write):
        self.executor, self.write, self.outcome = executor, write, []

    def __getattr__(self, name):
        return getattr(self.executor, name)

    def lost_attempt(self, ticket_id):
        answer = self.executor.lost_attempt(ticket_id)
        zombie = threading.Thread(target=self._zombie)
        zombie.start()
        zombie.join(1.0)
        self.thread = zombie
        return answer

    def _zombie(self):
        try:
            self.write()
            self.outcome.append("written")
        except RuntimeError as refused:
            self.outcome.append(str(refused))
        finally:
            connection.close()


def test_a_zombie_continuation_cannot_start_its_tool_between_the_sweepers_answer_and_the_park(agent, api, redis_db):
    agent([[("refund", {"amount": 5})], "done"])
    run_id = accept_run(session_id="jp-8", component="notes")
    worker_execute(ticket_id=run_id)
    fields = {"background": "true", "stream": "false", "session_id": "jp-8"}
    tools = [{**call, "confirmed": True} for call in Run.objects.get(pk=run_id).tools]
    assert api.post(f"/agents/notes/runs/{run_id}/continue", {**fields, "tools": json.dumps(tools)}).status_code == 202
    claim = ticket_claim(ticket_id=run_id, worker_id="frozen", grace_seconds=60)  # its worker then froze
    Ticket.objects.filter(pk=run_id).update(locked_at=F("locked_at") - datetime.timedelta(hours=1))
    run = Run.objects.get(pk=run_id)

    def write():  # what the zombie does first when it wakes: journal the confirmed refund's start
        journal = RunJournal(run, EventSink(run, claim.attempt, 0), attempt=claim.attempt, entries={}, max_bytes=1024)
        journal.replay(TOOL, lambda: "f" * 32, {"name": "refund", "call_id": "call_0_0", "arguments": {"amount": 5}})
        journal.started()

    racing = Racing(get_executor(), write)
    register_executor(racing)
    try:
        report = sweep_once(current().queue)
    finally:
        register_executor(racing.executor)
    racing.thread.join(10)

    assert report.parked == 1
    assert Run.objects.get(pk=run_id).status == "PAUSED"
    assert racing.outcome == [TAKEN], "the zombie's write waited for the park, then was refused: no refund ran"
    assert not Step.objects.filter(run_id=run_id, kind=TOOL).exists()


def test_a_continuation_interrupted_by_a_shutdown_after_its_tool_resumes_though_it_has_no_budget(agent, api, redis_db):
    agent([[("refund_at_shutdown", {"amount": 5})], "done"])
    run_id = accept_run(session_id="jp-9", component="notes")
    worker_execute(ticket_id=run_id)
    try:
        continued(api, run_id, "jp-9")  # the refund runs, then the drain window closes: the leg stops
    finally:
        shutdown._State.interrupted.clear()
    ticket = Ticket.objects.get(pk=run_id)
    assert (ticket.status, ticket.attempt, ticket.max_attempts, ticket.error) == ("queued", 2, 3, shutdown.INTERRUPTED)
    assert Run.objects.get(pk=run_id).status == "PENDING"

    executed_again(run_id)

    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert CALLS == ["refund 5"], "the next attempt replayed the refund"
    assert state("jp-9") == {"refunded": 5}
