"""One place that turns exceptions into `{"detail": ...}` answers (CONTRACT 3.1, 14)."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.views import exception_handler as drf_exception_handler


def first_line(error: BaseException) -> str:
    """The first line of an error's text (its class name when it has none), for one-line messages."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body exceeds the 1 MiB limit"


class DatabaseUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Database unavailable; the run was not accepted, retry shortly"


class RequestRefused(APIException):
    """A request Django refuses before any view sees it (too many fields or files, a malformed body)."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "Bad request"


class RequestInvalid(APIException):
    """422 with FastAPI's list of field errors (`type`, `loc`, `msg`, `input`), the shape AgentOS clients parse."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY

    def __init__(self, errors: list[dict]):
        self.detail = errors


def exception_handler(exc, context):
    """DRF's handler, after mapping database outages to 503, oversized bodies to 413 and bad JSON to 422.

    Every answer is `{"detail": ...}`; an exception's `headers` (e.g. Retry-After) are sent along.
    """
    if isinstance(exc, (OperationalError, InterfaceError)):
        exc = DatabaseUnavailable()
    elif isinstance(exc, RequestDataTooBig):
        exc = BodyTooLarge()
    elif isinstance(exc, SuspiciousOperation):
        exc = RequestRefused(refusal_text(exc))
    elif isinstance(exc, ParseError):
        kind = getattr(exc, "kind", "json_invalid")  # a parser's own kind of malformed body, else bad JSON
        exc = RequestInvalid([{"type": kind, "loc": ["body"], "msg": str(exc.detail), "input": None}])
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if not (isinstance(response.data, dict) and "detail" in response.data):
        response.data = {"detail": response.data}
    for name, value in (getattr(exc, "headers", None) or {}).items():
        response[name] = value
    return response


# Django's own error pages, for what never reaches a DRF view (an unrouted path, a refused request): JSON too.


def refusal_text(exception) -> str:
    if isinstance(exception, TooManyFieldsSent):
        return f"Too many fields in the request (at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS})"
    if isinstance(exception, TooManyFilesSent):
        return f"Too many files in the request (at most {settings.DATA_UPLOAD_MAX_NUMBER_FILES})"
    return RequestRefused.default_detail


def bad_request(request, exception=None):
    return JsonResponse({"detail": refusal_text(exception)}, status=400)


def permission_denied(request, exception=None):
    return JsonResponse({"detail": "Forbidden"}, status=403)


def not_found(request, exception=None):
    return JsonResponse({"detail": "Not Found"}, status=404)


def server_error(request):
    return JsonResponse({"detail": "Internal server error"}, status=500)
