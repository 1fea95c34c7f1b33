import pytest
from django.test import override_settings

from agentos_project.core.conf import current
from agents_registry.chat_models import StubModel
from agents_registry.components import Agent
from agents_registry.registry import registry
from queueing.models import Ticket
from runs.models import AgentSession, Run, RunEvent
from runs.services.submit import run_submit
from runs.submission import Submission


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


def accept_run(*, session_id: str, message: str = "hi sleep=0", component: str = "stub-agent", **queue) -> str:
    """Accept a background run through the real service (queue settings changed by `queue`); returns its id."""
    submission = Submission(
        component=registry.get("agent", component),
        message=message,
        session_id=session_id,
        user_id=None,
        session_state=None,
        metadata=None,
        stream=False,
        background=True,
    )
    with override_settings(AGENTOS=current().replace("queue", **queue)):
        return str(run_submit(submission=submission).run_id)
