"""Things that are not a list of components, or not URL-safe."""

from agents_registry.chat_models import StubModel
from agents_registry.sdk import Agent

components = ["support"]
single = Agent(id="single", name="Single", model=StubModel())
spaced = [Agent(id="my agent", name="Spaced", model=StubModel())]


def failing():
    raise ValueError("the catalogue is offline")
