"""A streamed response that knows its last part, so the end of its body goes out with it (`handlers`)."""

from django.http import StreamingHttpResponse


class LastPart(bytes):
    """The part of a streamed response after which nothing follows: it goes out as the end of the body, so the
    server writes the two together (one socket write fewer per stream, and one wake-up fewer for its client)."""


class PartsResponse(StreamingHttpResponse):
    """A streamed response that may end with a `LastPart` (Django's would turn it into plain bytes)."""

    def make_bytes(self, value):
        return value if isinstance(value, LastPart) else super().make_bytes(value)
