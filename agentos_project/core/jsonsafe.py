"""Values PostgreSQL (and a JSON response) can hold: no NUL, no unpaired surrogate, no infinite number.

PostgreSQL refuses `\\u0000` in text and jsonb, and an unpaired surrogate cannot be encoded as UTF-8; JSON has no
infinity. A client's input with any of them is refused (`problem`); an agent's output with them is made storable
(`storable`), each offending character replaced by U+FFFD and a non-finite number by null, so a run's result is
never lost to one bad character.
"""

from __future__ import annotations

import json
import math
import re

REPLACEMENT = "\ufffd"
MAX_DEPTH = 200  # as deep as pydantic (AgentOS' validator) lets JSON nest
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why PostgreSQL could not store the string `value`, or None."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain unpaired surrogates"
    return None


def too_deep(value) -> bool:
    """True when the JSON value nests more than MAX_DEPTH levels. Walks it without recursion."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_DEPTH:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        pending.extend((child, depth + 1) for child in children)
    return False


def problem(value) -> str | None:
    """Why the JSON value `value` could not be stored as jsonb, or None."""
    if too_deep(value):
        return f"must not be nested deeper than {MAX_DEPTH} levels"
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            reason = text_problem(item)
        elif isinstance(item, float):
            reason = None if math.isfinite(item) else "must not contain infinite or NaN numbers"
        elif isinstance(item, dict):
            reason = next(filter(None, map(text_problem, item)), None)
            pending.extend(item.values())
        elif isinstance(item, list):
            reason = None
            pending.extend(item)
        else:
            reason = None
        if reason:
            return reason
    return None


def storable_text(value: str) -> str:
    return _UNSTORABLE.sub(REPLACEMENT, value)


def storable(value):
    """`value` (JSON-like: dicts, lists, strings, numbers) with what PostgreSQL refuses replaced."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {storable_text(str(key)): storable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(item) for item in value]
    return value


def json_or_null(value) -> str | None:
    return None if value is None else json.dumps(value)
