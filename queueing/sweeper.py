"""The sweeper: stale leases, lost messages and retention, one pass every AGENTOS_POLL_INTERVAL.

Every change it makes is a guarded update in `tickets`, so any number of sweepers (one per replica) can run at
once: a ticket two sweepers pick is changed by one of them and left alone by the other.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable

from django.db import close_old_connections, connection
from django.db.models import F, Q
from django.db.models.functions import Now

from agentos_project.core.conf import QueueSettings

from . import router
from .models import Ticket, TicketStatus
from .seam import LostAttempt
from .tickets import (
    ticket_cancel_stale,
    ticket_expire,
    ticket_note_dispatch,
    ticket_prune,
    ticket_release_all_held,
    ticket_sweep_lost,
)

log = logging.getLogger("agentos.sweeper")
BATCH = 500
LOST_COUNTS = {LostAttempt.FAIL: "failed", LostAttempt.PARK: "parked", LostAttempt.RESUME: "resumed"}


@dataclasses.dataclass
class SweepReport:
    failed: int = 0
    parked: int = 0
    resumed: int = 0
    cancelled: int = 0
    expired: int = 0
    released: int = 0
    redispatched: int = 0
    lost_messages: int = 0
    pruned: int = 0
    errors: int = 0


def _stale(conf: QueueSettings):
    grace = datetime.timedelta(seconds=conf.lock_grace_seconds)
    return Ticket.objects.filter(status=TicketStatus.RUNNING, locked_at__lt=Now() - grace)


SETTLE_SECONDS = 5.0


def lost_messages(conf: QueueSettings) -> list:
    """Claimable tickets (queued, available, head or unordered) with no live broker message, settled for a while
    (SETTLE_SECONDS, or the poll interval if longer) so a publish still on its way after commit is not doubled: a
    busy web process's publisher may be seconds behind its commits."""
    settled = Now() - datetime.timedelta(seconds=max(SETTLE_SECONDS, conf.poll_interval))
    claimable = Ticket.objects.filter(
        Q(is_head=True) | Q(serialized=False),
        status=TicketStatus.QUEUED,
        held=False,  # held on purpose: let in by `release_held`
        available_at__lte=settled,
        updated_at__lte=settled,
    )
    return router.without_message(claimable.order_by("available_at").values_list("pk", flat=True)[:BATCH])


def sweep_once(conf: QueueSettings) -> SweepReport:
    """One pass: cancel stale leases whose cancel was asked, fail stale leases without budget (or park them back to
    paused, or queue them once more, as the executor answers: `ticket_sweep_lost`), dispatch stale ones with budget
    (a worker reclaims them), expire queued tickets past their deadline, let in held tickets whose users have room,
    publish again claimable tickets whose message was lost, and prune terminal tickets past retention.

    Each ticket's step runs on its own: one that raises (its transaction rolls back) is logged and counted in
    `errors`, the ticket is left as it was for the next pass, and the pass goes on with the others.
    """
    report = SweepReport()
    stale = _stale(conf)
    grace = conf.lock_grace_seconds
    for ticket_id in stale.filter(cancel_requested_at__isnull=False).values_list("pk", flat=True)[:BATCH]:
        cancel = lambda t=ticket_id: ticket_cancel_stale(ticket_id=t, grace_seconds=grace)  # noqa: E731
        if _step(report, "cancel", ticket_id, cancel):
            report.cancelled += 1
    stale = stale.filter(cancel_requested_at__isnull=True)
    for ticket_id in stale.filter(attempt__gte=F("max_attempts")).values_list("pk", flat=True)[:BATCH]:
        fate = _step(report, "lost", ticket_id, lambda t=ticket_id: ticket_sweep_lost(ticket_id=t, grace_seconds=grace))
        if fate:
            setattr(report, LOST_COUNTS[fate], getattr(report, LOST_COUNTS[fate]) + 1)
    reclaimable = stale.filter(attempt__lt=F("max_attempts"), updated_at__lt=Now() - datetime.timedelta(seconds=grace))
    for ticket_id in reclaimable.values_list("pk", flat=True)[:BATCH]:
        if _step(report, "redispatch", ticket_id, lambda t=ticket_id: _redispatch(t)):
            report.redispatched += 1
    report.expired += expire_due(report)
    report.released += release_held(report)
    for ticket_id in lost_messages(conf):
        if _step(report, "publish", ticket_id, lambda t=ticket_id: router.publish(t)):
            log.info("ticket=%s had no live message; published again", ticket_id)
            report.lost_messages += 1
    report.pruned = ticket_prune(retention_seconds=conf.retention_seconds)
    return report


def expire_due(report: SweepReport) -> int:
    """Cancel the queued tickets past their deadline (`ticket_expire`); how many."""
    due = Ticket.objects.filter(status=TicketStatus.QUEUED, expires_at__lte=Now()).order_by("expires_at")
    expired = 0
    for ticket_id in due.values_list("pk", flat=True)[:BATCH]:
        if _step(report, "expire", ticket_id, lambda t=ticket_id: ticket_expire(ticket_id=t)):
            expired += 1
    return expired


def release_held(report: SweepReport) -> int:
    """Let in the held tickets whose users have room that the claims and ends of their runs did not let in (a
    cancel, a sweep, a race of an accept with a claim); how many."""
    return len(_step(report, "release", "(all held)", ticket_release_all_held) or ())


def _redispatch(ticket_id) -> bool:
    return router.publish(ticket_id) and ticket_note_dispatch(ticket_id=ticket_id)


def _step(report: SweepReport, name: str, ticket_id, action: Callable[[], object]):
    """Run one ticket's step; an exception (its transaction rolled back: nothing changed) is logged and counted,
    the ticket is left for the next pass, and this one goes on."""
    try:
        return action()
    except Exception:
        log.exception("sweep step %s failed for ticket=%s; left for the next pass", name, ticket_id)
        report.errors += 1
        return False


AUTOVACUUM_OFF = (
    "PostgreSQL runs with autovacuum off: every run leaves dead rows in the ticket and run tables, which slow the "
    "queue down until a VACUUM removes them; turn autovacuum on, or VACUUM those tables regularly"
)


def warn_if_autovacuum_off() -> bool:
    """Log AUTOVACUUM_OFF once when the server's autovacuum is off; True if it is."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW autovacuum")
            off = cursor.fetchone()[0] == "off"
    except Exception:  # the database may be away at start-up: the queue's own steps will say so
        return False
    if off:
        log.warning(AUTOVACUUM_OFF)
    return off


DEADLINE_SECONDS = 1.0  # the most a queued run outlives its deadline when the poll interval is longer


def run_forever(conf: QueueSettings, stop: threading.Event) -> None:
    """Sweep every `conf.poll_interval` seconds until `stop` is set, and expire the queued runs past their deadline
    and let in held runs at least every DEADLINE_SECONDS in between; survives database and broker outages."""
    log.info("sweeper started interval=%ss grace=%ss", conf.poll_interval, conf.lock_grace_seconds)
    warn_if_autovacuum_off()
    while not stop.is_set():
        _guarded(lambda: sweep_once(conf))
        next_pass = time.monotonic() + conf.poll_interval
        while not stop.wait(min(DEADLINE_SECONDS, max(0.0, next_pass - time.monotonic()))):
            if time.monotonic() >= next_pass:
                break
            _guarded(_deadlines_and_turns)


def _deadlines_and_turns() -> SweepReport:
    """What the sweeper does every DEADLINE_SECONDS between its passes: expire the runs past their deadline, and
    let in the held runs whose users have room (a claim and a finish at the same moment can each leave that to
    the other)."""
    report = SweepReport()
    report.expired = expire_due(report)
    report.released = release_held(report)
    return report


def _guarded(sweep: Callable[[], SweepReport]) -> None:
    try:
        close_old_connections()
        report = sweep()
        if any(dataclasses.astuple(report)):
            log.info("sweep %s", report)
    except Exception as error:
        log.warning("sweep failed: %s", error)
        connection.close()
