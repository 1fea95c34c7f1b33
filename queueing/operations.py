"""What an operator does to the queue, the same from the API, the Django admin and the command line.

Each operation goes through the guarded changes of `tickets` (requeue) or the executor (cancel, which the work's
owner knows how to do wherever the run is), and raises the queue's named errors, which carry their HTTP meaning.
"""

from __future__ import annotations

import time

from agentos_project.core.conf import current

from .exceptions import BadQueueQuery, JobFailedRecently, JobNotRequeueable
from .models import Ticket
from .seam import get_executor
from .selectors import JOB_STATUSES, MAX_OFFSET, is_ticket_id, ticket_get, tickets_page
from .serializers import ticket_to_wire
from .tickets import RequeueResult, ticket_requeue


def job_requeue(*, job_id: str, force: bool = False) -> Ticket:
    """A dead letter (failed or cancelled ticket) back in line with exactly one more attempt, at the back of its
    session; the ticket as it is afterwards.

    Raises `JobFailedRecently` (409) for a ticket failed less than the lease grace ago unless `force`, and
    `JobNotRequeueable` (400) for one that is not failed or cancelled, or unknown. The executor forgets the run's
    cancellation in the same transaction, so a requeued cancelled run executes again.
    """
    if not is_ticket_id(job_id):
        raise JobNotRequeueable(job_id)
    grace = current().queue.lock_grace_seconds
    result = ticket_requeue(ticket_id=job_id, grace_seconds=grace, force=force)
    if result is RequeueResult.TOO_RECENT:
        raise JobFailedRecently(job_id, grace)
    if result is RequeueResult.NOT_REQUEUEABLE:
        raise JobNotRequeueable(job_id)
    return ticket_get(ticket_id=job_id)


def job_cancel(*, job_id: str) -> str:
    """Cancel the ticket's work wherever it is (CONTRACT 9); what happened, as the executor says it: `cancelled`
    (it was queued or paused), `requested` (it is running; its worker stops it at the next checkpoint),
    `finished` (nothing to cancel) or `unknown`."""
    if ticket_get(ticket_id=job_id) is None:
        return "unknown"
    return get_executor().cancel(job_id)


def job_search(
    *,
    statuses: list[str],
    session_ids: list[str],
    user_id: str | None,
    limit: int,
    page: int,
    sort_by: str = "created_at",
    descending: bool = True,
) -> dict:
    """`GET /queue/jobs`' answer: one page of jobs matching the filters, and its `meta` (with how long it took).

    Raises `BadQueueQuery` (400, AgentOS' texts) for an unknown status or an empty session_id or user_id, and for
    a page whose offset PostgreSQL cannot hold (beyond `MAX_OFFSET`).
    """
    started = time.perf_counter()
    for status in statuses:
        if status not in JOB_STATUSES:
            raise BadQueueQuery(f"Invalid status {status!r}; expected one of {JOB_STATUSES}")
    if not all(session_ids) or user_id == "":
        raise BadQueueQuery("session_id and user_id must not be empty")
    if (page - 1) * limit > MAX_OFFSET:
        raise BadQueueQuery(f"page {page} is out of range: (page - 1) * limit must be at most {MAX_OFFSET}")
    tickets, total = tickets_page(
        statuses=statuses,
        session_ids=session_ids,
        user_id=user_id,
        limit=limit,
        page=page,
        sort_by=sort_by,
        descending=descending,
    )
    meta = {
        "page": page,
        "limit": limit,
        "total_pages": (total + limit - 1) // limit,
        "total_count": total,
        "search_time_ms": round(1000 * (time.perf_counter() - started), 2),
    }
    return {"data": [ticket_to_wire(ticket) for ticket in tickets], "meta": meta}
