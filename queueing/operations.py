"""What an operator does to the queue, the same from the API, the Django admin and the command line.

Each operation goes through the guarded changes of `tickets` (requeue) or the executor (cancel, which the work's
owner knows how to do wherever the run is), and raises the queue's named errors, which carry their HTTP meaning.
"""

from __future__ import annotations

from agentos_project.conf import current

from .exceptions import JobFailedRecently, JobNotRequeueable
from .executor import get_executor
from .models import Ticket
from .selectors import ticket_get
from .tickets import RequeueResult, ticket_requeue


def job_requeue(*, job_id: str, force: bool = False) -> Ticket:
    """A dead letter (failed or cancelled ticket) back in line with exactly one more attempt, at the back of its
    session; the ticket as it is afterwards.

    Raises `JobFailedRecently` (409) for a ticket failed less than the lease grace ago unless `force`, and
    `JobNotRequeueable` (400) for one that is not failed or cancelled, or unknown. The executor forgets the run's
    cancellation and its old live events in the same transaction, so a requeued cancelled run executes again.
    """
    if ticket_get(ticket_id=job_id) is None:
        raise JobNotRequeueable(job_id)
    grace = current().queue.lock_grace_seconds
    result = ticket_requeue(ticket_id=job_id, grace_seconds=grace, force=force)
    if result is RequeueResult.TOO_RECENT:
        raise JobFailedRecently(job_id, grace)
    if result is RequeueResult.NOT_REQUEUEABLE:
        raise JobNotRequeueable(job_id)
    return ticket_get(ticket_id=job_id)


def job_cancel(*, job_id: str) -> str:
    """Cancel the ticket's job wherever it is (CONTRACT 9); what happened, as the executor says it: `cancelled`
    (it was queued or paused), `requested` (it is running; its worker stops it at the next checkpoint),
    `finished` (nothing to cancel) or `unknown`."""
    if ticket_get(ticket_id=job_id) is None:
        return "unknown"
    return get_executor().cancel(job_id)
