"""The Django admin of sessions and runs (CONTRACT 12): read-only, runs with their step journal and stored events.

Every field of a session, a run and an event is an invariant some process relies on (statuses and attempts
fence late writers, event indexes order the stream, tickets name runs by id), so nothing is editable, added or
deleted here. The one change is the operator's cancel, made by the same service as a client's.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from queueing.admin import OperatedReadOnlyAdmin, RunIdSearchMixin, report_cancel
from queueing.models import TicketStatus
from queueing.selectors import ticket_get

from .models import AgentSession, Run, RunEvent, Step
from .services.cancel import run_cancel_by_id


@admin.register(AgentSession)
class AgentSessionAdmin(OperatedReadOnlyAdmin):
    list_display = ("session_id", "component_type", "component_id", "user_id", "created_at", "updated_at")
    list_filter = ("component_type", "component_id")
    search_fields = ("session_id", "user_id")
    ordering = ("-updated_at",)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class StepInline(ReadOnlyInline):
    """The run's step journal: each model call and tool call of each leg, the attempt that made it, and how many
    later attempts replayed it instead of calling again."""

    model = Step
    fields = ("leg", "position", "kind", "tool", "call_id", "status", "attempt", "replays", "duration", "output")
    readonly_fields = fields
    ordering = ("leg", "position")
    verbose_name_plural = "journal steps"


class RunEventInline(ReadOnlyInline):
    """The run's stored events in index order, as the poll returns them."""

    model = RunEvent
    fields = ("event_index", "attempt", "event", "data", "created_at")
    readonly_fields = fields
    ordering = ("event_index",)


@admin.register(Run)
class RunAdmin(RunIdSearchMixin, OperatedReadOnlyAdmin):
    list_display = (
        "run_id",
        "session_id",
        "component_type",
        "component_id",
        "status",
        "attempt",
        "created_at",
        "started_at",
        "completed_at",
    )
    list_filter = ("status", "component_type", "component_id", "created_at")
    search_fields = ("session__session_id",)
    search_help_text = "A run id (whole, or its first characters), or part of a session id."
    ordering = ("-created_at",)
    inlines = (StepInline, RunEventInline)
    actions = ("cancel",)
    readonly_fields = ("queue_deadline",)

    @admin.display(description="queue deadline")
    def queue_deadline(self, run: Run):
        """When the run expires unless started (CONTRACT 17): its ticket's deadline, while it is queued."""
        ticket = ticket_get(ticket_id=str(run.pk))
        queued = ticket is not None and ticket.status == TicketStatus.QUEUED
        return ticket.expires_at if queued and ticket.expires_at else "-"

    @admin.action(description="Cancel", permissions=["operate"])
    def cancel(self, request: HttpRequest, runs: QuerySet) -> None:
        """Cancel each run wherever it is (CONTRACT 9), queued or not."""
        for run_id in runs.values_list("pk", flat=True):
            report_cancel(self, request, run_id, run_cancel_by_id(run_id=run_id))
