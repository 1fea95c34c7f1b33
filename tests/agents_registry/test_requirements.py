"""A paused run's requirements in AgentOS' shapes (read back by Agno's own classes), and a continue's answers."""

import pytest
from agno.run.requirement import RunRequirement
from agno.workflow.types import StepRequirement

from agents_registry.requirements import AnswerInvalid, Answers, of_member, run_requirements, step_requirement

CALL = {
    "tool_call_id": "call_1",
    "tool_name": "delete_temp_files",
    "tool_args": {"directory": "/tmp"},
    "requires_confirmation": True,
    "confirmed": None,
    "result": None,
}


def test_a_pending_call_is_a_requirement_agnos_client_confirms_and_sends_back():
    [asked] = of_member(run_requirements([CALL]), member_id="m-1", member_name="Member 1")
    requirement = RunRequirement.from_dict(asked)

    assert (requirement.id, requirement.member_agent_id, requirement.member_agent_name) == (
        asked["id"],
        "m-1",
        "Member 1",
    )
    assert (requirement.needs_confirmation, requirement.tool_execution.tool_call_id) == (True, "call_1")
    requirement.confirm()
    assert Answers(requirements=[requirement.to_dict()]).confirmations() == {"call_1": True}


def test_a_paused_step_is_a_step_requirement_agnos_client_resolves_through_its_agents_requirements():
    asked = run_requirements([CALL])
    step = StepRequirement.from_dict(
        step_requirement(step_id="step-1", step_name="Step 1", step_index=0, requirements=asked)
    )

    assert (step.step_name, step.step_index, step.needs_executor_resolution, step.is_resolved) == (
        "Step 1",
        0,
        True,
        False,
    )
    requirement = RunRequirement.from_dict(step.executor_requirements[0])
    requirement.reject()
    step.executor_requirements = [requirement.to_dict()]
    assert step.is_resolved
    assert Answers(step_requirements=[step.to_dict()]).confirmations() == {"call_1": False}


@pytest.mark.parametrize(
    ("requirement", "confirmed"),
    [
        ({"tool_execution": {**CALL, "confirmed": True}}, True),
        ({"confirmation": True, "tool_execution": CALL}, True),  # a bare resolution, as RunRequirement reads it
        ({"confirmation": True, "tool_execution": {**CALL, "confirmed": False}}, False),  # the nested one wins
        ({"tool_execution": CALL}, None),  # unanswered: the continue says which call needs an answer
    ],
)
def test_a_requirements_answer_is_its_tool_executions_else_its_own(requirement, confirmed):
    assert Answers(requirements=[requirement]).confirmations() == {"call_1": confirmed}


def test_answers_of_every_field_sent_count():
    answers = Answers(
        tools=[{"tool_call_id": "call_1", "confirmed": True}],
        requirements=[{"tool_execution": {"tool_call_id": "call_2", "confirmed": False}}],
    )

    assert answers.confirmations() == {"call_1": True, "call_2": False}
    assert (answers.sent, answers.field, Answers().sent, Answers(step_requirements=[]).field) == (
        True,
        "tools",
        False,
        "step_requirements",
    )


@pytest.mark.parametrize(
    ("answers", "field", "message"),
    [
        (Answers(tools=[1]), "tools", "each tool must be an object with its tool_call_id"),
        (Answers(requirements=["x"]), "requirements", "each requirement must be an object with its tool_execution's"),
        (Answers(requirements=[{"id": "r"}]), "requirements", "each requirement must be an object with its"),
        (Answers(step_requirements=[[]]), "step_requirements", "each step requirement must be an object"),
        (
            Answers(step_requirements=[{"executor_requirements": [{"tool_execution": {}}]}]),
            "step_requirements",
            "each requirement must be an object with its tool_execution's tool_call_id",
        ),
    ],
)
def test_an_answer_naming_no_tool_call_is_refused_naming_its_field(answers, field, message):
    with pytest.raises(AnswerInvalid) as refused:
        answers.confirmations()

    assert refused.value.field == field
    assert str(refused.value).startswith(message)


EXTERNAL = {**CALL, "tool_call_id": "call_2", "requires_confirmation": False, "external_execution_required": True}
ASKS = {
    **CALL,
    "tool_call_id": "call_3",
    "requires_confirmation": False,
    "requires_user_input": True,
    "user_input_schema": [{"name": "date", "field_type": "str", "description": None, "value": None}],
    "answered": None,
}


def test_the_other_pauses_are_read_by_agnos_client_and_answered_through_its_helpers():
    external, asks = (RunRequirement.from_dict(r) for r in run_requirements([EXTERNAL, ASKS]))

    assert (external.pause_type, external.needs_external_execution) == ("external_execution", True)
    assert (asks.pause_type, asks.needs_user_input, asks.user_input_schema[0].name) == ("user_input", True, "date")
    external.set_external_execution_result("sent")
    asks.provide_user_input({"date": "2026-12-24"})

    by_requirement = Answers(requirements=[external.to_dict(), asks.to_dict()]).by_call()
    by_tool = Answers(tools=[external.tool_execution.to_dict(), asks.tool_execution.to_dict()]).by_call()
    assert (
        by_requirement
        == by_tool
        == {
            "call_2": {"confirmed": None, "result": "sent", "user_input": {}},
            "call_3": {"confirmed": None, "result": None, "user_input": {"date": "2026-12-24"}},
        }
    )
