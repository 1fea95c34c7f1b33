"""The step journal as the run loop sees it: each model call and tool call of a leg is a step, numbered in the
order the loop makes them; a journal keeps what each one answered, so a later attempt of the same leg replays
them instead of calling again.

The loop asks `replay` before every step. While the steps it makes are the ones journaled (same position, same
fingerprint), it gets their recorded outcome and calls nothing; from the first step with no entry, or one whose
fingerprint differs (the component changed), it runs live and every later step too. A tool call is `started` in
the journal before it runs and `completed` when it returns; a model answer is `completed` when it streamed to its
end. `agents_registry` knows only this protocol: the journal that writes is the runs app's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable

from agentos_project.core.jsonsafe import storable

MODEL = "model"
TOOL = "tool"
COMPLETED = "completed"
STARTED = "started"
FAILED = "failed"  # the tool raised and failed the run (on_error="fail"): a retry runs it again
INTERRUPTED = "interrupted"  # started by a lost attempt, and failed the run (on_interrupt="fail")

STATE = "session_state"  # in a completed tool call's output: the session state it left, when it changed it
OUTCOME_UNKNOWN = (
    "The previous attempt of this run started {tool} (call {call_id}) and was lost before it returned: its outcome "
    "is unknown. It was not run again; check before assuming it did or did not take effect."
)
INTERRUPTED_FAILS = (
    "Tool {tool} (call {call_id}) was started by attempt {attempt}, which was lost before it returned: its outcome "
    'is unknown, and the tool\'s on_interrupt is "fail". Check its effect, then requeue the run to run it again.'
)


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A journaled step as a later attempt finds it: `status` (completed, started, interrupted), what it answered
    (`output`), and the attempt that wrote it."""

    status: str
    output: dict | None
    attempt: int


def fingerprint(*parts) -> str:
    """What identifies a step's request: a digest of its parts (JSON) as PostgreSQL stores them (`storable`: a NUL
    or a lone surrogate is U+FFFD), the same in every process and attempt, so a request built from a replayed
    answer matches the one built from the live answer it was stored from."""
    text = json.dumps(storable(parts), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Journal:
    """What the run loop asks of a journal, as no journal answers it: every step runs live and nothing is kept (a
    run without a ticket, or the journal turned off). The runs app's journal (`runs.services.journal.RunJournal`)
    answers it from PostgreSQL."""

    keeps = False  # whether completed steps are kept: then a tool's change of the session state is kept with it

    def replay(self, kind: str, fingerprint: Callable[[], str], call: dict | None = None) -> Recorded | None:
        """Begin the next step, `kind` with `fingerprint` (computed only if the journal needs it; a tool `call`:
        its name, id and arguments); its journaled entry when the journal is still replaying and holds this very
        step there, else None: the step runs live. Called once per step, in the order the loop makes them."""
        return None

    def started(self) -> None:
        """The current step, a tool call, is about to run: kept before it does."""

    def completed(
        self,
        kind: str,
        output: dict,
        *,
        duration: float,
        status: str = COMPLETED,
        announce: Callable[[], None] = lambda: None,
    ) -> None:
        """The current step ended with `output`: a model's answer (`ModelTurn.record`), a tool's `content` (with `error`
        when it failed). `announce` emits the event that tells it, published once the step is kept."""
        announce()

    def interrupted(self) -> None:
        """The current step, a tool call a lost attempt started, fails the run (on_interrupt="fail")."""
