"""`POST .../continue` (CONTRACT 3.4, 11, 14), in-process with the real executor: each refusal changes nothing."""

from __future__ import annotations

import datetime
import json
import uuid

import pytest
from agno.run.requirement import RunRequirement
from django.db.models import F

from agentos_project.core.conf import current
from agents_registry.chat_models import ToolCall
from agents_registry.components import Agent
from agents_registry.registry import registry
from agents_registry.tools import tool
from queueing.models import Ticket
from queueing.seam import get_executor
from queueing.settle import settle_attempt
from queueing.sweeper import sweep_once
from queueing.tickets import ticket_claim
from queueing.worker import worker_execute, worker_identity
from runs.models import Run, RunEvent, Step
from tests.support.runs import submit

from .conftest import accept_run, row_counts

pytestmark = pytest.mark.django_db(transaction=True)
HITL = "/agents/hitl-agent/runs"


def paused_run(session_id: str, message: str = "please delete scratch sleep=0") -> str:
    run_id = accept_run(session_id=session_id, message=message, component="hitl-agent")
    assert worker_execute(ticket_id=run_id) is True
    assert Run.objects.get(pk=run_id).status == "PAUSED"
    return run_id


def decided(run_id: str, confirmed: bool) -> str:
    return json.dumps([{**tool, "confirmed": confirmed} for tool in Run.objects.get(pk=run_id).tools])


def continue_(api, run_id, **fields):
    return api.post(
        f"{HITL}/{run_id}/continue", {"background": "true", "stream": "false", **fields}, format="multipart"
    )


def snapshot(run_id: str) -> tuple:
    run = Run.objects.filter(pk=run_id).values().get()
    return row_counts(), run, Ticket.objects.filter(pk=run_id).values().get()


def test_a_continue_queues_the_same_ticket_with_one_more_attempt_in_its_place(api, redis_db):
    run_id = paused_run("ct-1")
    seq = Ticket.objects.get(pk=run_id).session_seq

    response = continue_(api, run_id, session_id="ct-1", tools=decided(run_id, True))

    assert (response.status_code, response.json()) == (
        202,
        {"run_id": run_id, "session_id": "ct-1", "status": "PENDING"},
    )
    ticket, run = Ticket.objects.get(pk=run_id), Run.objects.get(pk=run_id)
    assert (ticket.status, ticket.attempt, ticket.max_attempts, ticket.session_seq, ticket.is_head) == (
        "queued",
        1,
        2,
        seq,
        True,
    )
    assert run.status == "PENDING"
    assert [tool["confirmed"] for tool in run.continued_tools] == [True]
    assert run.tool_decisions == [run.continued_tools]

    again = continue_(api, run_id, session_id="ct-1", tools=decided(run_id, False))  # a double click
    assert (again.status_code, again.json()) == (202, response.json())
    assert Run.objects.get(pk=run_id).tool_decisions == run.tool_decisions


def test_the_continued_leg_applies_the_decisions_and_keeps_them(api, redis_db):
    run_id = paused_run("ct-2")
    continue_(api, run_id, session_id="ct-2", tools=decided(run_id, False))

    assert worker_execute(ticket_id=run_id) is True

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.attempt, run.content) == (
        "COMPLETED",
        2,
        "not done: The user rejected this tool call; it was not executed.",
    )
    assert run.continued_tools is None
    assert [[tool["confirmed"] for tool in leg] for leg in run.tool_decisions] == [[False]]


def test_a_paused_agents_poll_asks_its_requirements_and_a_finished_ones_does_not(api, redis_db):
    run_id = paused_run("ct-r1")

    paused = api.get(f"{HITL}/{run_id}", {"session_id": "ct-r1"}).json()
    [asked] = paused["requirements"]
    continue_(api, run_id, session_id="ct-r1", tools=json.dumps([{**asked["tool_execution"], "confirmed": True}]))
    assert worker_execute(ticket_id=run_id) is True
    done = api.get(f"{HITL}/{run_id}", {"session_id": "ct-r1"}).json()

    stored = RunEvent.objects.get(run_id=run_id, event="RunPaused").data
    assert (asked, asked["tool_execution"]) == (stored["requirements"][0], paused["tools"][0])
    assert (done["status"], "requirements" in done, "tools" in done) == ("COMPLETED", False, False)


def confirm(requirements: list[dict]) -> list[dict]:
    """As Agno's client confirms requirements it read: `RunRequirement.from_dict`, `confirm()`, `to_dict()`."""
    confirmed = [RunRequirement.from_dict(requirement) for requirement in requirements]
    for requirement in confirmed:
        requirement.confirm()
    return [requirement.to_dict() for requirement in confirmed]


@pytest.mark.parametrize(
    ("prefix", "field", "content"),
    [
        ("/teams/stub-team", "requirements", "echo: please delete scratch sleep=0 (history: 0 messages)"),
        ("/workflows/stub-workflow", "step_requirements", "echo: done: tool result received (history: 0 messages)"),
    ],
)
def test_a_team_or_a_workflow_continues_with_the_requirements_its_poll_asked(api, redis_db, prefix, field, content):
    run_id = submit(api, prefix=prefix, message="please delete scratch sleep=0", session_id="ct-r2").json()["run_id"]
    assert worker_execute(ticket_id=run_id) is True
    asked = api.get(f"{prefix}/runs/{run_id}", {"session_id": "ct-r2"}).json()[field]
    if field == "requirements":
        answer = confirm(asked)
    else:
        answer = [{**step, "executor_requirements": confirm(step["executor_requirements"])} for step in asked]

    response = api.post(
        f"{prefix}/runs/{run_id}/continue",
        {"session_id": "ct-r2", "background": "true", "stream": "false", field: json.dumps(answer)},
        format="multipart",
    )
    assert worker_execute(ticket_id=run_id) is True

    assert (response.status_code, response.json()["status"]) == (202, "PENDING")
    run = Run.objects.get(pk=run_id)
    assert ([[tool["confirmed"] for tool in leg] for leg in run.tool_decisions], run.status) == ([[True]], "COMPLETED")
    assert run.content == content


@pytest.mark.parametrize(
    ("prefix", "field"),
    [
        ("/agents/hitl-agent", "tools"),
        ("/teams/stub-team", "requirements"),
        ("/workflows/stub-workflow", "step_requirements"),
    ],
)
def test_a_continue_without_answers_is_422_naming_the_field_of_its_kind(api, redis_db, prefix, field):
    run_id = submit(api, prefix=prefix, message="please delete scratch sleep=0", session_id="ct-r3").json()["run_id"]
    assert worker_execute(ticket_id=run_id) is True
    before = snapshot(run_id)

    response = api.post(
        f"{prefix}/runs/{run_id}/continue",
        {"session_id": "ct-r3", "background": "true", "stream": "false"},
        format="multipart",
    )

    assert response.status_code == 422
    assert [(error["loc"], error["msg"]) for error in response.json()["detail"]] == [
        (["body", field], "This field is required.")
    ]
    assert snapshot(run_id) == before


def test_a_continue_while_its_leg_runs_is_409_with_retry_after(api, redis_db):
    run_id = paused_run("ct-3")
    continue_(api, run_id, session_id="ct-3", tools=decided(run_id, True))
    Run.objects.filter(pk=run_id).update(status="RUNNING")  # the leg has started
    before = snapshot(run_id)

    response = continue_(api, run_id, session_id="ct-3", tools=decided(run_id, True))

    assert (response.status_code, response.json()) == (
        409,
        {"detail": "Run is settling between execution legs; retry in a moment"},
    )
    assert response["Retry-After"] == "1"
    assert snapshot(run_id) == before


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no session", (400, "session_id is required for this action")),
        ("blank session", (400, "session_id is required for this action")),
        ("not paused", (409, "Run {run_id} is not paused (status: PENDING)")),
        ("cancelled", (409, "Cannot continue run {run_id}: run is cancelled")),
        (
            "not background",
            (
                409,
                "Run {run_id} was submitted through the durable queue; continue it with background=true (the queue "
                "owns its continuations).",
            ),
        ),
        (
            "stream of a non-stream run",
            (409, "Run was submitted non-streaming; poll run {run_id} instead of attaching a stream"),
        ),
        ("another session", (404, "Run not found")),
        ("unknown run", (404, "Run not found")),
    ],
)
def test_continue_refusals_change_nothing(api, redis_db, case, expected):
    run_id = accept_run(session_id="ct-4", component="hitl-agent") if case == "not paused" else paused_run("ct-4")
    if case == "cancelled":
        api.post(f"{HITL}/{run_id}/cancel")
    fields = {"session_id": "ct-4", "tools": json.dumps([])}
    target = run_id
    if case == "no session":
        del fields["session_id"]
    elif case == "blank session":
        fields["session_id"] = " "
    elif case == "not background":
        fields["background"] = "false"
    elif case == "stream of a non-stream run":
        fields["stream"] = "true"
    elif case == "another session":
        fields["session_id"] = "ct-other"
    elif case == "unknown run":
        target = str(uuid.uuid4())
    before = snapshot(run_id)

    response = continue_(api, target, **fields)

    status, detail = expected
    assert (response.status_code, response.json()) == (status, {"detail": detail.format(run_id=run_id)})
    assert snapshot(run_id) == before


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("not json", "Value is not a valid JSON list"),
        ('{"a": 1}', "Value is not a valid JSON list"),
        ("[1]", "each tool must be an object with its tool_call_id"),
        ("[]", "tool call {call} needs confirmed true or false"),
        ('[{"tool_call_id": "{call}", "confirmed": "yes"}]', "tool call {call} needs confirmed true or false"),
    ],
)
def test_decisions_that_do_not_answer_every_pending_call_are_422(api, redis_db, tools, message):
    run_id = paused_run("ct-5")
    call = Run.objects.get(pk=run_id).tools[0]["tool_call_id"]
    before = snapshot(run_id)

    response = continue_(api, run_id, session_id="ct-5", tools=tools.replace("{call}", call))

    assert response.status_code == 422
    assert [error["msg"] for error in response.json()["detail"]] == [message.format(call=call)]
    assert snapshot(run_id) == before


def test_cancel_of_a_paused_run_ends_it_with_stage_paused_and_its_session_goes_on(api, redis_db):
    run_id = paused_run("ct-6")
    follow_up = accept_run(session_id="ct-6", component="hitl-agent")

    api.post(f"{HITL}/{run_id}/cancel")
    refused = continue_(api, run_id, session_id="ct-6", tools=decided(run_id, True))

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.cancellation_stage, run.content) == (
        "CANCELLED",
        "PAUSED",
        "cancelled while paused awaiting continuation",
    )
    assert Ticket.objects.get(pk=follow_up).is_head
    assert (refused.status_code, refused.json()) == (409, {"detail": f"Cannot continue run {run_id}: run is cancelled"})


def tool_step(run_id: str, attempt: int, status: str) -> Step:
    """What a continuation's journal writes of its first confirmed tool: `started` before it runs, `completed`
    when it returned."""
    run = Run.objects.get(pk=run_id)
    call = run.continued_tools[0]
    return Step.objects.create(
        run_id=run_id, leg=len(run.tool_decisions), position=0, kind="tool", fingerprint="f" * 32, status=status,
        tool=call["tool_name"], call_id=call["tool_call_id"], arguments=call["tool_args"], attempt=attempt,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("journaled", "ending"),
    [(None, ("PAUSED", "paused")), ("started", ("ERROR", "failed")), ("completed", ("PENDING", "queued"))],
)
def test_a_lost_continuation_is_parked_if_it_ran_no_tool_resumed_if_it_completed_one(api, redis_db, journaled, ending):
    """Parked when it started no tool; resumed (queued once more) when it completed one: the next attempt replays
    it; failed when it only started one, which may kill its worker every time."""
    session = f"ct-7-{journaled}"
    run_id = paused_run(session)
    continue_(api, run_id, session_id=session, tools=decided(run_id, True))
    claim = ticket_claim(ticket_id=run_id, worker_id="gone", grace_seconds=60)
    if journaled:
        tool_step(run_id, claim.attempt, journaled)
    Ticket.objects.filter(pk=run_id).update(locked_at=F("locked_at") - datetime.timedelta(hours=1))

    sweep_once(current().queue)

    run, ticket = Run.objects.get(pk=run_id), Ticket.objects.get(pk=run_id)
    assert (run.status, ticket.status) == ending
    if journaled is None:
        assert run.continued_tools is None and run.tools[0]["confirmed"] is None  # to be decided again
        assert RunEvent.objects.filter(run_id=run_id).last().event == "RunPaused"
        first, parked = RunEvent.objects.filter(run_id=run_id, event="RunPaused").order_by("event_index")
        assert parked.data["requirements"] == first.data["requirements"], "the same requirements, to answer again"
    if journaled == "completed":
        assert (ticket.attempt, ticket.max_attempts, ticket.is_head) == (claim.attempt, claim.attempt + 1, True)
        assert run.continued_tools is not None, "the next attempt continues the same leg"


def test_a_run_whose_cancel_came_as_its_leg_paused_cannot_be_continued_and_runs_no_tool(api, redis_db):
    run_id = accept_run(session_id="ct-8", message="please delete scratch sleep=0", component="hitl-agent")
    claim = ticket_claim(ticket_id=run_id, worker_id=worker_identity(), grace_seconds=60)
    outcome = get_executor().execute(claim)  # paused, past its last checkpoint
    api.post(f"{HITL}/{run_id}/cancel?session_id=ct-8")
    settle_attempt(claim, outcome)
    tools = json.dumps([{**tool, "confirmed": True} for tool in outcome.result.result.tools])

    response = continue_(api, run_id, session_id="ct-8", tools=tools)

    assert (response.status_code, response.json()) == (
        409,
        {"detail": f"Cannot continue run {run_id}: run is cancelled"},
    )
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.cancellation_stage, Ticket.objects.get(pk=run_id).status) == (
        "CANCELLED",
        "EXECUTING",
        "cancelled",
    )
    assert list(RunEvent.objects.filter(run_id=run_id).values_list("event", flat=True)) == [
        "RunStarted",
        "RunCancelled",
    ], "no tool ran, and no pause was told"


class AskingModel:
    """Asks for one call of `name`, then answers `done` once it has a tool result."""

    id, provider = "asking-model", "test"

    def __init__(self, name: str, arguments: dict):
        self.name, self.arguments = name, arguments

    def stream(self, messages, tools, ctx):
        if messages[-1]["role"] == "tool":
            yield f"done: {messages[-1]['content']}"
            return
        yield ToolCall(id="call_x", name=self.name, arguments=self.arguments)


@tool(external_execution=True)
def send_invoice(code: str) -> str:
    """Send an invoice (the client does)."""
    raise AssertionError("never run here")


@tool(requires_user_input=True, user_input_fields=["date"])
def book_visit(city: str, date: str) -> str:
    """Book a visit."""
    return f"booked {city} {date}"


@pytest.mark.parametrize(
    ("pausing", "arguments", "missing", "answered", "content"),
    [
        (send_invoice, {"code": "A1"}, "needs its result (the client executes it)", {"result": "sent #4"}, "sent #4"),
        (
            book_visit,
            {"city": "Lyon"},
            "needs a value for date",
            {"user_input_schema": [{"name": "date", "value": "2026-12-24"}]},
            "booked Lyon 2026-12-24",
        ),
    ],
    ids=["external execution", "user input"],
)
def test_the_other_pauses_need_their_answer_then_continue_with_it(
    api, redis_db, pausing, arguments, missing, answered, content
):
    agent = registry.register(
        Agent(id="asking", name="Asking", model=AskingModel(pausing.name, arguments), tools=[pausing])
    )
    try:
        run_id = accept_run(session_id=f"ct-{pausing.name}", component="asking")
        assert worker_execute(ticket_id=run_id) is True
        before = snapshot(run_id)
        prefix = f"/agents/asking/runs/{run_id}/continue"
        fields = {"background": "true", "stream": "false", "session_id": f"ct-{pausing.name}"}

        refused = api.post(prefix, {**fields, "tools": json.dumps([{"tool_call_id": "call_x"}])}, format="multipart")
        assert (refused.status_code, [e["msg"] for e in refused.json()["detail"]]) == (
            422,
            [f"tool call call_x {missing}"],
        )
        assert snapshot(run_id) == before

        answer = json.dumps([{"tool_call_id": "call_x", **answered}])
        assert api.post(prefix, {**fields, "tools": answer}, format="multipart").status_code == 202
        assert worker_execute(ticket_id=run_id) is True
    finally:
        registry.unregister(agent.kind, agent.id)

    assert (Run.objects.get(pk=run_id).status, Run.objects.get(pk=run_id).content) == ("COMPLETED", f"done: {content}")


@pytest.fixture
def visit_run(redis_db):
    """A run of an agent paused on `book_visit` (call `call_x`), waiting for the user's `date`."""
    agent = registry.register(
        Agent(id="visiting", name="Visiting", model=AskingModel("book_visit", {"city": "Lyon"}), tools=[book_visit])
    )
    try:
        run_id = accept_run(session_id="ct-visit", component="visiting")
        assert worker_execute(ticket_id=run_id) is True
        yield run_id
    finally:
        registry.unregister(agent.kind, agent.id)


ENTRY = "each user_input_schema entry must be an object with a string name"
VALUE = "tool call call_x needs a string, number or boolean value for date"


@pytest.mark.parametrize(
    ("field", "answer", "message"),
    [
        ("tools", {"tool_call_id": "call_x", "user_input_schema": [{"name": ["date"], "value": "x"}]}, ENTRY),
        ("tools", {"tool_call_id": "call_x", "user_input_schema": [{"name": {"date": 1}, "value": "x"}]}, ENTRY),
        ("tools", {"tool_call_id": "call_x", "user_input_schema": [{"name": 7, "value": "x"}]}, ENTRY),
        ("tools", {"tool_call_id": "call_x", "user_input_schema": ["date"]}, ENTRY),
        ("tools", {"tool_call_id": "call_x", "user_input_schema": "date=x"}, "user_input_schema must be a list"),
        ("tools", {"tool_call_id": "call_x", "user_input_schema": [{"name": "date", "value": ["x"]}]}, VALUE),
        ("tools", {"tool_call_id": "call_x", "user_input_schema": [{"name": "date", "value": {"on": "x"}}]}, VALUE),
        (
            "requirements",
            {"tool_execution": {"tool_call_id": "call_x"}, "user_input_schema": [{"name": ["date"], "value": "x"}]},
            ENTRY,
        ),
        (
            "requirements",
            {"tool_execution": {"tool_call_id": "call_x", "user_input_schema": [{"name": "date", "value": [1]}]}},
            VALUE,
        ),
    ],
)
def test_user_input_of_another_shape_is_422_naming_the_field_and_changes_nothing(
    api, visit_run, field, answer, message
):
    before = snapshot(visit_run)

    response = api.post(
        f"/agents/visiting/runs/{visit_run}/continue",
        {"background": "true", "stream": "false", "session_id": "ct-visit", field: json.dumps([answer])},
        format="multipart",
    )

    assert response.status_code == 422
    assert [(error["loc"], error["msg"]) for error in response.json()["detail"]] == [(["body", field], message)]
    assert snapshot(visit_run) == before
