"""Bring your own agent, by example: a support agent with a tool and a refund a person confirms, and a team.

    AGENTOS_COMPONENTS=examples.support_desk OPENAI_API_KEY=sk-... make serve

Any OpenAI-compatible server will do: set OPENAI_BASE_URL (vLLM, Ollama, a gateway) and EXAMPLE_MODEL (the model's
id, gpt-4o-mini by default). Then talk to `support` or `support-desk` as to any AgentOS agent or team.
"""

import os

from agents_registry.sdk import Agent, OpenAIChat, RunContext, Team, tool

ORDERS = {"A1": {"status": "shipped", "total": 42.0}, "B2": {"status": "processing", "total": 18.5}}


@tool
def look_up_order(code: str) -> dict:
    """Find an order by its code.

    Args:
        code: The order's code, as the customer gives it (e.g. A1).
    """
    order = ORDERS.get(code.upper())
    if order is None:
        raise LookupError(f"there is no order {code}")  # the model is told, and can ask the customer again
    return {"code": code.upper(), **order}


@tool(requires_confirmation=True)
def refund(code: str, amount: float, ctx: RunContext) -> str:
    """Refund part or all of an order. A person confirms each refund before it is made.

    Args:
        code: The order's code.
        amount: How much to refund, in euros.
    """
    ctx.session_state["refunds"] = [*ctx.session_state.get("refunds", []), {"code": code, "amount": amount}]
    return f"refunded {amount:.2f} EUR on order {code}"


def components() -> list:
    model = OpenAIChat(os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini"), base_url=os.environ.get("OPENAI_BASE_URL"))
    support = Agent(
        id="support",
        name="Support",
        description="Answers about orders and makes refunds a person confirms.",
        model=model,
        tools=[look_up_order, refund],
        instructions=["You answer customers of a small shop.", "Look an order up before you talk about it."],
        num_history_runs=5,
    )
    triage = Agent(id="triage", name="Triage", model=model, instructions="Say in one line what the customer wants.")
    lead = Agent(id="desk-lead", name="Lead", model=model, instructions="Answer the customer from what you were told.")
    desk = Team(id="support-desk", name="Support desk", leader=lead, members=(triage, support))
    return [support, desk]
