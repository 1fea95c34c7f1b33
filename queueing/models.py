"""Tickets: one row per queued run (id == run_id). State changes live in `queueing.tickets`."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class TicketStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


LIVE = (TicketStatus.QUEUED, TicketStatus.RUNNING, TicketStatus.PAUSED)
TERMINAL = (TicketStatus.COMPLETED, TicketStatus.FAILED, TicketStatus.CANCELLED)
HOLDING = (TicketStatus.RUNNING, TicketStatus.PAUSED)


class Ticket(models.Model):
    """A run's place in the queue.

    `serialized` tickets obey per-session order (CONTRACT 5): of a session's live serialized tickets, the one
    with the smallest `session_seq` is the head (`is_head`), and only the head may run or pause. The flag is
    moved in the transaction that ends the previous head, so a claim never scans the session's backlog.
    """

    id = models.UUIDField(primary_key=True)
    component_type = models.CharField(max_length=16)
    component_id = models.CharField(max_length=255)
    session_id = models.CharField(max_length=255)
    user_id = models.CharField(max_length=255, null=True, blank=True)
    status = models.CharField(max_length=16, choices=TicketStatus.choices, default=TicketStatus.QUEUED)
    attempt = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=1)
    session_seq = models.PositiveIntegerField()
    serialized = models.BooleanField(default=True)
    is_head = models.BooleanField(default=False)
    idempotency_key = models.CharField(max_length=512, null=True, blank=True)
    idempotency_scope = models.CharField(max_length=255, default="", blank=True)
    request_digest = models.CharField(max_length=64, null=True, blank=True)
    available_at = models.DateTimeField(db_default=Now())
    locked_by = models.CharField(max_length=255, null=True, blank=True)
    locked_at = models.DateTimeField(null=True, blank=True)
    # A cancel asked of the attempt running it: that attempt's pause or retryable failure ends it cancelled instead.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Fair share (CONTRACT 17): a claimable ticket kept out of the broker on purpose, because its user has its round
    # robin window of messages out or has reached AGENTOS_MAX_RUNNING_PER_USER; published when its user has room.
    held = models.BooleanField(default=False, db_default=False)
    # The ticket's turn as fair share counts it: running (r), waiting in the broker's line (w), held (h), or none
    # (anonymous, ended, paused, or waiting behind its session's head). Computed by PostgreSQL, so that the fair-share
    # reads name their index alone whatever the statistics say (see `queueing.tickets.fair`).
    turn = models.GeneratedField(
        expression=models.Case(
            models.When(user_id__isnull=True, then=None),
            models.When(status=TicketStatus.RUNNING, then=models.Value("r")),
            models.When(
                Q(status=TicketStatus.QUEUED) & (Q(is_head=True) | Q(serialized=False)),
                then=models.Case(models.When(held=True, then=models.Value("h")), default=models.Value("w")),
            ),
            default=None,
            output_field=models.CharField(max_length=1),
        ),
        output_field=models.CharField(max_length=1, null=True),
        db_persist=True,
    )
    # Its deadline: a ticket still queued at `expires_at` is cancelled instead of started (cleared by the claim: a
    # started run never expires). `ttl_seconds` is what the submit asked for, which a requeue gives it again.
    expires_at = models.DateTimeField(null=True, blank=True)
    ttl_seconds = models.FloatField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session_id"], condition=Q(is_head=True), name="ticket_one_head_per_session"
            ),
            models.UniqueConstraint(
                fields=["session_id"],
                condition=Q(serialized=True, status__in=HOLDING),
                name="ticket_one_holder_per_session",
            ),
            models.UniqueConstraint(
                fields=["idempotency_scope", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="ticket_idempotency_key",
            ),
            models.CheckConstraint(condition=Q(attempt__lte=models.F("max_attempts")), name="ticket_attempt_budget"),
            models.CheckConstraint(condition=Q(is_head=False) | Q(status__in=LIVE), name="ticket_head_is_live"),
        ]
        # Every index is written by every change of a ticket's status: each one here earns its keep. The queued and
        # the running tickets are found through (status, created_at) (the depth gate, the oldest queued age, the
        # sweeper's stale leases: the running are few), so a heartbeat changes no indexed column (a HOT update).
        indexes = [
            models.Index(fields=["session_id", "session_seq"], condition=Q(status__in=LIVE), name="ticket_live_by_seq"),
            models.Index(
                fields=["available_at"],
                condition=Q(status=TicketStatus.QUEUED) & (Q(is_head=True) | Q(serialized=False)),
                name="ticket_claimable",
            ),
            models.Index(fields=["completed_at"], condition=Q(status__in=TERMINAL), name="ticket_terminal"),
            models.Index(fields=["status", "created_at"], name="ticket_status_created"),
            # A user's tickets that run or may run (held or not): what the cap and the round robin count. Anonymous
            # tickets have no turn, so they cost it nothing.
            models.Index(
                fields=["user_id", "turn", "created_at"], condition=Q(turn__isnull=False), name="ticket_user_turn"
            ),
            models.Index(
                fields=["expires_at"],
                condition=Q(status=TicketStatus.QUEUED, expires_at__isnull=False),
                name="ticket_deadline",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.status} attempt {self.attempt}/{self.max_attempts}"
