"""Agno's objects in a plain list beside agentos's own, and the Agno objects start-up refuses: one with neither an
id nor a name, two with one id, and an object of Agno's that is no agent, team or workflow."""

from agno.agent import Agent as AgnoAgent
from agno.models.openai import OpenAIChat as AgnoOpenAIChat
from agno.tools import tool as agno_tool
from agno.tools.toolkit import Toolkit
from agno.workflow import Step, Workflow

from agents_registry.chat_models import StubModel
from agents_registry.sdk import Agent


def model() -> AgnoOpenAIChat:
    return AgnoOpenAIChat(id="gpt-fake", base_url="http://127.0.0.1:9/v1", api_key="k")


@agno_tool(requires_confirmation=True)
def delete_file(path: str) -> str:
    """Delete one file."""
    return f"deleted {path}"


class Files(Toolkit):
    def __init__(self):
        super().__init__(name="files", tools=[self.list_files])

    def list_files(self, folder: str) -> str:
        """List a folder's files."""
        return f"{folder}: a.txt"


clerk = AgnoAgent(id="clerk", name="Clerk", description="Files things.", model=model(), tools=[delete_file, Files()])
digest = Workflow(id="digest", name="Digest", steps=[Step(name="summarise", agent=clerk)])
components = [Agent(id="native", name="Native", model=StubModel()), clerk, digest]

nameless = [AgnoAgent(model=model())]
twice = [clerk, AgnoAgent(id="clerk", name="Other clerk", model=model())]
not_a_component = [model()]
