"""What every ticket state change leaves behind once it commits: one structured log line and its counter.

`tickets` calls `changed` inside the transaction of each guarded change; nothing is logged or counted for a
change that rolls back. The line reads `ticket.<event> run_id=… session_id=… status=… attempt=… worker=…`, and
the same fields travel as the record's `ticket` attribute for a JSON formatter (`agentos_project.logs`).
"""

from __future__ import annotations

import logging

from django.db import transaction

from . import metrics

log = logging.getLogger("agentos.tickets")

# The counter (queueing.metrics.COUNTERS) each event moves, beside the one named by the status it reaches.
EVENT_COUNTERS = {
    "accept": ("accepted",),
    "claim": ("claimed",),
    "reclaim": ("claimed", "reclaimed"),
    "retry": ("retried",),
    "sweep": ("swept",),
    "park": ("swept",),
    "resume": ("swept", "resumed"),
    "cancel": (),
    "expire": ("expired",),
    "cancel_ask": (),
    "continue": ("continued",),
    "requeue": ("requeued",),
    "finish": (),
}
STATUS_COUNTERS = {"completed": "completed", "failed": "failed", "cancelled": "cancelled", "paused": "paused"}


def changed(
    event: str, *, run_id, session_id: str, status: str, attempt: int, worker: str | None = None, **more
) -> None:
    """Record, once the caller's transaction commits, that ticket `run_id` changed by `event` to `status`; `more`
    (e.g. a retry's `retry_in`) is appended to the line as `key=value`."""
    fields = {
        "event": event,
        "run_id": str(run_id),
        "session_id": session_id,
        "status": status,
        "attempt": attempt,
        "worker": worker or "-",
        **more,
    }
    transaction.on_commit(lambda: _record(fields))


def _record(fields: dict) -> None:
    if log.isEnabledFor(logging.INFO):
        pairs = " ".join(f"{key}={value}" for key, value in fields.items() if key != "event")
        log.info("ticket.%s %s", fields["event"], pairs, extra={"ticket": fields})
    for name in EVENT_COUNTERS[fields["event"]]:
        metrics.recorder.count(name)
    if fields["event"] not in ("claim", "reclaim") and fields["status"] in STATUS_COUNTERS:
        metrics.recorder.count(STATUS_COUNTERS[fields["status"]])


def pruned(count: int) -> None:
    """Terminal tickets past retention were deleted (already committed)."""
    if count:
        log.info("ticket.prune deleted=%s", count, extra={"ticket": {"event": "prune", "deleted": count}})
        metrics.recorder.count("pruned", count)
