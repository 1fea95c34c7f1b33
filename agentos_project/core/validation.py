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
    refused input into what may be shown back. An error inside a list (a repeated query parameter, a list in a body)
    or an object names its place in `loc` after the field's name, as FastAPI's do, with that item as `input`."""
    serializer = serializer_class(data=data)
    if serializer.is_valid():
        return serializer.validated_data
    errors = []
    for name, messages in serializer.errors.items():
        raw = data.get(name) if hasattr(data, "get") else None
        for place, message, item in _field_errors(messages, raw):
            kind = "missing" if getattr(message, "code", None) == "required" else getattr(message, "code", "invalid")
            errors.append({"type": kind, "loc": [location, name, *place], "msg": str(message), "input": echo(item)})
    raise RequestInvalid(errors)


def _field_errors(messages, raw, place: tuple = ()):
    """(place, message, input) of each error of one field: DRF nests a list item's errors in a dict by the item's
    index (a list of objects': in a list, one dict per item), an object's by its keys."""
    if isinstance(messages, dict):
        for key, inner in messages.items():
            yield from _field_errors(inner, _item(raw, key), (*place, key))
    elif isinstance(messages, list):
        for index, message in enumerate(messages):
            if isinstance(message, dict):
                yield from _field_errors(message, _item(raw, index), (*place, index))
            else:
                yield from _field_errors(message, raw, place)
    else:
        yield place, messages, raw


def _item(raw, key):
    if isinstance(raw, dict):
        return raw.get(key)
    if isinstance(raw, list | tuple) and isinstance(key, int) and 0 <= key < len(raw):
        return raw[key]
    return None
