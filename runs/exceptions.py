"""Errors of the runs API, each carrying its HTTP meaning and its exact CONTRACT text."""

from rest_framework import status
from rest_framework.exceptions import APIException


class ComponentNotFound(APIException):
    status_code = status.HTTP_404_NOT_FOUND
    default_detail = "Component not found"


class RunNotFound(APIException):
    status_code = status.HTTP_404_NOT_FOUND
    default_detail = "Run not found"


class BackgroundNeedsStore(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "Background execution requires a database to be configured on the agent"


class SessionRequired(APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "session_id is required for this action"


class IdempotencyConflict(APIException):
    status_code = status.HTTP_409_CONFLICT


class IdempotencyKeyTooLong(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "Idempotency-Key must be at most 512 characters"


class IdempotencyKeyInvalid(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY


class IdempotencyMismatch(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "Idempotency-Key was reused with a different request"


class SessionNotYours(APIException):
    """The session_id names a session another user, or another component, created."""

    status_code = status.HTTP_409_CONFLICT

    def __init__(self, session_id: str):
        super().__init__(f"Session {session_id} belongs to another user or component; use a session_id of your own")


class ContinueRefused(APIException):
    """A continue that cannot apply to the run as it is (CONTRACT 11, 14)."""

    status_code = status.HTTP_409_CONFLICT


class LegSettling(APIException):
    """A continue while the previous continue's leg still executes: the client retries in a moment."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "Run is settling between execution legs; retry in a moment"
    headers = {"Retry-After": "1"}
