"""An agent's `output_schema`: how the model is asked for it (`response_format`) and how its answer is checked.

The schema is a pydantic model or a JSON schema (a dict). An answer that is not JSON of that schema fails the leg
with `OutputInvalid`, retried as the run's attempts allow (a model may answer better the next time).
"""

from __future__ import annotations

import json

import jsonschema
import pydantic


class OutputInvalid(Exception):
    """The model's answer is not what the agent's output schema asks."""


def schema_name(schema) -> str:
    """The schema's name: the pydantic model's, a JSON schema's `title`, else `output`."""
    if isinstance(schema, dict):
        return str(schema.get("title") or "output")
    return schema.__name__


def response_format(schema) -> dict:
    """The Chat Completions `response_format` that asks a model for JSON of `schema`."""
    body = schema if isinstance(schema, dict) else schema.model_json_schema()
    return {"type": "json_schema", "json_schema": {"name": schema_name(schema), "schema": body}}


def checked(schema, text: str) -> str:
    """The model's answer `text` as the JSON of `schema` (normalised), or `OutputInvalid` saying what is wrong."""
    if isinstance(schema, dict):
        try:
            value = json.loads(text)
            jsonschema.validate(value, schema)
        except (ValueError, jsonschema.ValidationError) as error:
            said = f"The model's answer is not the output schema {schema_name(schema)}: {_said(error)}"
            raise OutputInvalid(said) from error
        return json.dumps(value)
    try:
        return schema.model_validate_json(text).model_dump_json()
    except pydantic.ValidationError as error:
        raise OutputInvalid(f"The model's answer is not the output schema {schema_name(schema)}: {error}") from error


def _said(error: Exception) -> str:
    return error.message if isinstance(error, jsonschema.ValidationError) else str(error)
