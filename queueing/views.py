"""`/queue` (CONTRACT 3.7) and `/metrics` (CONTRACT 12): validate, call one selector or operation, serialize.

Each operation states its `description` for `/openapi.json`, which would otherwise show the view's docstring; the
operationIds are AgentOS' own."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework.response import Response
from rest_framework.views import APIView

from agentos_project.core.conf import current
from agentos_project.core.identity.auth import QueueAdminPermission
from agentos_project.core.identity.scopes import is_operator
from agentos_project.core.openapi import INVALID, refused
from agentos_project.core.validation import validated

from . import metrics
from .exceptions import JobNotFound, QueueDisabled
from .operations import job_requeue, job_search
from .selectors import JOB_STATUSES, queue_stats, ticket_get
from .serializers import JobListQuery, JobPageSerializer, JobSerializer, RequeueQuery, StatsSerializer, ticket_to_wire

REFUSALS = {
    401: refused("no bearer token while AGENTOS_SECURITY_KEY or AGENTOS_ADMIN_TOKEN is set"),
    403: refused("Job queue operations require an admin scope"),
    503: refused("the durable queue is disabled"),
}


class QueueView(APIView):
    """The admin gate first (401/403), then whether there is a durable queue at all (503)."""

    permission_classes = [QueueAdminPermission]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if not current().queue.durable:
            raise QueueDisabled()


def _query(request) -> dict:
    """Query parameters, repeatable ones as lists, over a form or JSON body's fields."""
    query = {
        key: values if key in ("status", "session_id") else values[-1] for key, values in request.query_params.lists()
    }
    body = request.data.dict() if hasattr(request.data, "dict") else request.data
    return {**(body if isinstance(body, dict) else {}), **query}


class JobListView(QueueView):
    @extend_schema(
        operation_id="list_queue_jobs",
        description="Jobs of the durable queue, newest first; status=failed is the dead-letter list.",
        parameters=[
            OpenApiParameter("status", str, many=True, enum=JOB_STATUSES, description="repeatable"),
            OpenApiParameter("session_id", str, many=True, description="repeatable"),
            OpenApiParameter("user_id", str),
            OpenApiParameter("limit", int, description="1 to 1000, default 20"),
            OpenApiParameter("page", int, description="from 1"),
            OpenApiParameter("sort_by", str, description="created_at (default), updated_at, completed_at, status, …"),
            OpenApiParameter("sort_order", str, enum=["asc", "desc"]),
        ],
        responses={
            200: JobPageSerializer,
            400: refused("an unknown status, an empty filter"),
            422: INVALID,
            **REFUSALS,
        },
    )
    def get(self, request):
        query = validated(JobListQuery, _query(request), location="query")
        page = job_search(
            statuses=query.get("status") or [],
            session_ids=query.get("session_id") or [],
            user_id=query.get("user_id"),
            limit=query["limit"],
            page=query["page"],
            sort_by=query["sort_by"],
            descending=query["sort_order"] == "desc",
        )
        return Response(page)


class JobDetailView(QueueView):
    @extend_schema(
        operation_id="get_queue_job",
        description="One job of the durable queue.",
        responses={200: JobSerializer, 404: refused("no such job"), **REFUSALS},
    )
    def get(self, request, job_id: str):
        ticket = ticket_get(ticket_id=job_id)
        if ticket is None:
            raise JobNotFound(job_id)
        return Response(ticket_to_wire(ticket))


class JobRequeueView(QueueView):
    @extend_schema(
        operation_id="requeue_queue_job",
        description="A failed or cancelled job back in line, with one more attempt, at the back of its session.",
        parameters=[RequeueQuery],
        request=None,
        responses={
            200: JobSerializer,
            400: refused("not failed or cancelled, or unknown"),
            409: refused("failed within the lease grace; pass force=true"),
            422: INVALID,
            **REFUSALS,
        },
    )
    def post(self, request, job_id: str):
        query = validated(RequeueQuery, _query(request), location="query")
        return Response(ticket_to_wire(job_requeue(job_id=job_id, force=query["force"])))


class QueueStatsView(QueueView):
    @extend_schema(
        operation_id="get_queue_stats",
        description="Jobs by status and the oldest queued job's age.",
        responses={200: StatsSerializer, **REFUSALS},
    )
    def get(self, request):
        return Response(queue_stats())


class MetricsView(APIView):
    """Prometheus' text format; guarded by the security key like every endpoint but `/health` (and, with
    AGENTOS_AUTHORIZATION, AgentOS' scope `metrics:read`). The series that name users and workers are the
    operator's (`scopes.is_operator`): a JWT caller without `metrics:read` gets them without samples."""

    scope = ("metrics", "read")

    def perform_content_negotiation(self, request, force=False):
        return super().perform_content_negotiation(request, force=True)  # text, whatever Accept says; refusals JSON

    @extend_schema(description="Prometheus' text format.", responses={(200, "text/plain"): OpenApiTypes.STR})
    def get(self, request):
        exposition = metrics.exposition(identities=is_operator(request, "metrics"))
        return HttpResponse(exposition, content_type=CONTENT_TYPE_LATEST)
