"""The seam between the queue and the work it carries.

`queueing` knows tickets, not agents: the app that owns the work (here `runs`) registers an `Executor` at
start-up. The queue calls `start` inside the transaction that claims a ticket, `execute` outside any
transaction, and `settle` inside the transaction of every change that ends or parks a ticket, so the job's
own rows change atomically with its ticket.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

# The mark of the transaction that settles a ticket, for the statements an executor adds to it
# (`Executor.settle_statements`): true in that transaction once, and only if, its guarded change matched. Its one
# parameter, `%(fence)s` (text), is the value the executor was given.
FENCE = "current_setting('agentos.settling', true) = %(fence)s"


@dataclasses.dataclass(frozen=True)
class Claim:
    """A ticket this worker owns for one attempt; every write of the attempt is fenced by (id, attempt)."""

    ticket_id: str
    attempt: int
    max_attempts: int
    worker_id: str
    session_id: str
    payload: dict
    # For the wait and hand-off histograms: seconds the ticket had waited when claimed (first attempts only), since
    # its session was handed to it (a ticket that waited behind another), and when (time.monotonic()).
    waited_seconds: float | None = dataclasses.field(default=None, compare=False)
    handoff_seconds: float | None = dataclasses.field(default=None, compare=False)
    claimed_at: float = dataclasses.field(default=0.0, compare=False)
    component: tuple[str, str] | None = dataclasses.field(default=None, compare=False)  # (type, id) of the ticket


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What an attempt produced. `status` is the ticket status it asks for; `result` is the executor's own."""

    status: str  # completed | failed | paused | cancelled
    error: str | None = None
    retryable: bool = False
    result: object = None
    retry_delay: float | None = None  # a flat delay instead of the backoff (shutdown interruptions)

    @property
    def yields_to_cancel(self) -> bool:
        """Whether a cancel asked while the attempt ran wins over this outcome (CONTRACT 9): a pause, or a failure
        that was not the job's input's fault. The attempt then ends cancelled (`Executor.cancelled`)."""
        return self.status == "paused" or (self.status == "failed" and self.retryable)


@dataclasses.dataclass(frozen=True)
class Settlement:
    """A ticket change the executor must mirror: the new status, the attempt it ended, why, and what it was."""

    ticket_id: str
    status: str
    attempt: int
    error: str | None = None
    outcome: Outcome | None = None
    previous: str | None = None


@dataclasses.dataclass(frozen=True)
class SettleStatements:
    """What an executor writes when a ticket settles, as statements the queue sends in its settling message:
    `calls` (SQL and values, each statement guarded by `FENCE`, so it writes nothing when the ticket's change did
    not match), and `after`, called once that committed, only if the change matched."""

    calls: list[tuple[str, list]]
    after: Callable[[], None] | None = None


class Executor(Protocol):
    # The same as `start`, as SQL: the body of a data-modifying CTE that reads the CTE `claimed(id, attempt)` (the
    # ticket just claimed). An executor that gives it is started by the claiming statement itself, one round trip
    # with no transaction around it; `start` is then never called. None: `start` is called in the claim's
    # transaction.
    start_sql: str | None = None

    def start(self, claim: Claim) -> None:
        """Mark the job started for this attempt, inside the transaction that claimed it."""

    def execute(self, claim: Claim) -> Outcome:
        """Run the attempt, outside any transaction."""

    def settle(self, settlement: Settlement) -> None:
        """Mirror the ticket change `settlement` on the job, inside that change's transaction."""

    # The same as `settle`, as statements the queue sends with the ticket's change, all in one message and one
    # transaction (no round trip between them): None when this settlement needs `settle` (then the queue opens a
    # transaction and calls it). Optional: an executor without it is always settled through `settle`.
    settle_statements: Callable[[Settlement, str], SettleStatements | None] | None = None

    def cancel(self, ticket_id: str) -> str:
        """Cancel the job wherever it is: `cancelled` (done at once), `requested` (its running attempt stops at its
        next checkpoint) or `finished` (it had ended)."""

    def cancelled(self, outcome: Outcome) -> Outcome:
        """The outcome of an attempt whose `outcome` yields to a cancel asked while it ran (`Outcome.yields_to_cancel`):
        status `cancelled`, with whatever of the attempt's work the job keeps."""

    def parks_lost_attempt(self, ticket_id: str) -> bool:
        """Whether a lost attempt without budget left should park the ticket back to paused rather than fail it:
        the attempt continued a paused job and died before recording anything, so the job can be continued
        again."""


class _Slot:
    executor: Executor | None = None


def register_executor(executor: Executor) -> None:
    _Slot.executor = executor


def get_executor() -> Executor:
    if _Slot.executor is None:
        raise RuntimeError("No executor registered for the job queue")
    return _Slot.executor
