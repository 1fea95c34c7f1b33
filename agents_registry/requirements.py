"""What a paused run asks of a person, in AgentOS' shapes (CONTRACT 11).

A paused agent lists a `RunRequirement` per pending tool call; a paused team lists the requirements of the member
that paused, naming that member; a paused workflow lists a `StepRequirement` for the step whose agent paused, with
that agent's requirements inside (`executor_requirements`). Each is the dict AgentOS' `to_dict()` gives, so Agno's
client reads them with `from_dict` and its human-in-the-loop helpers (`active_requirements`, `confirm()`) work.
"""

from __future__ import annotations

import datetime
import uuid

# What a pause event tells of the pause, beyond its `tools`: the poll of a paused run shows the same.
PAUSE_FIELDS = ("requirements", "step_requirements", "paused_step_index", "paused_step_name", "pause_kind")


def run_requirements(tools: list[dict], **member: str) -> list[dict]:
    """A `RunRequirement.to_dict()` per pending tool call (`tools`, ToolExecution dicts); `member` names the team
    member that asked (`member_agent_id`, `member_agent_name`)."""
    created_at = datetime.datetime.now(datetime.UTC).isoformat()
    return [{"id": str(uuid.uuid4()), "created_at": created_at, "tool_execution": tool, **member} for tool in tools]


def step_requirement(*, step_id: str, step_name: str, step_index: int, requirements: list[dict]) -> dict:
    """The `StepRequirement.to_dict()` of a step whose agent paused on `requirements` (an executor pause)."""
    return {
        "step_id": step_id,
        "step_name": step_name,
        "step_index": step_index,
        "step_type": "Step",
        "requires_confirmation": False,
        "confirmation_message": None,
        "confirmed": None,
        "on_reject": "cancel",
        "requires_user_input": False,
        "user_input_message": None,
        "user_input": None,
        "requires_route_selection": False,
        "available_choices": None,
        "allow_multiple_selections": False,
        "selected_choices": None,
        "requires_output_review": False,
        "output_review_message": None,
        "is_post_execution": False,
        "rejection_feedback": None,
        "retry_count": 0,
        "max_retries": None,
        "timeout_at": None,
        "on_timeout": "cancel",
        "requires_executor_input": True,
        "executor_requirements": requirements,
        "executor_id": step_id,
        "executor_name": step_name,
        "executor_run_id": None,
        "executor_type": "agent",
        "executor_session_id": None,
    }
