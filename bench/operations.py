"""The cost of the operator's reads with a big queue: `/metrics`, `/queue/stats` and the dead-letter list with
100,000 tickets in the table.

The tickets are inserted with SQL in the shape the queue gives them, spread over the statuses a busy deployment
holds (mostly completed, some failed and cancelled, a few queued for later and paused); they belong to no run,
so nothing executes them. The benchmark must use the server's DATABASE_URL.
"""

from __future__ import annotations

import time
import uuid

from django.db import connection, transaction

from queueing.models import Ticket
from runs.models import AgentSession, Run, RunEvent, Step

from .harness import Client, percentile

PREFIX = "opsbench-"
# Written with %% for psycopg2's parameter syntax (the query it goes into takes parameters).
STATUS_OF_N = """CASE WHEN n %% 100 < 80 THEN 'completed' WHEN n %% 100 < 90 THEN 'failed'
                       WHEN n %% 100 < 98 THEN 'cancelled' WHEN n %% 100 < 99 THEN 'queued' ELSE 'paused' END"""


def seed(*, tickets: int) -> str:
    """Insert `tickets` tickets, one session each: 80% completed, 10% failed, 8% cancelled, 1% queued (for an
    hour from now, so nothing claims them), 1% paused (their session's head, as a paused ticket is); returns
    their tag."""
    tag = f"{PREFIX}{uuid.uuid4().hex[:6]}"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {Ticket._meta.db_table} (id, component_type, component_id, session_id, status, attempt,
                max_attempts, session_seq, serialized, is_head, idempotency_scope, available_at, payload, error,
                created_at, updated_at, completed_at)
            SELECT gen_random_uuid(), 'agent', 'stub-agent', %(tag)s || '-' || n, s.status,
                   CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END, 1, 1, true,
                   s.status = 'paused', '', now() + interval '1 hour', '{{}}'::jsonb,
                   CASE WHEN s.status = 'failed' THEN 'stub model exploded' END,
                   now() - n * interval '1 second', now(),
                   CASE WHEN s.status IN ('completed', 'failed', 'cancelled') THEN now() END
            FROM generate_series(1, %(tickets)s) AS n, LATERAL (SELECT {STATUS_OF_N} AS status) AS s
            """,
            {"tag": tag, "tickets": tickets},
        )
    vacuum()
    return tag


def vacuum(*tables: str) -> None:
    """What autovacuum would have done by the time an operator looks: dead rows gone, statistics fresh."""
    with connection.cursor() as cursor:
        for table in tables or (Ticket._meta.db_table,):
            cursor.execute(f"VACUUM ANALYZE {table}")


def vacuum_hot_tables() -> None:
    """Before each measured burst: what autovacuum keeps doing on a server that has it (this machine's PostgreSQL
    runs with autovacuum off, and the dead rows of earlier repeats would slow each later one down)."""
    vacuum(*(model._meta.db_table for model in (Ticket, Run, RunEvent, AgentSession, Step)))


def clear(tag: str) -> None:
    Ticket.objects.filter(session_id__startswith=f"{tag}-").delete()
    vacuum()


def read_costs(client: Client, *, requests: int = 50) -> dict[str, float]:
    """p50 milliseconds of each read, over `requests` calls after one warm-up."""
    paths = {"/metrics": "/metrics", "/queue/stats": "/queue/stats", "dead letters": "/queue/jobs?status=failed"}
    costs = {}
    for name, path in paths.items():
        client.http.get(f"{client.url}{path}", timeout=30).raise_for_status()
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            client.http.get(f"{client.url}{path}", timeout=30).raise_for_status()
            times.append(1000 * (time.perf_counter() - started))
        costs[name] = percentile(times, 0.50)
    return costs
