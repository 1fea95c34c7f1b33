import datetime
import uuid

import pytest
from django.db.models import F

from agents_registry.registry import registry
from queueing.executor import Outcome
from queueing.models import Ticket
from queueing.tickets import ticket_claim, ticket_finish
from runs.services import Submission, run_submit


def accept(*, session_id: str = "s-1", message: str = "hi sleep=0", component: str = "stub-agent") -> str:
    """Accept a background run through the real service; returns its ticket id."""
    submission = Submission(
        component=registry.get("agent", component),
        message=message,
        session_id=session_id,
        user_id=None,
        session_state=None,
        metadata=None,
        stream=False,
        background=True,
    )
    return str(run_submit(submission=submission).run_id)


def snapshot(ticket_id: str) -> dict:
    return Ticket.objects.filter(pk=ticket_id).values().first()


def backdate(ticket_id: str, *, seconds: float = 3600, field: str = "locked_at") -> None:
    """Move a ticket's lease or completion time into the past (instead of sleeping through a grace)."""
    Ticket.objects.filter(pk=ticket_id).update(**{field: F(field) - datetime.timedelta(seconds=seconds)})


def set_budget(ticket_id: str, max_attempts: int) -> None:
    Ticket.objects.filter(pk=ticket_id).update(max_attempts=max_attempts)


def claim(ticket_id: str, worker: str = "w1", grace: float = 60):
    return ticket_claim(ticket_id=ticket_id, worker_id=worker, grace_seconds=grace)


def finish(owner, status: str, error: str | None = None) -> bool:
    return ticket_finish(claim=owner, outcome=Outcome(status, error=error))


@pytest.fixture
def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"
