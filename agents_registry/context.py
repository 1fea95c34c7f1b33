"""What the run loop receives and returns; agents_registry knows nothing of runs or tickets."""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Callable

from .journal import Journal

WOKEN_CHECK_SECONDS = 1.0


class PermanentRunError(Exception):
    """An input error (bad tool arguments, an unknown tool, validation): retrying cannot help."""


@dataclasses.dataclass
class RunContext:
    """The small world a run sees: history and state in, events out, a way to notice cancellation."""

    run_id: str
    session_id: str
    user_id: str | None
    history: list[dict]
    session_state: dict
    attempt: int = 1
    emit: Callable[[str, dict], None] = lambda name, fields: None
    cancelled: Callable[[], bool] = lambda: False
    clock: Callable[[], float] = time.monotonic
    # Where the leg's model calls and tool calls are kept as they complete, and replayed from on a later attempt.
    journal: Journal = dataclasses.field(default_factory=Journal)
    # Set when the run must stop (a cancel, a shutdown's interrupt): `wait` sleeps on it rather than waking every
    # `step` to ask `cancelled`, so a thousand runs waiting cost no CPU. What sets no event (the run's timeout) is
    # asked every WOKEN_CHECK_SECONDS.
    woken: threading.Event | None = None

    def wait(self, seconds: float, *, step: float = 0.05) -> bool:
        """Sleep up to `seconds`, waking early when cancelled; True means the run was cancelled."""
        deadline = self.clock() + seconds
        idle = None  # made only when there is no wake event: each is a lock, a condition and a deque (~1 KB)
        while True:
            if self.cancelled():
                return True
            left = deadline - self.clock()
            if left <= 0:
                return False
            if self.woken is not None and not self.woken.is_set():
                self.woken.wait(min(WOKEN_CHECK_SECONDS, left))
            else:
                idle = idle or threading.Event()
                idle.wait(min(step, left))


@dataclasses.dataclass
class RunRequest:
    """One execution leg: a new message, or the continuation of a paused run with the client's tool decisions."""

    message: str
    run_messages: list[dict] = dataclasses.field(default_factory=list)
    decided_tools: list[dict] | None = None


class LegStatus(enum.StrEnum):
    """How a leg ended, as the run loop tells it; the runs app maps each to its ticket's and its run's status."""

    COMPLETED = "completed"
    PAUSED = "paused"
    CANCELLED = "cancelled"


@dataclasses.dataclass
class RunResult:
    """How a leg ended. `messages` are this run's messages so far (user turn included)."""

    status: LegStatus
    content: str
    messages: list[dict]
    session_state: dict
    tools: list[dict] | None = None
    metrics: dict = dataclasses.field(default_factory=dict)
    requirements: list[dict] | None = None  # a paused agent's, as its pause event told them (`requirements`)
    reasoning: str = ""  # the model's reasoning behind its answer, when it streamed any
    content_type: str = "str"  # else `content` is the JSON of the agent's output schema, named so
