"""Which components a process registers at start-up, from the settings."""

from __future__ import annotations

from .chat_models import OpenAIChat
from .components import Agent
from .registry import registry
from .stubs import bench_components, stub_components


def register_configured_components(conf) -> None:
    """Stub components when AGENTOS_DEMO_AGENTS is on (and the bench's, AGENTOS_BENCH_AGENTS); an `assistant`
    agent when an OpenAI base URL is set."""
    if conf.demo_agents:
        for component in stub_components():
            registry.register(component)
    if conf.bench_agents:
        for component in bench_components():
            registry.register(component)
    if conf.openai_base_url:
        model = OpenAIChat(id=conf.openai_model, base_url=conf.openai_base_url, api_key=conf.openai_api_key)
        registry.register(Agent(id="assistant", name="Assistant", description="OpenAI-compatible model.", model=model))
