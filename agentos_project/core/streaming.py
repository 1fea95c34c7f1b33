"""A streamed response whose parts the web process sends itself, its last part as the end of its body
(`handlers`)."""

import contextlib
from collections.abc import AsyncIterator

from django.core import signals
from django.http import StreamingHttpResponse


class Ending(str):
    """Text that ends a streamed response: a `PartsResponse` sends it as the end of its body."""


class LastPart(bytes):
    """Bytes that end a streamed response, as an `Ending` does text."""


class PartsResponse(StreamingHttpResponse):
    """A streamed response of text or bytes parts that may end with an `Ending` or a `LastPart`: the end of the body
    goes out with it (one socket write fewer per stream, and one wake-up fewer for its client).

    The web's handler sends the parts as they come (`parts`), and finishes the request (the `request_finished`
    receivers, which give back what the request's thread holds) on that thread as soon as the view has returned
    (`finish`); closing the response at the end of its body then closes only its resources."""

    def __init__(self, parts: AsyncIterator, *args, **kwargs):
        super().__init__(parts, *args, **kwargs)
        self.parts = parts
        self.finished = False

    def finish(self) -> None:
        """Send `request_finished` now, on the request's thread: `close` does not again."""
        self.finished = True
        signals.request_finished.send(sender=self._handler_class)

    def close(self) -> None:
        if not self.finished:
            return super().close()
        for closer in self._resource_closers:
            with contextlib.suppress(Exception):
                closer()
        self._resource_closers.clear()
        self.closed = True
