"""Event names of CONTRACT section 10, per component kind: only names AgentOS emits, which its clients parse."""

from __future__ import annotations

import functools

AGENT = "agent"
TEAM = "team"
WORKFLOW = "workflow"
KINDS = (AGENT, TEAM, WORKFLOW)

_NAMES = {
    AGENT: {
        "started": "RunStarted",
        "content": "RunContent",
        "completed": "RunCompleted",
        "error": "RunError",
        "cancelled": "RunCancelled",
        "paused": "RunPaused",
        "continued": "RunContinued",
        "tool_started": "ToolCallStarted",
        "tool_completed": "ToolCallCompleted",
        "tool_error": "ToolCallError",
        "model_request_started": "ModelRequestStarted",
        "model_request_completed": "ModelRequestCompleted",
        "custom": "CustomEvent",
    },
    TEAM: {
        "started": "TeamRunStarted",
        "content": "TeamRunContent",
        "completed": "TeamRunCompleted",
        "error": "TeamRunError",
        "cancelled": "TeamRunCancelled",
        "paused": "TeamRunPaused",
        "continued": "TeamRunContinued",
        "tool_started": "TeamToolCallStarted",
        "tool_completed": "TeamToolCallCompleted",
        "tool_error": "TeamToolCallError",
        "model_request_started": "TeamModelRequestStarted",
        "model_request_completed": "TeamModelRequestCompleted",
        "custom": "CustomEvent",
    },
    WORKFLOW: {
        "started": "WorkflowStarted",
        "content": "RunContent",
        "completed": "WorkflowCompleted",
        "error": "WorkflowError",
        "cancelled": "WorkflowCancelled",
        "paused": "WorkflowPaused",
        # A step's agent that pauses, and its continuation, as AgentOS tells an executor pause of a step.
        "executor_paused": "StepExecutorPaused",
        "continued": "StepExecutorContinued",
        "tool_started": "ToolCallStarted",
        "tool_completed": "ToolCallCompleted",
        "tool_error": "ToolCallError",
        "model_request_started": "ModelRequestStarted",
        "model_request_completed": "ModelRequestCompleted",
        "step_started": "StepStarted",
        "step_completed": "StepCompleted",
        "custom": "CustomEvent",
    },
}


def event_name(kind: str, role: str) -> str:
    """The wire name of an event `role` ("started", "content", ...) for a component of `kind`."""
    return _NAMES[kind][role]


STREAM_ENDING_ROLES = ("completed", "error", "cancelled", "paused")


@functools.cache
def stream_ending(kind: str) -> frozenset[str]:
    """The names after which a run of `kind` publishes nothing until it is continued: its stream closes there.

    Only the component's own events count: a team member's `RunCompleted` does not end the team's stream. One set
    per kind, shared (every running run's sink and every open stream asks)."""
    return frozenset(event_name(kind, role) for role in STREAM_ENDING_ROLES)
