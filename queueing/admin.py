"""The Django admin of the queue (CONTRACT 12): tickets to look at, and the operator's requeue and cancel.

Nothing here writes a ticket: every field is read-only (a form save would write the whole row, unguarded, over
whatever a worker did meanwhile), there is no add and no delete (prune deletes), and the actions call the same
operations as `/queue` and the command line, which make the guarded changes of `queueing.tickets`.
"""

from __future__ import annotations

import re
import uuid

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .exceptions import JobFailedRecently, JobNotRequeueable
from .models import Ticket
from .operations import job_cancel, job_requeue

ERROR_PREVIEW = 80
RUN_ID_PREFIX = re.compile(r"[0-9a-f]{4}[0-9a-f-]{0,32}")  # the first characters of a uuid as it is printed
CANCEL_REPORTS = {
    "cancelled": (messages.SUCCESS, "Cancelled {id}"),
    "requested": (messages.INFO, "Cancel requested for running {id}; its worker stops it at the next checkpoint"),
    "finished": (messages.WARNING, "Not cancelled {id}: it had already finished"),
    "unknown": (messages.ERROR, "Not cancelled {id}: no such run"),
}


class OperatedReadOnlyAdmin(admin.ModelAdmin):
    """An admin that shows rows and never saves, adds or deletes one.

    Its actions change rows through services only; they ask for the `operate` permission, which a user has
    when Django grants them the model's change permission (the form itself stays read-only for everyone).
    """

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return super().has_change_permission(request)


class RunIdSearchMixin:
    """Search by run id as well as by the admin's `search_fields`.

    A run id is a uuid column, which a text search cannot use well: a whole id (any form `uuid.UUID` reads)
    matches its row by primary key, and the first characters of a printed id (4 or more) match ids starting so.
    """

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        results, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip().lower()
        try:
            results |= queryset.filter(pk=uuid.UUID(term))
        except ValueError:
            if RUN_ID_PREFIX.fullmatch(term):
                results |= queryset.filter(pk__startswith=term)
        return results, may_have_duplicates


def report_cancel(modeladmin: admin.ModelAdmin, request: HttpRequest, run_id, outcome: str) -> None:
    """Tell the operator what a cancel did (`cancelled`, `requested`, `finished` or `unknown`), one message a run."""
    level, text = CANCEL_REPORTS[outcome]
    modeladmin.message_user(request, text.format(id=run_id), level)


class SessionFilter(admin.SimpleListFilter):
    """By session: the sessions of the most recent tickets are offered, and `?session=<id>` takes any session
    (a plain field filter would list every session there ever was)."""

    title = "session"
    parameter_name = "session"
    offered = 20

    def lookups(self, request, model_admin):
        recent = Ticket.objects.order_by("-created_at").values_list("session_id", flat=True)[: self.offered * 10]
        sessions = list(dict.fromkeys(recent))[: self.offered]
        if self.value() and self.value() not in sessions:
            sessions.append(self.value())
        return [(session_id, session_id) for session_id in sessions]

    def queryset(self, request, queryset):
        return queryset.filter(session_id=self.value()) if self.value() else queryset


@admin.register(Ticket)
class TicketAdmin(RunIdSearchMixin, OperatedReadOnlyAdmin):
    list_display = (
        "id",
        "session_id",
        "session_seq",
        "component_type",
        "component_id",
        "status",
        "attempt",
        "max_attempts",
        "locked_by",
        "user_id",
        "held",
        "deadline",
        "created_at",
        "completed_at",
        "short_error",
    )
    list_filter = ("status", "component_type", "component_id", SessionFilter, "created_at")
    search_fields = ("session_id",)
    search_help_text = "A run id (whole, or its first characters), or part of a session id."
    ordering = ("-created_at",)
    actions = ("requeue", "requeue_force", "cancel")

    @admin.display(description="deadline", ordering="expires_at")
    def deadline(self, ticket: Ticket):
        """When a queued ticket expires unless started (CONTRACT 17); none once started."""
        return ticket.expires_at

    @admin.display(description="error")
    def short_error(self, ticket: Ticket) -> str:
        error = ticket.error or ""
        return error if len(error) <= ERROR_PREVIEW else f"{error[: ERROR_PREVIEW - 1]}…"

    def _requeue(self, request: HttpRequest, tickets: QuerySet, *, force: bool) -> None:
        for ticket_id in tickets.values_list("pk", flat=True):
            try:
                ticket = job_requeue(job_id=str(ticket_id), force=force)
            except JobFailedRecently as refusal:
                self.message_user(request, f"Not requeued {ticket_id}: {refusal.detail}", messages.WARNING)
            except JobNotRequeueable as refusal:
                self.message_user(request, f"Not requeued {ticket_id}: {refusal.detail}", messages.ERROR)
            else:
                self.message_user(
                    request, f"Requeued {ticket_id} (attempt budget now {ticket.max_attempts})", messages.SUCCESS
                )

    @admin.action(description="Requeue (dead letters)", permissions=["operate"])
    def requeue(self, request: HttpRequest, tickets: QuerySet) -> None:
        """Each failed or cancelled ticket back in line with one more attempt; one failed less than the lease
        grace ago is refused (its worker may be alive), as is any other ticket."""
        self._requeue(request, tickets, force=False)

    @admin.action(description="Requeue, even if it failed within the lease grace (force)", permissions=["operate"])
    def requeue_force(self, request: HttpRequest, tickets: QuerySet) -> None:
        """As `requeue`, also for a ticket failed within the lease grace."""
        self._requeue(request, tickets, force=True)

    @admin.action(description="Cancel", permissions=["operate"])
    def cancel(self, request: HttpRequest, tickets: QuerySet) -> None:
        """Cancel each ticket's run wherever it is (CONTRACT 9)."""
        for ticket_id in tickets.values_list("pk", flat=True):
            report_cancel(self, request, ticket_id, job_cancel(job_id=str(ticket_id)))
