"""Accepting a background run: its session, run and ticket rows in one statement of the queue's."""

from __future__ import annotations

import time
import uuid

from django.db import IntegrityError

from agentos_project.core.conf import current
from agentos_project.core.jsonsafe import json_or_null
from queueing import metrics
from queueing.seam import GATE, NewTicket, Rows
from queueing.tickets import ticket_accept

from ..exceptions import BackgroundNeedsStore, SessionNotYours
from ..models import AgentSession, Run, RunStatus
from ..submission import Accepted, Submission
from .idempotency import idempotent_replay
from .states import ACCEPT_RUN
from .unqueued import run_submit_in_process

SESSIONS = AgentSession._meta.db_table
RUNS = Run._meta.db_table
# The run's and its session's rows in the accept's one statement (`queueing.tickets.ticket_accept`): the session
# is created unless it exists; the run is written only when the session is the submitter's (and the gate is open).
# `owner` is empty when the session was created by a writer that had not committed when the statement began.
ACCEPT_ROWS = f"""
    new_session AS (
        INSERT INTO {SESSIONS} (session_id, component_type, component_id, user_id, session_state)
        SELECT %(session_id)s, %(component_type)s, %(component_id)s, %(user_id)s, '{{}}' FROM {GATE} WHERE open
        ON CONFLICT (session_id) DO NOTHING
        RETURNING component_type, component_id, user_id),
    owner AS (
        SELECT component_type, component_id, user_id FROM new_session
        UNION ALL SELECT component_type, component_id, user_id FROM {SESSIONS} WHERE session_id = %(session_id)s
        LIMIT 1),
    {ACCEPT_RUN}"""


ACCEPT_TYPES = {
    "message": "text",
    "session_state": "jsonb",
    "metadata": "jsonb",
    "background": "boolean",
    "stream": "boolean",
    "stream_inbox": "text",
}


def _ticket(submission: Submission, *, run_id: uuid.UUID) -> NewTicket:
    conf, component = current().queue, submission.component
    return NewTicket(
        id=run_id,
        component_type=component.kind,
        component_id=component.id,
        session_id=submission.session_id,
        user_id=submission.user_id,
        payload=submission.payload(),
        serialized=conf.effective_per_session or component.one_turn_per_session,
        max_attempts=conf.max_attempts,
        idempotency_key=submission.idempotency_key,
        idempotency_scope=submission.user_id or "",
        request_digest=submission.digest(),
        ttl_seconds=submission.expires_in or conf.queue_ttl_seconds,
    )


def _rows(submission: Submission) -> Rows:
    """The run's and its session's rows for the accept (`ACCEPT_ROWS`); it answers whether the session is the
    submitter's."""
    params = {
        "message": submission.message,
        "session_state": json_or_null(submission.session_state),
        "metadata": json_or_null(submission.metadata),
        "background": submission.background,
        "stream": submission.stream,
        "stream_inbox": submission.stream_inbox,
    }
    return Rows("run", ACCEPT_ROWS, params, types=ACCEPT_TYPES, answers=("EXISTS (SELECT 1 FROM owner)",))


def run_submit(*, submission: Submission) -> Accepted:
    """Accept a background run durably: session, run and ticket rows commit together (one round trip, one
    transaction, `ticket_accept`), then the ticket is published.

    Refuses (writing nothing) a component without a store (400), a session of another component or user (409);
    replays an earlier submission with the same Idempotency-Key (CONTRACT 7), before the queue-depth check (429,
    exact). Two identical submits racing each other yield one run: the unique index makes the loser roll back
    and replay the winner. With the durable queue off, the run executes in this process instead
    (`run_submit_in_process`).
    """
    conf = current().queue
    component = submission.component
    if not component.has_store:
        raise BackgroundNeedsStore()
    if not conf.durable:
        return run_submit_in_process(submission=submission)
    if submission.idempotency_key and (earlier := idempotent_replay(submission)):
        return earlier
    started = time.perf_counter()
    run_id = uuid.uuid4()
    ticket, rows = _ticket(submission, run_id=run_id), _rows(submission)
    try:
        for _ in range(2):  # a second time only when the session was created meanwhile by an unlocked writer
            admitted = ticket_accept(ticket=ticket, rows=rows, max_queue_depth=conf.max_queue_depth)
            (owned,) = admitted.answers
            if admitted.accepted or owned:
                break
    except IntegrityError:
        if submission.idempotency_key and (winner := idempotent_replay(submission)):
            return winner
        raise
    if not admitted.accepted:
        raise SessionNotYours(submission.session_id)
    metrics.recorder.observe("accept_latency_seconds", time.perf_counter() - started)
    return Accepted(str(run_id), submission.session_id, RunStatus.PENDING, stream_inbox=submission.stream_inbox)
