"""A paused run's requirements in AgentOS' shapes, read back by Agno's own classes."""

from agno.run.requirement import RunRequirement
from agno.workflow.types import StepRequirement

from agents_registry.requirements import run_requirements, step_requirement

CALL = {
    "tool_call_id": "call_1",
    "tool_name": "delete_temp_files",
    "tool_args": {"directory": "/tmp"},
    "requires_confirmation": True,
    "confirmed": None,
    "result": None,
}


def test_a_pending_call_is_a_requirement_agnos_client_confirms_and_sends_back():
    [asked] = run_requirements([CALL], member_agent_id="m-1", member_agent_name="Member 1")
    requirement = RunRequirement.from_dict(asked)

    assert (requirement.id, requirement.member_agent_id, requirement.member_agent_name) == (
        asked["id"],
        "m-1",
        "Member 1",
    )
    assert (requirement.needs_confirmation, requirement.tool_execution.tool_call_id) == (True, "call_1")
    requirement.confirm()
    assert requirement.to_dict()["tool_execution"]["confirmed"] is True


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
