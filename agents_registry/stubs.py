"""The stub components of CONTRACT section 13, for the demo, the tests and the benchmarks."""

from __future__ import annotations

from .chat_models import StubModel
from .components import Agent, Team, Workflow
from .tools import DELETE_TEMP_FILES


def stub_components() -> list:
    model = StubModel()
    stub = Agent(id="stub-agent", name="Stub Agent", description="Echoes after sleep=N seconds.", model=model)
    other = Agent(id="other-agent", name="Other Agent", description="The same stub model.", model=model)
    hitl = Agent(
        id="hitl-agent",
        name="HITL Agent",
        description="Asks before deleting temporary files.",
        model=model,
        tools=(DELETE_TEMP_FILES,),
    )
    team = Team(
        id="stub-team",
        name="Stub Team",
        description="A stub leader with two stub members; the team answers as its leader does.",
        leader=Agent(id="stub-leader", name="Leader", model=model),
        members=(
            Agent(id="stub-member-1", name="Member 1", model=model, tools=(DELETE_TEMP_FILES,)),
            Agent(id="stub-member-2", name="Member 2", model=model),
        ),
    )
    workflow = Workflow(
        id="stub-workflow",
        name="Stub Workflow",
        description="Two steps, each a stub agent.",
        steps=(
            Agent(id="stub-step-1", name="Step 1", model=model, tools=(DELETE_TEMP_FILES,)),
            Agent(id="stub-step-2", name="Step 2", model=model),
        ),
    )
    return [stub, other, hitl, team, workflow]


def bench_components() -> list:
    """The benchmark's own stubs (AGENTOS_BENCH_AGENTS=true): the stub model with a history window of 20 runs."""
    windowed = Agent(
        id="windowed-agent",
        name="Windowed Agent",
        description="The stub model; sees the messages of the session's last 20 runs only.",
        model=StubModel(),
        num_history_runs=20,
    )
    return [windowed]
