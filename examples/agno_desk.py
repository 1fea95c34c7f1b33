"""The module a team already has for Agno's AgentOS, served by agentos unchanged: an Agno agent on Agno's
`OpenAIChat` (any OpenAI-compatible server), with a refund a person confirms and a toolkit's look-up, and a team
around it.

    .venv/bin/pip install -r requirements-agno.txt
    AGENTOS_COMPONENTS=examples.agno_desk:agent_os OPENAI_API_KEY=sk-... make serve

Set OPENAI_BASE_URL for another server (vLLM, Ollama, a gateway) and EXAMPLE_MODEL for its model's id (gpt-4o-mini by
default). Then talk to `agno-support` or `agno-desk` as to any AgentOS agent or team, with the same client code.
"""

import os

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.os import AgentOS
from agno.team import Team
from agno.tools import tool
from agno.tools.toolkit import Toolkit

from agents_registry.sdk import durable

ORDERS = {"A1": {"status": "shipped", "total": 42.0}, "B2": {"status": "processing", "total": 18.5}}


class Orders(Toolkit):
    """The shop's orders, as a toolkit of Agno's."""

    def __init__(self):
        super().__init__(name="orders", tools=[self.look_up_order])

    def look_up_order(self, code: str) -> str:
        """Find an order by its code (e.g. A1)."""
        order = ORDERS.get(code.upper())
        return f"{code.upper()}: {order['status']}, {order['total']:.2f} EUR" if order else f"no order {code}"


@tool(requires_confirmation=True)
def refund(code: str, amount: float) -> str:
    """Refund an order: a person confirms it first."""
    return f"refunded {amount:.2f} EUR on order {code.upper()}"


durable(refund, on_interrupt="fail")  # a refund a lost worker left unfinished is checked by a person, not repeated


def model() -> OpenAIChat:
    return OpenAIChat(
        id=os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini"),
        base_url=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", ""),
    )


support = Agent(
    id="agno-support",
    name="Agno Support",
    description="Answers questions about orders and refunds them.",
    model=model(),
    tools=[Orders(), refund],
    instructions="Look the order up before refunding it. Be brief.",
    add_history_to_context=True,
    num_history_runs=3,
)
desk = Team(id="agno-desk", name="Agno Desk", members=[support], model=model())

agent_os = AgentOS(agents=[support], teams=[desk])
