"""Tools an agent may call; a tool marked `requires_confirmation` pauses the run before it runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .context import PermanentRunError

REJECTED = "The user rejected this tool call; it was not executed."


@dataclasses.dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict
    function: Callable[..., str]
    requires_confirmation: bool = False

    def schema(self) -> dict:
        """The OpenAI `tools` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def call(self, arguments: dict) -> str:
        try:
            return str(self.function(**arguments))
        except TypeError as error:
            raise PermanentRunError(f"Invalid arguments for tool {self.name}: {error}") from error


def delete_temp_files(directory: str) -> str:
    """The demo's dangerous tool: it deletes nothing, it reports what it would have done."""
    return f"deleted temporary files in {directory}"


DELETE_TEMP_FILES = Tool(
    name="delete_temp_files",
    description="Delete the temporary files of a directory.",
    parameters={
        "type": "object",
        "properties": {"directory": {"type": "string"}},
        "required": ["directory"],
    },
    function=delete_temp_files,
    requires_confirmation=True,
)
