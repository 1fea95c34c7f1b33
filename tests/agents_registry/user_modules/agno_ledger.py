"""An Agno agent whose two tools have side effects, each counted as a line of a file the test names
(AGNO_RAN_FILE): reserve a seat (kept in the session state too, through Agno's run context), then send an email,
which writes its line and then hangs while the file LEDGER_HANG names exists, so a test can kill the worker inside
it. `send_email` is marked for agentos's journal: a call a lost attempt left unfinished is reported to the model,
not run again. The model is the tests' fake OpenAI server (FAKE_OPENAI_URL)."""

import os
import time

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.run import RunContext

from agents_registry.sdk import durable


def ran(line: str) -> None:
    with open(os.environ.get("AGNO_RAN_FILE", os.devnull), "a") as lines:
        lines.write(line + "\n")


def reserve_seat(run_context: RunContext, flight: str) -> str:
    """Reserve a seat on a flight."""
    ran(f"reserved {flight}")
    run_context.session_state["seat"] = f"12A on {flight}"
    return f"seat 12A on {flight}"


def send_email(to: str) -> str:
    """Email the booking."""
    ran(f"emailed {to}")
    while os.path.exists(os.environ.get("LEDGER_HANG", "")):
        time.sleep(0.05)
    return f"emailed {to}"


durable(send_email, on_interrupt="report")
model = OpenAIChat(id="gpt-fake", base_url=os.environ.get("FAKE_OPENAI_URL", "http://127.0.0.1:9/v1"), api_key="k")
booker = Agent(id="booker", name="Booker", model=model, tools=[reserve_seat, send_email])
components = [booker]
