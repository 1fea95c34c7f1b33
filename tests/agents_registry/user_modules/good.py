"""A user's module as docs/components.md shows it: an agent with instructions and two tools, one confirmed."""

from agents_registry.chat_models import StubModel
from agents_registry.sdk import Agent, RunContext, tool


@tool
def look_up_order(code: str, ctx: RunContext) -> dict:
    """Find an order by its code.

    Args:
        code: The order's code, as the customer gives it.
    """
    return {"code": code, "status": "shipped", "asked_by": ctx.user_id}


@tool(requires_confirmation=True)
def refund(code: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {code}"


support = Agent(
    id="support",
    name="Support",
    model=StubModel(default_sleep=0),
    tools=[look_up_order, refund],
    instructions="Answer in one sentence.",
    num_history_runs=2,
)
components = [support]


def build():
    """The same components from a callable (`…good:build`)."""
    return [support]
