"""Request validation with AgentOS' refusal: 422 listing each bad field as FastAPI does (CONTRACT 3.1)."""

from __future__ import annotations

from collections.abc import Callable

from .exceptions import RequestInvalid


def validated(serializer_class, data, *, location: str, echo: Callable = lambda raw: raw) -> dict:
    """Validate `data` or raise 422 listing each bad field (`type`, `loc`, `msg`, `input`); `echo` turns the
    refused input into what may be shown back."""
    serializer = serializer_class(data=data)
    if serializer.is_valid():
        return serializer.validated_data
    errors = []
    for name, messages in serializer.errors.items():
        for message in messages if isinstance(messages, list) else [messages]:
            kind = "missing" if getattr(message, "code", None) == "required" else getattr(message, "code", "invalid")
            raw = data.get(name) if hasattr(data, "get") else None
            errors.append({"type": kind, "loc": [location, name], "msg": str(message), "input": echo(raw)})
    raise RequestInvalid(errors)
