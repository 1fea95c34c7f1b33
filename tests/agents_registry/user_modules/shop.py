"""A user's agent on an OpenAI-compatible model (the tests' fake server, whose URL is in FAKE_OPENAI_URL)."""

import os

import pydantic

from agents_registry.sdk import Agent, OpenAIChat, RunContext, tool


@tool
def look_up_order(code: str, ctx: RunContext) -> dict:
    """Find an order by its code."""
    ctx.session_state["looked_up"] = [*ctx.session_state.get("looked_up", []), code]
    return {"code": code, "status": "shipped"}


@tool
def cancel_order(code: str) -> str:
    """Cancel an order that has not shipped."""
    raise RuntimeError(f"order {code} has shipped")


def components():
    model = OpenAIChat("fake-model", base_url=os.environ["FAKE_OPENAI_URL"], api_key="sk-test")
    tools = [look_up_order, cancel_order]
    return [Agent(id="shop", name="Shop", model=model, tools=tools, instructions="Be brief.", num_history_runs=2)]


@tool(external_execution=True)
def send_invoice(code: str, email: str) -> str:
    """Send an order's invoice (the client's own mail system does it)."""
    raise AssertionError("the client runs this tool, never agentos")


@tool(requires_user_input=True, user_input_fields=["date"])
def book_visit(city: str, date: str, ctx: RunContext) -> str:
    """Book a technician's visit.

    Args:
        city: Where.
        date: The day the customer chooses.
    """
    return f"visit booked in {city} on {date} for {ctx.session_id}"


def with_pauses():
    """The shop's agent with the tools that wait for the client."""
    model = OpenAIChat("fake-model", base_url=os.environ["FAKE_OPENAI_URL"], api_key="sk-test")
    tools = [look_up_order, send_invoice, book_visit]
    return [Agent(id="shop", name="Shop", model=model, tools=tools)]


class Verdict(pydantic.BaseModel):
    refundable: bool
    reason: str


def structured():
    """The shop's agent answering with a `Verdict`."""
    model = OpenAIChat("fake-model", base_url=os.environ["FAKE_OPENAI_URL"], api_key="sk-test")
    return [Agent(id="shop", name="Shop", model=model, output_schema=Verdict)]
