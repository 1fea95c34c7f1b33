"""uvicorn's HTTP protocol (httptools) with the bounds of `agentos_project.headerlimit` enforced while a head arrives.

uvicorn takes a head of any size from httptools, whose parser gathers each header field whole before handing it
over: the memory a head costs grows with it. Here a connection counts the bytes of the head it is reading, and feeds
the parser no more than the limit and one byte of it; one over `AGENTOS_MAX_HEADER_BYTES`, or with more than
`AGENTOS_MAX_HEADERS` fields, is answered 431 `{"detail": ...}` and the connection closed. What a body costs is
uvicorn's flow control's, and `agentos_project.bodylimit`'s.

uvicorn also waits for a head for ever (its keep-alive timeout covers only the wait between two requests): a
client sending a header byte now and then (slowloris) holds a connection as long as it likes. Here a head has
`AGENTOS_HEADER_TIMEOUT_SECONDS` from the connection, or from its first byte after an earlier request, to arrive
whole; a late one is answered 408 and the connection closed. A connection that has sent nothing by then is closed
unanswered, as there is no request to answer (browsers open connections ahead of need).

`serve` runs uvicorn with it (`--http agentos_project.httpserver:HttpToolsProtocol`); so should uvicorn started by
hand (docs/operations.md).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as UvicornHttpToolsProtocol

from .core.conf import current
from .refusals import HEADERS_TOO_LARGE, TOO_SLOW, head_too_slow, headers_too_large, refusal_bytes, too_many_headers

HTTP_PROTOCOL = "agentos_project.httpserver:HttpToolsProtocol"


class HttpToolsProtocol(UvicornHttpToolsProtocol):
    """One connection. `_head` is the bytes of the head being read (0 before its first one), None while its body is
    read or its answer made; `_fields` counts its header fields; `_deadline` ends the wait for it. Once it has
    refused, the connection reads nothing more and the parser's callbacks for the rest of what it was fed do
    nothing."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.limits = current().http
        self._head: int | None = 0
        self._fields = 0
        self._refused = False
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_awaiting_head()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        limit = self.limits.max_header_bytes
        while data and not self._refused and not self.transport.is_closing():
            if self._head is None:
                super().data_received(data)
                return
            room = limit + 1 - self._head
            piece, data = data[:room], data[room:]
            self._head += len(piece)
            super().data_received(piece)
            if self._head is not None and self._head > limit:
                self._refuse(HEADERS_TOO_LARGE, headers_too_large(limit))

    def on_message_begin(self) -> None:
        self._fields = 0
        if self._deadline is None:
            self._await_head()
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        self._fields += 1
        if self._fields > self.limits.max_headers:
            self._refuse(HEADERS_TOO_LARGE, too_many_headers(self.limits.max_headers))
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head = None
        self._stop_awaiting_head()
        if not self._refused:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._head = 0
        if not self._refused:
            super().on_message_complete()

    def _await_head(self) -> None:
        timeout = self.limits.header_timeout_seconds
        if timeout is not None:
            self._deadline = self.loop.call_later(timeout, self._head_overdue)

    def _stop_awaiting_head(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_overdue(self) -> None:
        self._deadline = None
        if self._head is None or self._refused or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._await_head()  # a head pipelined behind an answer still going out waits for its turn
        elif self._head == 0:
            self.transport.close()
        else:
            self._refuse(TOO_SLOW, head_too_slow(self.limits.header_timeout_seconds))

    def _refuse(self, status: int, detail: str) -> None:
        """Answer `status` and close; while an earlier request's answer is still being sent (the refused head was
        pipelined behind it), close without one, which would land inside that answer."""
        self._refused = True
        self.logger.warning("Request refused with %d: %s", status, detail)
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(refusal_bytes(status, detail, self.server_state.default_headers))
        self.transport.close()
