"""A team's AgentOS app module, exactly as Agno's docs show one: Agno's own `Agent` and `Team` on Agno's
`OpenAIChat`, given to `AgentOS(agents=[...], teams=[...])`; one agent's tools are async (a function and a
toolkit's method). The model is the tests' fake OpenAI server
(FAKE_OPENAI_URL). agentos takes the app itself: `AGENTOS_COMPONENTS=tests.agents_registry.user_modules.agno_app:
agent_os`."""

import asyncio
import os

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.os import AgentOS
from agno.team import Team
from agno.tools.toolkit import Toolkit


def model() -> OpenAIChat:
    return OpenAIChat(id="gpt-fake", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k")


helper = Agent(
    name="Agno Helper",
    description="Answers with what the session said before.",
    model=model(),
    instructions="Be brief.",
    add_history_to_context=True,
    num_history_runs=2,
)
writer = Agent(id="writer", name="Writer", model=model())


async def look_up(code: str) -> str:
    """Look up an order."""
    await asyncio.sleep(0.01)
    return f"order {code} shipped"


class Stock(Toolkit):
    def __init__(self):
        super().__init__(name="stock", tools=[self.count])

    async def count(self, item: str) -> str:
        """How many of an item are in stock."""
        return f"{item}: 3 in stock"


shop = Agent(id="agno-shop", name="Agno Shop", model=model(), tools=[look_up, Stock()])
editors = Team(id="editors", name="Editors", members=[writer], model=model())

agent_os = AgentOS(agents=[helper, shop], teams=[editors])
app = agent_os.get_app()
