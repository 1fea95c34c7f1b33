"""One place that turns exceptions into `{"detail": ...}` answers (CONTRACT 3.1, 14)."""

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body exceeds the 1 MiB limit"


class DatabaseUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Database unavailable; the run was not accepted, retry shortly"


def exception_handler(exc, context):
    if isinstance(exc, (OperationalError, InterfaceError)):
        exc = DatabaseUnavailable()
    elif isinstance(exc, RequestDataTooBig):
        exc = BodyTooLarge()
    elif isinstance(exc, ParseError):
        exc = RequestInvalid([{"type": "json_invalid", "loc": ["body"], "msg": str(exc.detail), "input": None}])
    elif isinstance(exc, DatabaseError):
        raise exc
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    headers = getattr(exc, "headers", None) or {}
    for name, value in headers.items():
        response[name] = value
    if isinstance(response.data, dict) and "detail" in response.data:
        return response
    return Response({"detail": response.data}, status=response.status_code, headers=response.headers)


class RequestInvalid(APIException):
    """422 with FastAPI's list of field errors, the shape AgentOS clients already parse."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY

    def __init__(self, errors: list[dict]):
        self.detail = errors

    @classmethod
    def field(cls, location: str, name: str, message: str, kind: str, value=None) -> "RequestInvalid":
        return cls([{"type": kind, "loc": [location, name], "msg": message, "input": value}])
