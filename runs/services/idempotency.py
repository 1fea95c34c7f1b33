"""Idempotency-Key replays (CONTRACT 7): a retried submission gets the original run back, not a second run."""

from __future__ import annotations

from agentos_project.core import jsonsafe
from queueing.selectors import ticket_by_idempotency_key

from ..exceptions import IdempotencyConflict, IdempotencyKeyInvalid, IdempotencyKeyTooLong, IdempotencyMismatch
from ..models import RUN_STATUS_OF_TICKET
from ..submission import Accepted, Submission

MAX_KEY_LENGTH = 512
OTHER_COMPONENT = (
    "Idempotency-Key was already used by a different component; reuse a key only to retry the identical submission"
)


def idempotency_key(header: str | None) -> str | None:
    """The key a client sent in `Idempotency-Key`: None when empty; 422 when too long or not storable."""
    key = (header or "").strip() or None
    if key is None:
        return None
    if len(key) > MAX_KEY_LENGTH:
        raise IdempotencyKeyTooLong()
    reason = jsonsafe.text_problem(key)
    if reason:
        raise IdempotencyKeyInvalid(f"Idempotency-Key {reason}")
    return key


def idempotent_replay(submission: Submission) -> Accepted | None:
    """The earlier submission under the same key and user, as a 202 body; None if there is none.

    Refuses a replay that is not one: another component (409), a stream attached to a non-streaming
    submission (409), then, checked last, any other difference in the request (422).
    """
    ticket = ticket_by_idempotency_key(scope=submission.user_id or "", key=submission.idempotency_key)
    if ticket is None:
        return None
    if (ticket.component_type, ticket.component_id) != (submission.component.kind, submission.component.id):
        raise IdempotencyConflict(OTHER_COMPONENT)
    if submission.stream and not ticket.payload.get("stream"):
        raise IdempotencyConflict(
            "Idempotency-Key was used by a non-streaming submission; "
            f"poll run {ticket.id} instead of attaching a stream"
        )
    if ticket.request_digest != submission.digest():
        raise IdempotencyMismatch()
    return Accepted(str(ticket.id), ticket.session_id, RUN_STATUS_OF_TICKET[ticket.status])
