"""A user's agent whose three tools have side effects, each counted as a row of `EFFECTS` (a table the test makes):
reserve a seat, charge a card (both kept in the session state too), send an email. `send_email` writes its row, then
hangs while the file LEDGER_HANG names exists, so a test can kill (or freeze) the worker inside it. The model is the
tests' fake OpenAI server (FAKE_OPENAI_URL)."""

import os
import time

from django.db import connection

from agents_registry.sdk import Agent, OpenAIChat, RunContext, tool

EFFECTS = "test_ledger_effects"
INSTRUCTIONS = "Book the trip."


def effect(name: str, ctx: RunContext) -> None:
    """Count one side effect of tool `name`, committed at once (autocommit), whatever happens to the run."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {EFFECTS} (tool, run_id, attempt) VALUES (%s, %s, %s)", [name, ctx.run_id, ctx.attempt]
        )
    connection.close()


@tool
def reserve_seat(flight: str, ctx: RunContext) -> str:
    """Reserve a seat on a flight."""
    effect("reserve_seat", ctx)
    ctx.session_state["seat"] = f"12A on {flight}"
    return f"seat 12A on {flight}"


@tool
def charge_card(amount: int, ctx: RunContext) -> str:
    """Charge the customer's card."""
    effect("charge_card", ctx)
    ctx.session_state.setdefault("charged", []).append(amount)
    return f"charged {amount} EUR"


def send_email(to: str, ctx: RunContext) -> str:
    """Send the confirmation email."""
    effect("send_email", ctx)
    hang = os.environ.get("LEDGER_HANG")
    while hang and os.path.exists(hang):
        time.sleep(0.1)  # the test kills the worker here
    return f"sent to {to}"


def _agent(email, instructions: str = INSTRUCTIONS) -> list[Agent]:
    model = OpenAIChat("fake-model", base_url=os.environ["FAKE_OPENAI_URL"], api_key="sk-test", max_retries=0)
    tools = [reserve_seat, charge_card, email]
    return [Agent(id="ledger", name="Ledger", model=model, tools=tools, instructions=instructions)]


def components():
    """`send_email` as most tools are: not idempotent, reported as of unknown outcome when interrupted."""
    return _agent(tool(send_email))


def idempotent():
    return _agent(tool(send_email, idempotent=True))


def failing():
    return _agent(tool(send_email, on_interrupt="fail"))


def reworded():
    """The same agent with other instructions: a changed component."""
    return _agent(tool(send_email), instructions="Book the trip, and be quick about it.")


@tool(requires_confirmation=True)
def refund(amount: int, ctx: RunContext) -> str:
    """Refund the customer (a person confirms it first)."""
    effect("refund", ctx)
    return f"refunded {amount} EUR"


def refunds():
    """The ledger agent with one tool, which pauses the run for a confirmation."""
    model = OpenAIChat("fake-model", base_url=os.environ["FAKE_OPENAI_URL"], api_key="sk-test", max_retries=0)
    return [Agent(id="ledger", name="Ledger", model=model, tools=[refund])]
