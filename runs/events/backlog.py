"""What an open stream holds for its client, bounded (`Backlog`): the queue the web process's hub fills with a run's
events and the stream empties as its client reads."""

from __future__ import annotations

import asyncio

from agentos_project.core.conf import current


class _FellBehind(bytes):
    """The type of `FELL_BEHIND`, told apart by identity from any message."""


FELL_BEHIND = _FellBehind()  # the last item of a backlog that overflowed


class Backlog(asyncio.Queue):
    """What reached a stream and was not sent yet, bounded in bytes (AGENTOS_STREAM_BACKLOG_BYTES).

    A client that stops reading holds its stream's generator at a write (once the socket's buffers are full);
    what its run publishes meanwhile waits here. When more than the bound would wait, the backlog drops it all,
    holds only `FELL_BEHIND` and takes nothing more: the stream then ends with an `error` frame that tells the
    client to resume from the last index it has. So an idle client costs at most the bound, not its run's every
    event for as long as its connection lives. A stream that reads drains its backlog whenever the event loop
    runs it, and the hub delivers no more than its connection's read buffer at a time; one message larger than
    the bound is taken when nothing waits."""

    def __init__(self) -> None:
        super().__init__()
        self.limit = current().streams.backlog_bytes
        self.size = 0
        self.overflowed = False

    def _put(self, item) -> None:
        self.size += len(item)
        super()._put(item)

    def _get(self):
        item = super()._get()
        self.size -= len(item)
        return item

    def offer(self, item: bytes) -> None:
        """Queue `item`, unless the backlog overflows now (see the class) or already did."""
        if self.overflowed:
            return
        if self.size and self.size + len(item) > self.limit:
            self.overflowed = True
            while not self.empty():
                self.get_nowait()
            self.put_nowait(FELL_BEHIND)
            return
        self.put_nowait(item)
