"""What the runs API answers, described for `/openapi.json` (the views build these bodies; nothing here runs).

So a schema-driven client or fuzzer sees the real shapes: the 202 body, the run body of CONTRACT 3.2, the
summaries `/config` and the listings carry, and the `{"detail": ...}` of every refusal (`agentos_project.core.openapi`).
"""

from __future__ import annotations

import json

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers

from agentos_project.core.openapi import INVALID, refused

from .models import CancellationStage, RunStatus


class AcceptedSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    session_id = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.choices)


class RunInputSerializer(serializers.Serializer):
    input_content = serializers.CharField()


@extend_schema_field({"type": "array", "items": {"type": "object", "additionalProperties": True}})
class ObjectListField(serializers.JSONField):
    pass


class RunSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    session_id = serializers.CharField()
    agent_id = serializers.CharField(required=False, help_text="for agents")
    team_id = serializers.CharField(required=False, help_text="for teams")
    workflow_id = serializers.CharField(required=False, help_text="for workflows")
    status = serializers.ChoiceField(choices=RunStatus.choices)
    user_id = serializers.CharField(required=False, help_text="who submitted it (a JWT's subject), when known")
    created_at = serializers.IntegerField(help_text="seconds since the epoch")
    input = RunInputSerializer()
    queue_attempt = serializers.IntegerField()
    content = serializers.JSONField(
        required=False,
        help_text="the answer (an object when the agent has an output schema), or the error of an errored run",
    )
    content_type = serializers.CharField(required=False, help_text="the output schema's name, when content is one")
    events = ObjectListField(required=False, help_text="stored events (all but content chunks)")
    metrics = serializers.DictField(required=False)
    tools = ObjectListField(required=False, help_text="pending tool calls of a paused run")
    requirements = ObjectListField(required=False, help_text="what a paused agent or team asks (RunRequirement)")
    step_requirements = ObjectListField(required=False, help_text="what a paused workflow asks (StepRequirement)")
    paused_step_index = serializers.IntegerField(required=False, help_text="the step a paused workflow stopped at")
    paused_step_name = serializers.CharField(required=False)
    pause_kind = serializers.ChoiceField(choices=["executor"], required=False, help_text="a paused workflow's")
    cancellation_stage = serializers.ChoiceField(choices=CancellationStage.values, required=False)
    waiting_on = serializers.UUIDField(
        required=False, help_text="the run this one waits for: ahead of it in its session, or of its user at its cap"
    )
    waiting_reason = serializers.CharField(
        required=False, help_text="why, when it is not its session: its user runs as many runs as the cap allows"
    )
    steps = ObjectListField(
        required=False,
        help_text="the run's step journal: each model call and tool call (leg, kind, tool, status, attempt, replays, "
        "duration), in order",
    )
    steps_replayed = serializers.IntegerField(required=False, help_text="steps a later attempt replayed at least once")
    started_at = serializers.DateTimeField(required=False)
    completed_at = serializers.DateTimeField(required=False)


class ChatModelSerializer(serializers.Serializer):
    id = serializers.CharField()
    provider = serializers.CharField()


class ComponentSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    db_id = serializers.CharField(allow_null=True)
    model = ChatModelSerializer()


class QueueModeSerializer(serializers.Serializer):
    durable = serializers.BooleanField()
    queue_per_session = serializers.BooleanField()


class ConfigSerializer(serializers.Serializer):
    os_id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    databases = serializers.ListField(child=serializers.CharField())
    agents = ComponentSerializer(many=True)
    teams = ComponentSerializer(many=True)
    workflows = ComponentSerializer(many=True)
    interfaces = serializers.ListField(child=serializers.CharField())
    queue = QueueModeSerializer()


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="at most 512 characters; a retried submit with the same key returns the original run (CONTRACT 7)",
)
STREAM_OR_INLINE = (
    "stream=true: the run's events as server-sent events (CONTRACT 10); background=false, stream=false: the run, "
    "executed inline"
)
EVENT_STREAM = {
    "type": "string",
    "format": "event-stream",
    "description": (
        "Server-sent events: frames of `event: <name>` and `data: <JSON>`, the JSON carrying `event`, `run_id`, "
        "`session_id`, `created_at`, `event_index` and the event's own fields. The stream ends after the event "
        "that ends the run or its leg (completed, error, cancelled, paused); an idle stream gets `: keepalive` "
        "comments. A resume opens with a `catch_up`, `replay` or `error` frame."
    ),
}


_SAMPLE = {"run_id": "9b2f6c1e-7d4a-4c2b-9a61-3f1e0c5d8a27", "session_id": "chat-1", "created_at": 1767225600}
_AGENT = {"agent_id": "stub-agent", "agent_name": "Stub Agent"}


def _frame(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _event(event: str, index: int, **fields) -> str:
    """An example event's frame, as a stub agent's run sends it."""
    return _frame(event, {"event": event, "event_index": index, **_SAMPLE, **fields, **_AGENT})


def streamed(description: str, *frames: str) -> OpenApiResponse:
    """A `text/event-stream` answer: `EVENT_STREAM`, with `frames` as its example."""
    example = OpenApiExample(
        "events", value="".join(frames), media_type="text/event-stream", response_only=True, status_codes=[200]
    )
    return OpenApiResponse(EVENT_STREAM, description=description, examples=[example])


def run_or_events(first: str, index: int) -> dict:
    """The 200 of a submit (its stream opens with RunStarted, at 0) or of a continue (RunContinued, after the
    pause's events)."""
    answer = {"content_type": "str"}
    return {
        (200, "application/json"): OpenApiResponse(RunSerializer, description=STREAM_OR_INLINE),
        (200, "text/event-stream"): streamed(
            STREAM_OR_INLINE,
            _event(first, index),
            _event("RunContent", index + 1, content="echo: hi", **answer),
            _event("RunCompleted", index + 2, content="echo: hi", **answer),
        ),
    }


SUBMIT_RESPONSES = {
    202: OpenApiResponse(AcceptedSerializer, description="background=true, stream=false: accepted and committed"),
    **run_or_events("RunStarted", 0),
    400: refused("the component has no store, or the request was malformed"),
    404: refused("unknown component"),
    409: refused("Idempotency-Key conflict, or a session that belongs to another user or component"),
    413: refused("body over 1 MiB"),
    422: INVALID,
    429: refused("Job queue is full"),
    503: refused("the database is unavailable"),
}
POLL_RESPONSES = {200: RunSerializer, 404: refused("Run not found"), 422: INVALID}
CANCEL_RESPONSES = {
    200: OpenApiResponse(OpenApiTypes.OBJECT, description="always {}: the cancellation is recorded"),
    404: refused("unknown component"),
    422: INVALID,
}
CONTINUE_RESPONSES = {
    202: OpenApiResponse(AcceptedSerializer, description="background=true, stream=false: the next leg is queued"),
    **run_or_events("RunContinued", 4),
    400: refused("session_id is required for this action"),
    404: refused("unknown component or run"),
    409: refused("the run is not paused, is cancelled, is settling between legs, or belongs to the queue"),
    422: INVALID,
}
RESUME_RESPONSES = {
    (200, "text/event-stream"): streamed(
        "catch_up/subscribed/replay/error meta frames and the run's events",
        _frame(
            "replay",
            {
                "run_id": _SAMPLE["run_id"],
                "status": "COMPLETED",
                "total_events": 1,
                "message": "Run COMPLETED. Replaying 1 missed events (of 3 total).",
            },
        ),
        _event("RunCompleted", 2, content="echo: hi", content_type="str"),
    ),
    400: refused("session_id is required for this action"),
    404: refused("unknown component"),
    422: INVALID,
}
