"""agentos's cancel reaching Agno's own checkpoints: the process's Agno cancellation manager asks agentos too.

Agno checks, at its checkpoints (between streamed chunks, around tool calls, between a team's members and a
workflow's steps), whether a run was cancelled, through one manager per process. The one installed here is
Agno's in-memory manager that also asks, for a run a leg of agentos is executing (`watching`), the leg's own check
(`RunContext.cancelled`: agentos's cancel flag, or a shutdown's interrupt): for that run itself, for a team's member
runs (which Agno registers under the team's run), and for any run Agno starts on the leg's thread (a workflow's
steps' agents). So an agentos cancel stops an Agno run at its next checkpoint, where Agno ends it CANCELLED with
what it had written, as it ends a run its own cancel stopped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from agno.exceptions import RunCancelledException
from agno.run.cancel import get_cancellation_manager, set_cancellation_manager
from agno.run.cancellation_management.in_memory_cancellation_manager import InMemoryRunCancellationManager


class AgentosCancellations(InMemoryRunCancellationManager):
    """Agno's in-memory cancellation manager, which also asks agentos about the runs its legs execute."""

    def __init__(self) -> None:
        super().__init__()
        self._asked: dict[str, Callable[[], bool]] = {}
        self._teams: dict[str, str] = {}  # a member run's team run
        self._guard = threading.Lock()
        self._leg = threading.local()  # the check of the leg this thread executes

    @contextlib.contextmanager
    def watching(self, run_id: str, cancelled: Callable[[], bool]) -> Iterator[None]:
        """While the block runs on this thread, Agno's checks of `run_id` (and of its members and of what Agno starts
        on this thread) ask `cancelled` too."""
        with self._guard:
            self._asked[run_id] = cancelled
        self._leg.cancelled = cancelled
        try:
            yield
        finally:
            self._leg.cancelled = None
            with self._guard:
                self._asked.pop(run_id, None)
                for member in [member for member, team in self._teams.items() if team == run_id]:
                    del self._teams[member]

    def register_member_run(self, team_run_id: str, member_run_id: str) -> None:
        super().register_member_run(team_run_id, member_run_id)
        with self._guard:
            self._teams[member_run_id] = team_run_id

    async def aregister_member_run(self, team_run_id: str, member_run_id: str) -> None:
        await super().aregister_member_run(team_run_id, member_run_id)
        with self._guard:
            self._teams[member_run_id] = team_run_id

    def is_cancelled(self, run_id: str) -> bool:
        return self._agentos_cancelled(run_id) or super().is_cancelled(run_id)

    async def ais_cancelled(self, run_id: str) -> bool:
        return self._agentos_cancelled(run_id) or await super().ais_cancelled(run_id)

    def raise_if_cancelled(self, run_id: str) -> None:
        if self._agentos_cancelled(run_id):
            raise RunCancelledException(f"Run {run_id} was cancelled")
        super().raise_if_cancelled(run_id)

    async def araise_if_cancelled(self, run_id: str) -> None:
        if self._agentos_cancelled(run_id):
            raise RunCancelledException(f"Run {run_id} was cancelled")
        await super().araise_if_cancelled(run_id)

    def _agentos_cancelled(self, run_id: str) -> bool:
        with self._guard:
            while run_id in self._teams:  # a member's team, up to the run a leg executes
                run_id = self._teams[run_id]
            asked = self._asked.get(run_id)
        asked = asked or getattr(self._leg, "cancelled", None)
        return bool(asked and asked())


_installing = threading.Lock()


def cancellations() -> AgentosCancellations:
    """This process's Agno cancellation manager, installed the first time it is asked for (in place of whichever
    the user's module set: Agno's own checks still see Agno's own cancels)."""
    with _installing:
        manager = get_cancellation_manager()
        if not isinstance(manager, AgentosCancellations):
            manager = AgentosCancellations()
            set_cancellation_manager(manager)
        return manager
