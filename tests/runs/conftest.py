import pytest

from agents_registry.chat_models import StubModel
from agents_registry.components import Agent
from agents_registry.registry import registry
from queueing.models import Ticket
from runs.models import AgentSession, Run, RunEvent


def row_counts() -> dict[str, int]:
    return {
        "sessions": AgentSession.objects.count(),
        "runs": Run.objects.count(),
        "tickets": Ticket.objects.count(),
        "events": RunEvent.objects.count(),
    }


@pytest.fixture
def storeless_agent():
    """An agent without a database: background runs of it are refused with 400."""
    agent = registry.register(Agent(id="storeless-agent", name="Storeless", model=StubModel(), has_store=False))
    yield agent
    registry.unregister(agent.kind, agent.id)


def submit(api, *, prefix="/agents/stub-agent", fmt="multipart", **fields):
    body = {"background": "true", "stream": "false", **fields}
    return api.post(f"{prefix}/runs", body, format=fmt)
