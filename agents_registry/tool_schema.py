"""A tool's description and parameter schema from a plain typed function, with pydantic.

The description is the docstring up to its `Args:` section; each `name: text` line of that section describes its
parameter. The schema is the JSON schema of a pydantic model made from the signature (no `title`s), so a call's
arguments are validated by the same model before the function runs. A parameter annotated `RunContext` is left
out: the run loop passes it.
"""

from __future__ import annotations

import inspect
import re
import typing

import pydantic

from .context import RunContext

_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?)\s*:\s*$")


def describe(function) -> tuple[str, dict[str, str]]:
    """The docstring's text before its sections, and its `Args:` lines by parameter name."""
    lines = inspect.cleandoc(function.__doc__ or "").splitlines()
    summary, described, section, current = [], {}, None, None
    for line in lines:
        heading = _SECTION.match(line)
        if heading:
            section, current = heading.group(1), None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            argument = _ARG_LINE.match(line)
            if argument and not line.startswith((" " * 8, "\t\t")):
                current = argument.group(1).lstrip("*")
                described[current] = argument.group(2).strip()
            elif current and line.strip():
                described[current] = f"{described[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), described


def context_parameter(function) -> str | None:
    """The name of the parameter annotated `RunContext`, if any."""
    hints = typing.get_type_hints(function)
    for name, hint in hints.items():
        if hint is RunContext:
            return name
    return None


def arguments_model(function, name: str, described: dict[str, str]) -> type[pydantic.BaseModel]:
    """A pydantic model of the function's parameters (all but its `RunContext` one), to validate a call's
    arguments and to give their JSON schema."""
    hints = typing.get_type_hints(function, include_extras=True)
    fields = {}
    for parameter in inspect.signature(function).parameters.values():
        if (
            parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
            or hints.get(parameter.name) is RunContext
        ):
            continue
        hint = hints.get(parameter.name, typing.Any)
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hint, pydantic.Field(default, description=described.get(parameter.name)))
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return pydantic.create_model(f"{name}_arguments", __config__=config, **fields)


def parameters_schema(model: type[pydantic.BaseModel]) -> dict:
    """The model's JSON schema as a tool's `parameters`: no titles, `required` always present."""
    schema = _without_titles(model.model_json_schema())
    schema.setdefault("required", [])
    return schema


def _without_titles(node):
    if isinstance(node, dict):
        properties = node.get("properties")
        cleaned = {key: _without_titles(value) for key, value in node.items() if key not in ("title", "properties")}
        if isinstance(properties, dict):  # property names are data, kept even when one is called "title"
            cleaned["properties"] = {key: _without_titles(value) for key, value in properties.items()}
        return cleaned
    if isinstance(node, list):
        return [_without_titles(item) for item in node]
    return node
