"""The seam between the queue and the work it carries: everything one side gives the other, declared here.

`queueing` knows tickets, not agents: the app that owns the work (here `runs`) registers an `Executor` at start-up
and gives its SQL to the queue's statements. The queue accepts a ticket with the caller's `Rows` in the same
statement (they read `GATE`, leave a row in `ADMITTED`); claims it with the executor's `start_sql` (which reads
`CLAIMED`); calls `execute` outside any transaction; and sends the executor's `settle` statements (each guarded by
`FENCE`) with every change of a ticket, in its transaction: a finish in one message with them. So the work's own
rows change atomically with its ticket. The names below are the whole contract.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable
from typing import Protocol

# The accept's CTE the caller's rows read: one row, `open` (boolean), false when the queue is full.
GATE = "gate"
# The CTE the caller's rows must define: one row when they wrote (the ticket is inserted only then).
ADMITTED = "admitted"
# The claim's CTE `start_sql` reads: `(id, attempt)` of the ticket just claimed, no row when none was.
CLAIMED = "claimed"
# The setting that marks the transaction settling a ticket, set only if its guarded change matched: `FENCE` is true
# in that transaction from then on. Its one parameter, `%(fence)s` (text), is the value the executor was given.
SETTLING = "agentos.settling"
FENCE = f"current_setting('{SETTLING}', true) = %(fence)s"


def job_payload(*, message: str, kwargs: dict, user_id: str | None, **beside) -> dict:
    """A ticket's payload as AgentOS' job payload has it (`/queue` shows it, CONTRACT 3.7): the message as `input`,
    the run's other arguments as `kwargs`, the `scope` its component resolves in (a registry's: no versions); then
    `beside`, what else the work keeps of its submission."""
    return {"input": message, "kwargs": kwargs, "scope": _scope(user_id), **beside}


def job_payload_shown(payload: dict, *, user_id: str | None) -> dict:
    """A stored payload as `/queue` shows it: AgentOS' job payload. One stored with its message as `message` (before
    it was `input`, or by an older replica during a rolling upgrade) is shown as `job_payload` would have stored it;
    any other is shown as stored."""
    if "message" not in payload or "input" in payload:
        return payload
    beside = {key: value for key, value in payload.items() if key != "message"}
    kwargs = {key: payload[key] for key in ("session_state", "metadata") if payload.get(key) is not None}
    return job_payload(message=payload["message"], kwargs=kwargs, user_id=user_id, **beside)


def _scope(user_id: str | None) -> dict:
    return {"user_id": user_id, "version": None, "pinned": None, "source": "registry"}


@dataclasses.dataclass(frozen=True)
class NewTicket:
    """A ticket to accept: `id` is its run's id."""

    id: uuid.UUID
    component_type: str
    component_id: str
    session_id: str
    user_id: str | None
    payload: dict
    serialized: bool
    max_attempts: int
    idempotency_key: str | None = None
    idempotency_scope: str = ""
    request_digest: str | None = None
    ttl_seconds: float | None = None  # its deadline: it must start within as many seconds of its accept


@dataclasses.dataclass(frozen=True)
class Rows:
    """What the caller writes in the accept's statement, next to the ticket: data-modifying CTEs (SQL, with
    named parameters of the PostgreSQL types `types`, besides which they may read the new ticket's own:
    `ticket_id`, `component_type`, `component_id`, `session_id`, `user_id`) that write only when `GATE.open` and
    leave one row in `ADMITTED` when they wrote; and a list of SQL expressions answered with the outcome
    (`Admitted.answers`). `name` tells the prepared statement apart: one name, one SQL."""

    name: str
    ctes: str
    params: dict
    types: dict = dataclasses.field(default_factory=dict)
    answers: tuple[str, ...] = ()


ONLY_THE_TICKET = Rows("ticket", f"{ADMITTED} AS (SELECT 1 FROM {GATE} WHERE {GATE}.open)", {})


@dataclasses.dataclass(frozen=True)
class Admitted:
    """How an accept's statement went: `accepted` when the ticket was inserted; else `full` (the queue is full) or
    the caller's rows refused (see `answers`, the caller's expressions as the statement saw them)."""

    accepted: bool
    full: bool
    answers: tuple
    publish: bool = False


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
    # A retryable failure whose attempt made progress the work keeps (`LostAttempt.RESUME`): queued again even
    # without budget left, with one more attempt.
    resume: bool = False

    @property
    def yields_to_cancel(self) -> bool:
        """Whether a cancel asked while the attempt ran wins over this outcome (CONTRACT 9): a pause, or a failure
        that was not the fault of the work's input. The attempt then ends cancelled (`Executor.cancelled`)."""
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
    """What an executor writes when a ticket changes, as statements the queue sends in that change's transaction:
    `calls` (SQL and values, each statement guarded by `FENCE`, so it writes nothing when the ticket's change did
    not match), and `after`, called once that committed, only if the change matched."""

    calls: list[tuple[str, list]]
    after: Callable[[], None] | None = None


class LostAttempt(enum.StrEnum):
    """What becomes of an attempt without budget left that was lost (its lease went stale) or interrupted by a
    shutdown (`Executor.lost_attempt`)."""

    FAIL = "fail"  # as any lost attempt: the ticket fails
    PARK = "park"  # the attempt continued paused work and changed nothing: paused again, to be continued again
    RESUME = "resume"  # it made progress the work keeps: queued once more, the next attempt goes on from there


class Executor(Protocol):
    # The work's start for the attempt just claimed, as SQL: the body of a data-modifying CTE that reads the CTE
    # `CLAIMED` (`(id, attempt)` of the ticket, no row when none was claimed). The claiming statement runs it, so
    # the work starts with its claim, in one round trip with no transaction around it.
    start_sql: str

    def execute(self, claim: Claim) -> Outcome:
        """Run the attempt, outside any transaction."""

    def settle(self, settlement: Settlement, fence: str) -> SettleStatements:
        """How the ticket change `settlement` shows on the work, as statements the queue sends in that change's
        transaction once its guarded change matched, each guarded by `FENCE` with `fence`: with a finish by the
        attempt's owner, in the same message (no round trip between them). Called before they are sent, in the
        change's transaction for any other change, outside any for a finish."""

    def cancel(self, ticket_id: str) -> str:
        """Cancel the work wherever it is: `cancelled` (done at once), `requested` (its running attempt stops at its
        next checkpoint) or `finished` (it had ended)."""

    def cancelled(self, outcome: Outcome) -> Outcome:
        """The outcome of an attempt whose `outcome` yields to a cancel asked while it ran (`Outcome.yields_to_cancel`):
        status `cancelled`, with whatever of the attempt's work the work keeps."""

    def lost_attempt(self, ticket_id: str) -> LostAttempt:
        """What becomes of the ticket's attempt, lost or interrupted without budget left: failed, parked back to
        paused (it continued paused work and changed nothing), or resumed (it made progress the work kept).

        The sweeper asks inside the transaction that then changes the ticket, with the ticket's row locked: the
        executor locks its work's row too, so no write of the lost attempt slips in between its answer and the
        change (a lost attempt's writes are fenced on that row)."""

    def forget(self, ticket_ids: list[str]) -> None:
        """The tickets `ticket_ids` were pruned, in the caller's transaction: drop what the work keeps only while its
        ticket lives (a run's step journal, which only a later attempt could use)."""


class _Slot:
    executor: Executor | None = None


def register_executor(executor: Executor) -> None:
    _Slot.executor = executor


def get_executor() -> Executor:
    if _Slot.executor is None:
        raise RuntimeError("No executor registered for the job queue")
    return _Slot.executor
