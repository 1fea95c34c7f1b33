"""Request parsers: DRF's, made to refuse what would otherwise crash the request or lose its fields (CONTRACT 3.1)."""

import io

from django.utils.http import parse_header_parameters
from rest_framework import parsers
from rest_framework.exceptions import ParseError


class BodyMalformed(ParseError):
    """A body that is not what its Content-Type says: 422 with `kind` as the field error's type."""

    def __init__(self, detail: str, *, kind: str):
        super().__init__(detail)
        self.kind = kind


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser (NaN and Infinity refused), and JSON nested beyond Python's recursion limit a 422."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


class MultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser, refusing a body its boundary does not frame.

    Django's parser reads such a body as best it can: a body framed by another boundary than the one declared
    becomes the first field's value, a body cut short loses its last field; so a request would go on without fields
    it sent (a background run executed inline, in a new session). Whole bodies are at most 1 MiB (`bodylimit`), so
    this one is read before Django's parser reads it again."""

    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read()
        problem = framing_problem(body, parse_header_parameters(media_type or "")[1].get("boundary"))
        if problem:
            raise BodyMalformed(problem, kind="multipart_invalid")
        try:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        except ParseError as refused:
            raise BodyMalformed(str(refused.detail), kind="multipart_invalid") from None


def framing_problem(body: bytes, boundary: str | None) -> str | None:
    """Why `boundary` does not frame the multipart `body`, or None when it does: the body must open with the boundary
    (after a preamble, if any, as RFC 2046 allows) and close with it (an epilogue may follow)."""
    if not boundary:
        return "Multipart body has no boundary in its Content-Type"
    delimiter = b"--" + boundary.encode("latin-1", "replace")
    if not (body.startswith(delimiter) or b"\r\n" + delimiter in body):
        return "Multipart body is not framed by the boundary it declares"
    if not (body.startswith(delimiter + b"--") or b"\r\n" + delimiter + b"--" in body):
        return "Multipart body ends before its closing boundary"
    return None
