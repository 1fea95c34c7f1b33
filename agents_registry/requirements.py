"""What a paused run asks of a person, in AgentOS' shapes, and the answers a continue brings back (CONTRACT 11).

A paused agent lists a `RunRequirement` per pending tool call; a paused team lists the requirements of the member
that paused, naming that member; a paused workflow lists a `StepRequirement` for the step whose agent paused, with
that agent's requirements inside (`executor_requirements`). Each is the dict AgentOS' `to_dict()` gives, so Agno's
client reads them with `from_dict` and its human-in-the-loop helpers (`active_requirements`, `confirm()`) work.

A continue answers in the shape its client speaks: the tool executions (`tools`, what AgentOS' agents take), the
requirements (`requirements`, teams) or the step requirements (`step_requirements`, workflows). `Answers` reads any
of them into one `confirmed` per tool call.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid

from .events import AGENT, TEAM, WORKFLOW

# The field a continue of each kind answers with in AgentOS (agentos takes any of them on every kind).
ANSWER_FIELD = {AGENT: "tools", TEAM: "requirements", WORKFLOW: "step_requirements"}
# What a pause event tells of the pause, beyond its `tools`: the poll of a paused run shows the same.
PAUSE_FIELDS = ("requirements", "step_requirements", "paused_step_index", "paused_step_name", "pause_kind")


def run_requirements(tools: list[dict]) -> list[dict]:
    """A `RunRequirement.to_dict()` per pending tool call (`tools`, ToolExecution dicts)."""
    created_at = datetime.datetime.now(datetime.UTC).isoformat()
    return [{"id": str(uuid.uuid4()), "created_at": created_at, "tool_execution": tool} for tool in tools]


def of_member(requirements: list[dict], *, member_id: str, member_name: str) -> list[dict]:
    """A team member's `requirements` as its team tells them: the same ones, naming the member that asked."""
    named = {"member_agent_id": member_id, "member_agent_name": member_name}
    return [{**requirement, **named} for requirement in requirements]


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


class AnswerInvalid(ValueError):
    """An answer that names no tool call: `field` is the continue's field it came in."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclasses.dataclass(frozen=True)
class Answers:
    """A continue's answers, as sent: each field None when the client did not send it."""

    tools: list | None = None
    requirements: list | None = None
    step_requirements: list | None = None

    @property
    def sent(self) -> bool:
        return any(answer is not None for answer in (self.tools, self.requirements, self.step_requirements))

    @property
    def field(self) -> str:
        """The field the client answered with (the first sent), for the errors about its answers."""
        sent = [name for name in ANSWER_FIELD.values() if getattr(self, name) is not None]
        return sent[0] if sent else "tools"

    def confirmations(self) -> dict[str, object]:
        """`confirmed` per tool_call_id, as the client set it (not checked here): see `by_call`."""
        return {call: answer["confirmed"] for call, answer in self.by_call().items()}

    def by_call(self) -> dict[str, dict]:
        """Per tool_call_id, what the client answered, from every field sent (not checked here): `confirmed`, the
        `result` of a call it ran itself (external execution), and the `user_input` values it filled in.

        A requirement's answer is its tool execution's, else its own (`confirmation`, `external_execution_result`,
        `user_input_schema`), as AgentOS' `RunRequirement.from_dict` reads it. Raises `AnswerInvalid` for an entry
        that names no tool call, or a `user_input_schema` that is not a list of objects each with a string `name`.
        """
        found: dict[str, dict] = {}
        for tool in self.tools or []:
            found.update(_tool_answer(tool, "tools", "each tool must be an object with its tool_call_id"))
        for requirement in self.requirements or []:
            found.update(_requirement_answer(requirement, "requirements"))
        for step in self.step_requirements or []:
            if not isinstance(step, dict) or not isinstance(step.get("executor_requirements") or [], list):
                raise AnswerInvalid("step_requirements", "each step requirement must be an object")
            for requirement in step.get("executor_requirements") or []:
                found.update(_requirement_answer(requirement, "step_requirements"))
        return found


def _tool_answer(tool, field: str, refusal: str) -> dict[str, dict]:
    if not isinstance(tool, dict) or not isinstance(tool.get("tool_call_id"), str):
        raise AnswerInvalid(field, refusal)
    answer = {"confirmed": tool.get("confirmed"), "result": tool.get("result"), "user_input": _values(tool, field)}
    return {tool["tool_call_id"]: answer}


def _requirement_answer(requirement, field: str) -> dict[str, dict]:
    refusal = "each requirement must be an object with its tool_execution's tool_call_id"
    if not isinstance(requirement, dict):
        raise AnswerInvalid(field, refusal)
    [(call, answer)] = _tool_answer(requirement.get("tool_execution"), field, refusal).items()
    if answer["confirmed"] is None:
        answer["confirmed"] = requirement.get("confirmation")
    if answer["result"] is None:
        answer["result"] = requirement.get("external_execution_result")
    answer["user_input"] = {**_values(requirement, field), **answer["user_input"]}
    return {call: answer}


def _values(holder: dict, field: str) -> dict:
    """The values filled in a `user_input_schema` (fields without one left out); `AnswerInvalid` when it is not a
    list of objects each with a string `name` (a name of another shape cannot name a field)."""
    fields = holder.get("user_input_schema")
    if fields is None:
        return {}
    if not isinstance(fields, list):
        raise AnswerInvalid(field, "user_input_schema must be a list")
    if not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields):
        raise AnswerInvalid(field, "each user_input_schema entry must be an object with a string name")
    return {f["name"]: f["value"] for f in fields if f.get("value") is not None}
