"""The queue's wire format (CONTRACT 3.7) and the validation of `/queue` requests."""

from __future__ import annotations

import datetime

from rest_framework import serializers

from .models import Ticket
from .seam import job_payload_shown


def _epoch(moment: datetime.datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def ticket_to_wire(ticket: Ticket) -> dict:
    """A job as AgentOS' `QueueJobSchema` has it (times in epoch seconds), with its place in the session line."""
    return {
        "id": str(ticket.id),
        "component_type": ticket.component_type,
        "component_id": ticket.component_id,
        "session_id": ticket.session_id,
        "job_type": "run",
        "user_id": ticket.user_id,
        "status": ticket.status,
        "attempt": ticket.attempt,
        "max_attempts": ticket.max_attempts,
        "session_seq": ticket.session_seq,
        "idempotency_key": ticket.idempotency_key,
        "available_at": _epoch(ticket.available_at),
        "locked_by": ticket.locked_by,
        "locked_at": _epoch(ticket.locked_at),
        "error": ticket.error,
        "created_at": _epoch(ticket.created_at),
        "updated_at": _epoch(ticket.updated_at),
        "completed_at": _epoch(ticket.completed_at),
        "payload": job_payload_shown(ticket.payload, user_id=ticket.user_id),
    }


class JobSerializer(serializers.Serializer):
    """A job of the durable queue: one run's ticket."""

    # For the OpenAPI schema only, which shows the docstring above: answers are built by `ticket_to_wire`.

    id = serializers.UUIDField()
    component_type = serializers.ChoiceField(choices=["agent", "team", "workflow"])
    component_id = serializers.CharField()
    session_id = serializers.CharField()
    job_type = serializers.CharField()
    user_id = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=["queued", "running", "paused", "completed", "failed", "cancelled"])
    attempt = serializers.IntegerField()
    max_attempts = serializers.IntegerField()
    session_seq = serializers.IntegerField()
    idempotency_key = serializers.CharField(allow_null=True)
    available_at = serializers.IntegerField(allow_null=True, help_text="epoch seconds")
    locked_by = serializers.CharField(allow_null=True)
    locked_at = serializers.IntegerField(allow_null=True, help_text="epoch seconds")
    error = serializers.CharField(allow_null=True)
    created_at = serializers.IntegerField(help_text="epoch seconds")
    updated_at = serializers.IntegerField(help_text="epoch seconds")
    completed_at = serializers.IntegerField(allow_null=True, help_text="epoch seconds")
    payload = serializers.DictField()


class PageMetaSerializer(serializers.Serializer):
    page = serializers.IntegerField()
    limit = serializers.IntegerField()
    total_pages = serializers.IntegerField()
    total_count = serializers.IntegerField()
    search_time_ms = serializers.FloatField()


class JobPageSerializer(serializers.Serializer):
    data = JobSerializer(many=True)
    meta = PageMetaSerializer()


class StatsSerializer(serializers.Serializer):
    counts = serializers.DictField(child=serializers.IntegerField())
    oldest_queued_age_seconds = serializers.IntegerField(allow_null=True, help_text="whole seconds")


class JobListQuery(serializers.Serializer):
    """The list's paging and sorting (422 when out of range); its filters are checked by the view (400)."""

    limit = serializers.IntegerField(min_value=1, max_value=1000, default=20)
    page = serializers.IntegerField(min_value=1, default=1)
    sort_by = serializers.CharField(default="created_at", trim_whitespace=False)
    sort_order = serializers.ChoiceField(choices=["asc", "desc"], default="desc")
    # Taken as sent (" failed" is an unknown status, " " a session of its own), as AgentOS takes them.
    status = serializers.ListField(child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False)
    session_id = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False
    )
    user_id = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)


class RequeueQuery(serializers.Serializer):
    force = serializers.BooleanField(default=False)
    clear_cancellation = serializers.BooleanField(default=False)
