"""Request validation with AgentOS' refusal: 422 listing each bad field as FastAPI does (CONTRACT 3.1)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.utils.functional import cached_property

from .exceptions import RequestInvalid

_bound = threading.local()


class ReusedFields:
    """A serializer mixin: each thread binds its serializer's fields once and lends them to every later instance.

    DRF deep-copies every declared field for each new serializer, on every accept (docs/benchmarks.md has what it
    costs). Validating reads nothing of a field that one request could change for the next, and a field's
    `parent` is pointed at the instance that borrows it, so what a field reads from its serializer (`partial`,
    `context`) is that instance's. Threads never share them."""

    @cached_property
    def fields(self):
        cache = _bound.__dict__.setdefault("fields", {})
        fields = cache.get(type(self))
        if fields is None:
            fields = cache[type(self)] = super().fields
        for field in fields.values():
            field.parent = self
        return fields


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
