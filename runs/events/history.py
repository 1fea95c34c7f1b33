"""A run's events as they stand, from its Redis buffer and from PostgreSQL, read off the event loop: what a stream
or a resume sends that it did not hear live (`with_stored`), and the small pool its database reads run on
(`in_database`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from django.db import DatabaseError, connection

from ..selectors import run_stored_events
from . import publish

log = logging.getLogger("agentos.streams")


@dataclasses.dataclass(frozen=True)
class Buffered:
    """What a run's buffer holds above an index. The buffer holds every event of the run from `first` on (it
    expires whole, a quiet hour after its last event), so the events between the index asked for and `first`
    are found, if at all, among the stored ones (`with_stored`)."""

    events: list[bytes]
    total: int
    first: int


async def with_stored(run_id, after: int, buffered: Buffered | None) -> list[bytes | str]:
    """The run's events above `after` as the buffer has them, preceded by the stored events the buffer no longer
    holds (an earlier leg's, when its buffer expired before the next leg began); all stored ones without a
    buffer."""
    if buffered is not None and buffered.first <= after + 1:
        return buffered.events
    events = buffered.events if buffered else []
    try:
        stored = await in_database(
            run_stored_events, run_id=run_id, after=after, before=None if buffered is None else buffered.first
        )
    except DatabaseError as error:
        log.warning("run=%s stored events not read: %s", run_id, error)
        return events
    return [publish.encode(event) for event in stored] + events


_database = ThreadPoolExecutor(4, "agentos-stream-db")


async def in_database(function: Callable, **kwargs):
    """Run a short read on the streams' own small pool: a stream never holds a thread or connection of its own."""

    def call():
        try:
            return function(**kwargs)
        finally:
            connection.close()  # back to the process's idle pool, checked before its next use

    return await asyncio.get_running_loop().run_in_executor(_database, call)
