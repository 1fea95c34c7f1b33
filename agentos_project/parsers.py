"""Request parsers: DRF's, made to refuse what would otherwise crash the request (CONTRACT 3.1)."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser (NaN and Infinity refused), and JSON nested beyond Python's recursion limit a 422."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
