"""Errors of the queue, each carrying its HTTP meaning and its exact CONTRACT text."""

from rest_framework import status
from rest_framework.exceptions import APIException


class QueueFull(APIException):
    """AGENTOS_MAX_QUEUE_DEPTH tickets are queued already: the submit is refused and writes nothing."""

    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_detail = "Job queue is full"
