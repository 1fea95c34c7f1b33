"""uvicorn's HTTP protocol (httptools) with the bounds of `agentos_project.headerlimit` enforced while a head arrives.

uvicorn takes a head of any size from httptools, whose parser gathers each header field whole before handing it
over: the memory a head costs grows with it. Here a connection counts the bytes of the head it is reading, and feeds
the parser no more than the limit and one byte of it; one over `AGENTOS_MAX_HEADER_BYTES`, or with more than
`AGENTOS_MAX_HEADERS` fields, is answered 431 `{"detail": ...}` and the connection closed. What a body costs is
uvicorn's flow control's, and `agentos_project.bodylimit`'s.

`serve` runs uvicorn with it (`--http agentos_project.httpserver:HttpToolsProtocol`); so should uvicorn started by
hand (docs/operations.md).
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as UvicornHttpToolsProtocol

from .conf import current
from .refusals import HEADERS_TOO_LARGE, headers_too_large, refusal_bytes, too_many_headers

HTTP_PROTOCOL = "agentos_project.httpserver:HttpToolsProtocol"


class HttpToolsProtocol(UvicornHttpToolsProtocol):
    """One connection. `_head` is the bytes of the head being read (0 before its first one), None while its body is
    read or its answer made; `_fields` counts its header fields. Once it has refused, the connection reads nothing
    more and the parser's callbacks for the rest of what it was fed do nothing."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.limits = current().http
        self._head: int | None = 0
        self._fields = 0
        self._refused = False

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
        if not self._refused:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._head = 0
        if not self._refused:
            super().on_message_complete()

    def _refuse(self, status: int, detail: str) -> None:
        """Answer `status` and close; while an earlier request's answer is still being sent (the refused head was
        pipelined behind it), close without one, which would land inside that answer."""
        self._refused = True
        self.logger.warning("Request refused with %d: %s", status, detail)
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(refusal_bytes(status, detail, self.server_state.default_headers))
        self.transport.close()
