"""Agno agents whose tools need the client, as Agno's human-in-the-loop docs write them: one confirmed, one executed
by the client (external execution), one asking the user for a value (user input); one whose tool takes 3 s (a run
to cancel meanwhile); a team and a workflow whose member's and step's tool needs confirmation. Each tool run counts
itself in a file the test names (AGNO_RAN_FILE), one line per run, in whichever process runs it. The model is the tests'
fake OpenAI server (FAKE_OPENAI_URL)."""

import os
import time

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.os import AgentOS
from agno.team import Team
from agno.tools import tool
from agno.workflow import Step, Workflow


def model() -> OpenAIChat:
    return OpenAIChat(id="gpt-fake", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k")


def ran(line: str) -> str:
    with open(os.environ.get("AGNO_RAN_FILE", os.devnull), "a") as lines:
        lines.write(line + "\n")
    return line


@tool(requires_confirmation=True)
def delete_file(path: str) -> str:
    """Delete one file."""
    return ran(f"deleted {path}")


@tool(external_execution=True)
def restart_service(name: str) -> str:
    """Restart a service on the user's machine."""
    return ran(f"restarted {name}")  # never here: the client runs it


@tool(requires_user_input=True, user_input_fields=["to_address"])
def send_email(subject: str, to_address: str) -> str:
    """Send an email."""
    return ran(f"sent {subject!r} to {to_address}")


clerk = Agent(id="clerk", name="Clerk", model=model(), tools=[delete_file])
operator = Agent(id="operator", name="Operator", model=model(), tools=[restart_service])
mailer = Agent(id="mailer", name="Mailer", model=model(), tools=[send_email])


@tool
def count_slowly(to: int) -> str:
    """Count, slowly."""
    ran(f"counting to {to}")
    time.sleep(3)
    return ran(f"counted to {to}")


counter = Agent(id="counter", name="Counter", model=model(), tools=[count_slowly])


# A team whose member's tool needs confirmation, and a workflow whose first step's agent's does; the team's leader
# delegates to its member (the fake model answers by the tools each request offers).
files_clerk = Agent(id="files-clerk", name="Files Clerk", model=model(), tools=[delete_file])
office = Team(id="office", name="Office", members=[files_clerk], model=model())
reporter = Agent(id="reporter", name="Reporter", model=model())
tidy = Workflow(
    id="tidy", name="Tidy", steps=[Step(name="clean", agent=files_clerk), Step(name="report", agent=reporter)]
)

agent_os = AgentOS(agents=[clerk, operator, mailer, counter], teams=[office], workflows=[tidy])
