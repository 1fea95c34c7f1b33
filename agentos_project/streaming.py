"""A streamed response that knows its last part, so the end of its body goes out with it (`handlers`)."""

from django.http import StreamingHttpResponse


class Ending(str):
    """Text that ends a streamed response: a `PartsResponse` sends it as the end of its body."""


class LastPart(bytes):
    """The part of a streamed response after which nothing follows: it goes out as the end of the body, so the
    server writes the two together (one socket write fewer per stream, and one wake-up fewer for its client)."""


class PartsResponse(StreamingHttpResponse):
    """A streamed response that may end with an `Ending` or a `LastPart` (Django's would make plain bytes of it)."""

    def make_bytes(self, value):
        if isinstance(value, Ending):
            return LastPart(value.encode(self.charset))
        return value if isinstance(value, LastPart) else super().make_bytes(value)
