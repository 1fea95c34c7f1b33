"""Sessions, runs and their stored events."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from agents_registry.context import LegStatus
from queueing.models import TicketStatus


class RunStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"


FINISHED = (RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.ERROR)
STREAM_ENDED = (*FINISHED, RunStatus.PAUSED)  # nothing more is published until a continue
# How each status of a run's ticket shows on the run (CONTRACT 7).
RUN_STATUS_OF_TICKET = {
    TicketStatus.QUEUED: RunStatus.PENDING,
    TicketStatus.RUNNING: RunStatus.RUNNING,
    TicketStatus.PAUSED: RunStatus.PAUSED,
    TicketStatus.COMPLETED: RunStatus.COMPLETED,
    TicketStatus.FAILED: RunStatus.ERROR,
    TicketStatus.CANCELLED: RunStatus.CANCELLED,
}

# How each way a leg ends shows on its run (an error is no leg status: ERROR, or PENDING for its retry).
RUN_STATUS_OF_LEG = {
    LegStatus.COMPLETED: RunStatus.COMPLETED,
    LegStatus.PAUSED: RunStatus.PAUSED,
    LegStatus.CANCELLED: RunStatus.CANCELLED,
}


class CancellationStage(models.TextChoices):
    """Where a cancelled run was when the cancel took it (CONTRACT 9)."""

    PENDING = "PENDING"
    EXECUTING = "EXECUTING"
    PAUSED = "PAUSED"

    @classmethod
    def of(cls, status: str | None) -> CancellationStage:
        """The stage of a run cancelled while it had `status`: waiting (PENDING), paused, or else executing."""
        return {RunStatus.PENDING: cls.PENDING, RunStatus.PAUSED: cls.PAUSED}.get(status, cls.EXECUTING)


class AgentSession(models.Model):
    """A conversation: the session state its runs leave for the next one. Its history is its completed runs'
    `run_messages`, in the order they completed (`selectors.session_history`): a run appends a row and never
    rewrites the past."""

    session_id = models.CharField(max_length=255, primary_key=True)
    component_type = models.CharField(max_length=16)
    component_id = models.CharField(max_length=255)
    user_id = models.CharField(max_length=255, null=True, blank=True)
    session_state = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return self.session_id


class Run(models.Model):
    """One submitted run. `attempt` is the queue attempt that last wrote it (the fence for late writers)."""

    run_id = models.UUIDField(primary_key=True)
    # No index of its own: `run_session_created` leads with the session (one index less to write per run).
    session = models.ForeignKey(
        AgentSession, on_delete=models.CASCADE, related_name="runs", db_column="session_id", db_index=False
    )
    component_type = models.CharField(max_length=16)
    component_id = models.CharField(max_length=255)
    user_id = models.CharField(max_length=255, null=True, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.PENDING)
    input_content = models.TextField()
    session_state_input = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(null=True, blank=True)
    background = models.BooleanField(default=True)
    stream = models.BooleanField(default=False)
    queued = models.BooleanField(default=True)
    attempt = models.PositiveIntegerField(default=0)
    content = models.TextField(null=True, blank=True)
    # What `content` holds when it is not text: the JSON of an agent's `output_schema` (its name), shown as an object.
    content_type = models.CharField(max_length=120, null=True, blank=True)
    metrics = models.JSONField(null=True, blank=True)
    tools = models.JSONField(null=True, blank=True)
    run_messages = models.JSONField(default=list, blank=True)
    cancellation_stage = models.CharField(max_length=16, null=True, blank=True)
    next_event_index = models.PositiveIntegerField(default=0)
    # The client's decisions on a paused run's tool calls, for the leg that continues it (cleared when that leg
    # ends), and the decisions of every continue so far, for operators and the poll.
    continued_tools = models.JSONField(null=True, blank=True)
    tool_decisions = models.JSONField(default=list, blank=True)
    # How many of `tool_decisions` were made before the run last started again from its input (an operator's
    # requeue of a run that was not continuing): its current leg is the number of decisions made since.
    decisions_before_restart = models.PositiveIntegerField(default=0, db_default=0)
    # The session state its last leg reached when it paused: the state its continuation starts from.
    paused_state = models.JSONField(null=True, blank=True)
    # Set when the run is first claimed: its history is its session's runs completed until then, on every attempt
    # and leg, so a retry or a requeue asks its model what the first attempt asked (and replays it).
    history_until = models.DateTimeField(null=True, blank=True)
    # When a cancel was asked of the run while it executed; the watcher reads it when Redis cannot tell it.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # The inbox channel of the web process whose client asked for this run's stream when submitting it: its events
    # go there too, so that stream needs no subscription of its own (runs.events.tail).
    stream_inbox = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["session", "created_at"], name="run_session_created"),
            models.Index(
                fields=["session", "completed_at"], condition=models.Q(status="COMPLETED"), name="run_session_history"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.status}"


class RunEvent(models.Model):
    """A stored event (all but content chunks). `event_index` is per run and strictly increasing."""

    # No constraint in the database: an event is only ever written in the transaction that records its run's leg
    # (or its end), and runs are not deleted but through the ORM, which deletes their events first; a key check
    # per stored event would cost PostgreSQL time on every run (docs/benchmarks-history.md).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="events", db_index=False, db_constraint=False
    )  # indexed by run_event_index
    event_index = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField()
    event = models.CharField(max_length=64)
    data = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "event_index"], name="run_event_index")]
        ordering = ["event_index"]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.event_index} {self.event}"


class Step(models.Model):
    """One step of a run's journal (`runs.services.journal`): a model call or a tool call of a leg, at its
    `position` in the order the run loop made them, with what it answered (its leg: `journal.leg_of`). Written as
    each step completes, fenced by the attempt that owns the run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False, db_constraint=False)
    leg = models.PositiveIntegerField()  # the continues before it since the run last started from its input
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=8)  # model | tool
    fingerprint = models.CharField(max_length=32)
    status = models.CharField(max_length=16)  # started | completed | failed | interrupted
    tool = models.CharField(max_length=255, null=True, blank=True)
    call_id = models.CharField(max_length=255, null=True, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    attempt = models.PositiveIntegerField()
    replays = models.PositiveIntegerField(default=0)  # how many later attempts used it instead of calling again
    duration = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "leg", "position"], name="step_position")]
        ordering = ["leg", "position"]

    def __str__(self) -> str:
        return f"{self.run_id} {self.leg}.{self.position} {self.kind} {self.status}"
