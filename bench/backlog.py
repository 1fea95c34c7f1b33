"""A backlog of blocked tickets for the benchmark: paused heads with many queued runs behind them.

The heads are real runs of `hitl-agent` that paused over HTTP; the tickets behind them are inserted with
SQL (100,000 submissions over HTTP would take most of an hour), in the shape accept gives them: live,
serialized, not heads, with increasing `session_seq`. The benchmark must use the server's DATABASE_URL.
"""

from __future__ import annotations

import time
import uuid

from django.db import connection, transaction

from queueing.models import Ticket
from runs.models import AgentSession, Run

from .harness import Client

PREFIX = "backlog-"


def seed(client: Client, *, tickets: int, heads: int = 100) -> str:
    """Pause `heads` runs, then queue `tickets` more runs behind them (evenly); returns the backlog's tag."""
    tag = f"{PREFIX}{uuid.uuid4().hex[:6]}"
    paused = []
    for number in range(heads):
        session_id = f"{tag}-{number}"
        run_id, _, _ = client.submit(session_id, "delete sleep=0", agent="hitl-agent")
        paused.append((run_id, session_id))
    deadline = time.monotonic() + 120
    while any(client.poll(run_id, session, agent="hitl-agent")["status"] != "PAUSED" for run_id, session in paused):
        if time.monotonic() > deadline:
            raise RuntimeError("the backlog's heads did not pause; is a worker running?")
        time.sleep(0.5)
    per_head = tickets // heads
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE TEMP TABLE backlog ON COMMIT DROP AS
            SELECT gen_random_uuid() AS id, %(tag)s || '-' || h AS session_id, k + 1 AS seq
            FROM generate_series(0, %(heads)s - 1) AS h, generate_series(1, %(per_head)s) AS k;
            INSERT INTO {Run._meta.db_table} (run_id, session_id, component_type, component_id, status,
                input_content, background, stream, queued, attempt, run_messages, next_event_index, tool_decisions,
                created_at)
            SELECT id, session_id, 'agent', 'hitl-agent', 'PENDING', 'blocked sleep=0', true, false, true, 0,
                   '[]'::jsonb, 0, '[]'::jsonb, now() FROM backlog;
            INSERT INTO {Ticket._meta.db_table} (id, component_type, component_id, session_id, status, attempt,
                max_attempts, session_seq, serialized, is_head, idempotency_scope, available_at, payload,
                created_at, updated_at)
            SELECT id, 'agent', 'hitl-agent', session_id, 'queued', 0, 1, seq, true, false, '', now(),
                   '{{}}'::jsonb, now(), now() FROM backlog;
            """,
            {"tag": tag, "heads": heads, "per_head": per_head},
        )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Ticket._meta.db_table}; ANALYZE {Run._meta.db_table}")
    return tag


def clear(tag: str) -> None:
    """Remove the backlog's tickets, runs and sessions."""
    prefix = f"{tag}-"
    with transaction.atomic():
        Ticket.objects.filter(session_id__startswith=prefix).delete()
        Run.objects.filter(session__session_id__startswith=prefix).delete()
        AgentSession.objects.filter(session_id__startswith=prefix).delete()


def blocked(tag: str) -> int:
    return Ticket.objects.filter(session_id__startswith=f"{tag}-", status="queued", is_head=False).count()
