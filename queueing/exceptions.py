"""Errors of the queue, each carrying its HTTP meaning and its exact CONTRACT text."""

from rest_framework import status
from rest_framework.exceptions import APIException


class QueueFull(APIException):
    """AGENTOS_MAX_QUEUE_DEPTH tickets are queued already: the submit is refused and writes nothing."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_detail = "Job queue is full"


class JobNotFound(APIException):
    status_code = status.HTTP_404_NOT_FOUND

    def __init__(self, job_id: str):
        super().__init__(f"Job queue job {job_id} not found")


class JobNotRequeueable(APIException):
    """Requeue of a ticket that is not failed or cancelled (or does not exist)."""

    status_code = status.HTTP_400_BAD_REQUEST

    def __init__(self, job_id: str):
        super().__init__(f"Job {job_id} not found or not in a requeueable state")


class JobFailedRecently(APIException):
    """Requeue without `force` of a ticket that failed less than the lease grace ago: its worker may be alive."""

    status_code = status.HTTP_409_CONFLICT

    def __init__(self, job_id: str, grace_seconds: float):
        super().__init__(
            f"Job {job_id} failed within the last {grace_seconds:g}s and its worker may still be executing; "
            "retry after the lock grace elapses, or pass force=true to override."
        )


class QueueDisabled(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Queue not available: the durable queue is disabled (AGENTOS_QUEUE_DURABLE=false)."


class BadQueueQuery(APIException):
    """A `/queue/jobs` query refused with 400: a filter AgentOS refuses (an unknown status, an empty session_id or
    user_id), or a page beyond the last one PostgreSQL can offset to."""

    status_code = status.HTTP_400_BAD_REQUEST
