"""Tools an agent may call: `@tool` on a plain typed function, or a `Tool` written out. A tool marked
`requires_confirmation` pauses the run before it runs.

A call's arguments are validated before the function runs; bad arguments, or an exception of the function, go back
to the model as that call's result (`on_error="report"`, the default) or fail the run (`on_error="fail"`). A result
that is not a string reaches the model as JSON.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Callable

import pydantic
from pydantic_core import to_jsonable_python

from .context import PermanentRunError, RunContext
from .tool_schema import arguments_model, context_parameter, describe, parameters_schema

REJECTED = "The user rejected this tool call; it was not executed."
ON_ERROR = ("report", "fail")
ON_INTERRUPT = ("report", "fail")
# A JSON schema type as AgentOS' `UserInputField` names it (Python's type names)
_FIELD_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list"}


class ToolFailed(Exception):
    """A call that failed in a way the model is told of: bad arguments, or the function raised."""


@dataclasses.dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict
    function: Callable[..., object]
    requires_confirmation: bool = False
    on_error: str = "report"
    # A call that a lost attempt started and never finished (the worker died inside it): an idempotent tool runs
    # again; any other one is reported to the model as of unknown outcome ("report") or fails the run ("fail").
    idempotent: bool = False
    on_interrupt: str = "report"
    # The two other pauses: the client runs the tool and sends its result (`external_execution`), or fills in the
    # `user_input_fields` (all the parameters when none are named), which the model is not asked for.
    external_execution: bool = False
    requires_user_input: bool = False
    user_input_fields: tuple[str, ...] = ()
    # The pydantic model a call's arguments are validated with (`@tool`), and the parameter the run's context is
    # passed as; a `Tool` written out has neither and is called with the arguments as they came.
    arguments: type[pydantic.BaseModel] | None = None
    context_parameter: str | None = None

    def __post_init__(self):
        if self.on_error not in ON_ERROR:
            raise ValueError(f"tool {self.name}: on_error must be one of {ON_ERROR}, not {self.on_error!r}")
        if self.on_interrupt not in ON_INTERRUPT:
            raise ValueError(f"tool {self.name}: on_interrupt must be one of {ON_INTERRUPT}, not {self.on_interrupt!r}")
        if sum((self.requires_confirmation, self.external_execution, self.requires_user_input)) > 1:
            raise ValueError(f"tool {self.name}: pauses for one thing only (confirmation, external execution or input)")
        if self.requires_user_input:
            named = tuple(self.user_input_fields) or tuple(self.parameters.get("properties", {}))
            unknown = [name for name in named if name not in self.parameters.get("properties", {})]
            if unknown:
                raise ValueError(f"tool {self.name}: user_input_fields names no parameter {unknown[0]!r}")
            object.__setattr__(self, "user_input_fields", named)

    @property
    def pauses(self) -> bool:
        """Whether a call waits for the client: to be confirmed, run by the client, or completed with its input."""
        return self.requires_confirmation or self.external_execution or self.requires_user_input

    def __call__(self, *args, **kwargs):
        """The function itself, as written (for a user's unit tests)."""
        return self.function(*args, **kwargs)

    def schema(self) -> dict:
        """The OpenAI `tools` entry for this tool: without the parameters the user fills in."""
        parameters = self.parameters
        if self.requires_user_input:
            asked = set(self.user_input_fields)
            properties = {k: v for k, v in parameters.get("properties", {}).items() if k not in asked}
            required = [name for name in parameters.get("required", []) if name not in asked]
            parameters = {**parameters, "properties": properties, "required": required}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }

    def user_input_schema(self) -> list[dict] | None:
        """The fields the user fills in, as AgentOS' `UserInputField.to_dict()` gives them (no value yet)."""
        if not self.requires_user_input:
            return None
        properties = self.parameters.get("properties", {})
        return [
            {
                "name": name,
                "field_type": _FIELD_TYPES.get(properties[name].get("type"), "str"),
                "description": properties[name].get("description"),
                "value": None,
            }
            for name in self.user_input_fields
        ]

    def call(self, arguments: dict, ctx: RunContext | None = None) -> str:
        """Run the function with `arguments` (validated first) and the run's context; its result as text.

        Raises `ToolFailed` (the model is to be told) or, with `on_error="fail"`, `PermanentRunError` for bad
        arguments and the function's own exception otherwise."""
        try:
            values = self._validated(arguments)
        except ToolFailed as error:
            if self.on_error == "fail":
                raise PermanentRunError(str(error)) from error
            raise
        if self.context_parameter is not None:
            values[self.context_parameter] = ctx
        try:
            result = self.function(**values)
            if inspect.isawaitable(result):  # an async tool, run to its end on this worker thread
                result = asyncio.run(_awaited(result))
        except Exception as error:
            if self.on_error == "fail":
                raise
            raise ToolFailed(str(error) or type(error).__name__) from error
        return result if isinstance(result, str) else json.dumps(to_jsonable_python(result, fallback=str))

    def _validated(self, arguments: dict) -> dict:
        if self.arguments is None:  # a `Tool` written out: the arguments must fit the function's signature
            mismatch = _signature_mismatch(self.function, arguments)
            if mismatch:
                callee = getattr(self.function, "__name__", self.name)
                raise ToolFailed(f"Invalid arguments for tool {self.name}: {callee}() {mismatch}")
            return dict(arguments)
        try:
            model = self.arguments.model_validate(arguments)
        except pydantic.ValidationError as error:
            raise ToolFailed(f"Invalid arguments for tool {self.name}: {error}") from error
        return {field: getattr(model, field) for field in type(model).model_fields}


async def _awaited(awaitable):
    return await awaitable


def _signature_mismatch(function: Callable, arguments: dict) -> str | None:
    """Why calling `function(**arguments)` would fail to bind, in Python's words (an unexpected keyword first, as
    Python checks); None when it binds."""
    signature = inspect.signature(function)
    takes_any = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    unexpected = [name for name in arguments if name not in signature.parameters]
    if unexpected and not takes_any:
        return f"got an unexpected keyword argument {unexpected[0]!r}"
    try:
        signature.bind(**arguments)
    except TypeError as error:
        return str(error)
    return None


def tool(
    function: Callable | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_confirmation: bool = False,
    external_execution: bool = False,
    requires_user_input: bool = False,
    user_input_fields: list[str] | tuple[str, ...] = (),
    on_error: str = "report",
    idempotent: bool = False,
    on_interrupt: str = "report",
):
    """Make a tool of a plain typed function: its name, its docstring for the description and the `Args:` lines
    for its parameters', the parameter schema from its type hints. Usable bare (`@tool`) or with options
    (`@tool(requires_confirmation=True)`, `external_execution`, `requires_user_input` with `user_input_fields`;
    `idempotent` and `on_interrupt` for a call a lost attempt left unfinished). The result stays callable as the
    function."""

    def make(function: Callable) -> Tool:
        summary, described = describe(function)
        tool_name = name or function.__name__
        model = arguments_model(function, tool_name, described)
        return Tool(
            name=tool_name,
            description=description if description is not None else summary,
            parameters=parameters_schema(model),
            function=function,
            requires_confirmation=requires_confirmation,
            external_execution=external_execution,
            requires_user_input=requires_user_input,
            user_input_fields=tuple(user_input_fields),
            on_error=on_error,
            idempotent=idempotent,
            on_interrupt=on_interrupt,
            arguments=model,
            context_parameter=context_parameter(function),
        )

    return make if function is None else make(function)


def as_tool(value) -> Tool:
    """`value` as a tool: a `Tool` as it is, a plain function through `tool`."""
    if isinstance(value, Tool):
        return value
    if callable(value):
        return tool(value)
    raise TypeError(f"{value!r} is not a tool: give a function or a Tool")


@tool(requires_confirmation=True)
def delete_temp_files(directory: str) -> str:
    """Delete the temporary files of a directory.

    Args:
        directory: The directory whose temporary files go.
    """
    return f"deleted temporary files in {directory}"  # the demo's dangerous tool: it deletes nothing


DELETE_TEMP_FILES = delete_temp_files
