"""Two components of one kind and id, and one that takes a demo stub's id."""

from agents_registry.chat_models import StubModel
from agents_registry.sdk import Agent

components = [Agent(id="twin", name="One", model=StubModel()), Agent(id="twin", name="Two", model=StubModel())]
stub_again = [Agent(id="stub-agent", name="Mine", model=StubModel())]
