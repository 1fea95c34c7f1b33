"""A user's agent on an OpenAI-compatible model (the tests' fake server, whose URL is in FAKE_OPENAI_URL)."""

import os

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
