"""Bring your own agent: the one module a user imports. Define components with these and name the module in
AGENTOS_COMPONENTS (`package.module[:attribute]`, the attribute `components` by default: a list of them or a
callable returning one); every process of agentos imports it at start-up. Agno's own agents, teams and workflows
go in that list as they are, or a module's `agno.os.AgentOS` app whole; `durable` marks an Agno tool for the step
journal. docs/components.md tells the rest.
"""

from .chat_models import ChatModel, OpenAIChat, ToolCall
from .components import Agent, Team, Workflow
from .context import PermanentRunError, RunContext
from .from_agno import durable
from .tools import Tool, tool

__all__ = [
    "Agent",
    "ChatModel",
    "OpenAIChat",
    "PermanentRunError",
    "RunContext",
    "Team",
    "Tool",
    "ToolCall",
    "Workflow",
    "durable",
    "tool",
]
