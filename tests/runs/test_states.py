"""The run transition table (`runs.services.states`): each allowed transition happens through the public functions
and a disallowed one changes nothing; and no other module of runs writes a run's status."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from django.db import transaction
from django.forms.models import model_to_dict

from agents_registry.context import LegStatus, RunResult
from agents_registry.registry import registry
from queueing.models import Ticket
from queueing.tickets import ticket_claim
from runs.events.sink import EventSink
from runs.models import Run, RunEvent
from runs.services import states
from runs.services.leg import LegResult
from runs.services.sessions import session_own
from runs.submission import Submission

from .conftest import accept_run

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2] / "runs"
STATES = ROOT / "services" / "states.py"


def row(run_id) -> dict:
    return model_to_dict(Run.objects.get(pk=run_id))


def unchanged(run_id, change) -> None:
    """`change` (a disallowed transition) returns falsy and leaves the run's row as it was."""
    before = row(run_id)
    assert not change()
    assert row(run_id) == before


def with_status(run_id, status: str, *, queued: bool = True, attempt: int = 0) -> str:
    """The run put in `status` for the test (a fixture's write, not a transition under test)."""
    if not queued:
        Ticket.objects.filter(pk=run_id).delete()
    Run.objects.filter(pk=run_id).update(status=status, queued=queued, attempt=attempt)
    return run_id


def send(statements) -> None:
    """A change given as statements, sent in a transaction of its own (as a ticket's change sends it)."""
    with transaction.atomic():
        states.send_statements(statements)


def leg_of(run_id, *, attempt: int, status: str | None = None, error: str | None = None) -> LegResult:
    run = Run.objects.get(pk=run_id)
    sink = EventSink(run, attempt, run.next_event_index)
    if status is None:
        return LegResult(sink, error=error or "boom")
    return LegResult(sink, result=RunResult(status, "done", [], {}))


def test_accepted_with_a_ticket_is_pending(redis_db):
    run_id = accept_run(session_id="st-accept")

    assert row(run_id)["status"] == "PENDING"
    assert Ticket.objects.get(pk=run_id).status == "queued"


def test_accepted_without_a_ticket_is_pending():
    submission = Submission(
        component=registry.get("agent", "stub-agent"),
        message="hi",
        session_id="st-create",
        user_id=None,
        session_state=None,
        metadata=None,
        stream=False,
        background=True,
    )
    session_own(session_id="st-create", component_type="agent", component_id="stub-agent", user_id=None)

    run = states.run_create(submission=submission, queued=False)

    assert (row(run.run_id)["status"], row(run.run_id)["queued"]) == ("PENDING", False)


def test_a_claim_starts_the_run_for_its_attempt_unless_a_newer_attempt_did(redis_db):
    started, overtaken = accept_run(session_id="st-claim-1"), accept_run(session_id="st-claim-2")
    Run.objects.filter(pk=overtaken).update(attempt=5)  # a newer attempt started it

    assert ticket_claim(ticket_id=started, worker_id="w", grace_seconds=60) is not None
    before = row(overtaken)
    assert ticket_claim(ticket_id=overtaken, worker_id="w", grace_seconds=60) is not None

    assert (row(started)["status"], row(started)["attempt"]) == ("RUNNING", 1)
    assert row(overtaken) == before


def test_a_run_without_a_ticket_starts_once_from_pending(redis_db):
    run_id = with_status(accept_run(session_id="st-start"), "PENDING", queued=False)

    assert states.run_start_unqueued(run_id=run_id) is True
    assert (row(run_id)["status"], row(run_id)["attempt"]) == ("RUNNING", 1)
    unchanged(run_id, lambda: states.run_start_unqueued(run_id=run_id))


@pytest.mark.parametrize(
    ("result", "final", "status"),
    [
        (LegStatus.COMPLETED, True, "COMPLETED"),
        (LegStatus.PAUSED, True, "PAUSED"),
        (LegStatus.CANCELLED, True, "CANCELLED"),
        (None, True, "ERROR"),
        (None, False, "PENDING"),
    ],
)
def test_a_leg_records_its_end_for_its_own_attempt_only(redis_db, result, final, status):
    stale, current = (
        with_status(accept_run(session_id=f"st-leg-{result}-{final}-{i}"), "RUNNING", attempt=2) for i in range(2)
    )

    send(states.run_record_leg(run_id=current, attempt=2, leg=leg_of(current, attempt=2, status=result), final=final))

    assert row(current)["status"] == status
    unchanged(
        stale,
        lambda: send(
            states.run_record_leg(run_id=stale, attempt=1, leg=leg_of(stale, attempt=1, status=result), final=final)
        ),
    )


@pytest.mark.parametrize(
    ("status", "stage", "role", "event"),
    [("ERROR", None, "error", "RunError"), ("CANCELLED", "PAUSED", "cancelled", "RunCancelled")],
)
def test_a_ticket_that_ended_without_a_leg_ends_its_run(redis_db, status, stage, role, event):
    run_id = with_status(accept_run(session_id=f"st-end-{status}"), "PAUSED")

    send(states.run_end_unexecuted(run_id=run_id, status=status, content="over", stage=stage, event_role=role))

    assert (row(run_id)["status"], row(run_id)["cancellation_stage"], row(run_id)["content"]) == (status, stage, "over")
    assert RunEvent.objects.get(run_id=run_id).event == event


def test_a_lost_continuation_is_paused_again(redis_db):
    run_id = with_status(accept_run(session_id="st-park"), "RUNNING", attempt=2)

    send(states.run_park(run_id=run_id))

    assert row(run_id)["status"] == "PAUSED"
    assert RunEvent.objects.get(run_id=run_id).event == "RunPaused"


@pytest.mark.parametrize("status", ["RUNNING", "ERROR", "CANCELLED"])
def test_a_ticket_queued_again_makes_its_run_pending(redis_db, status):
    run_id = with_status(accept_run(session_id=f"st-reset-{status}"), status, attempt=1)

    send(states.run_reset_pending(run_id=run_id, requeued=status != "RUNNING"))

    assert row(run_id)["status"] == "PENDING"


@pytest.mark.parametrize(("status", "stage"), [("PENDING", "PENDING"), ("PAUSED", "PAUSED")])
def test_a_run_without_a_ticket_is_cancelled_while_it_waits_or_is_paused(redis_db, status, stage):
    run_id = with_status(accept_run(session_id=f"st-cancel-{status}"), status, queued=False)

    assert states.run_cancel_unqueued(run_id=run_id) is True

    assert (row(run_id)["status"], row(run_id)["cancellation_stage"]) == ("CANCELLED", stage)


@pytest.mark.parametrize(("status", "queued"), [("RUNNING", False), ("COMPLETED", False), ("PENDING", True)])
def test_cancel_without_a_ticket_leaves_an_executing_finished_or_ticketed_run(redis_db, status, queued):
    run_id = with_status(accept_run(session_id=f"st-nocancel-{status}"), status, queued=queued)

    unchanged(run_id, lambda: states.run_cancel_unqueued(run_id=run_id))


def test_a_paused_run_continues_to_pending_and_no_other_does(redis_db):
    paused = with_status(accept_run(session_id="st-continue-1"), "PAUSED")
    completed = with_status(accept_run(session_id="st-continue-2"), "COMPLETED")
    decided = [{"tool_call_id": "c1", "confirmed": True}]

    assert states.run_continue_pending(run_id=paused, decided=decided) is True
    assert (row(paused)["status"], row(paused)["continued_tools"], row(paused)["tool_decisions"]) == (
        "PENDING",
        decided,
        [decided],
    )
    unchanged(completed, lambda: states.run_continue_pending(run_id=completed, decided=decided))


# What writes a run's status: an ORM write naming it, a new Run, an assignment to `.status`, SQL that sets it.
ORM_WRITES = {"update", "create", "get_or_create", "update_or_create", "bulk_create", "bulk_update"}
SQL_WRITE = re.compile(
    r"UPDATE\s+runs_run\b[^;]*?\bSET\b(?:(?!\bWHERE\b).)*?\bstatus\s*=|INSERT\s+INTO\s+runs_run\s*\([^)]*\bstatus\b",
    re.IGNORECASE | re.DOTALL,
)


def _of_states(text: str) -> bool:
    """Whether `text` is a status write `states` defines (`ACCEPT_RUN` in the accept's rows): its use elsewhere is
    the states module's write."""
    return bool(SQL_WRITE.search(text)) and any(text is value for value in vars(states).values())


def _text(node: ast.AST, module) -> str | None:
    """A string literal's text; an f-string's with what it interpolates from its module (`RUNS`, a table name)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(value.value)
        else:
            try:
                text = str(eval(ast.unparse(value.value), vars(module)))  # our own source
            except Exception:
                text = "?"
            parts.append("{states}" if _of_states(text) else text)
    return "".join(parts)


def status_writes(path: Path) -> list[str]:
    """Where the module at `path` writes a run's status, as `line: what`."""
    name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    module = importlib.import_module(name.removesuffix(".__init__"))
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ORM_WRITES:
            named = [k.arg for k in node.keywords if k.arg] + [
                key.value
                for k in node.keywords
                if k.arg is None and isinstance(k.value, ast.Dict)
                for key in k.value.keys
                if isinstance(key, ast.Constant)
            ]
            if "status" in named or ast.unparse(node.func).startswith("Run.objects.create"):
                found.append(f"{node.lineno}: {ast.unparse(node.func)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Run":
            found.append(f"{node.lineno}: Run(...)")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "status" for t in targets):
                found.append(f"{node.lineno}: .status =")
        elif (text := _text(node, module)) is not None and SQL_WRITE.search(text):
            found.append(f"{node.lineno}: SQL {SQL_WRITE.search(text).group(0)[:40]!r}")
    return found


def test_the_scan_finds_every_status_write_of_the_states_module():
    found = "\n".join(status_writes(STATES))

    for what in ("Run.objects.create", "update", "SQL 'UPDATE runs_run", "SQL 'INSERT INTO runs_run"):
        assert what in found, what
    assert len(status_writes(STATES)) >= 9


def test_no_other_module_of_runs_writes_a_runs_status():
    modules = [path for path in ROOT.rglob("*.py") if "migrations" not in path.parts and path != STATES]

    writes = {str(path.relative_to(ROOT)): found for path in modules if (found := status_writes(path))}

    assert writes == {}
