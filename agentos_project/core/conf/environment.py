"""Reading one variable of the environment and checking it (`Environment`): a bad value is a `ConfigError`, whose
message names the variable and the rule."""

from __future__ import annotations

import math
from collections.abc import Mapping
from urllib.parse import urlsplit

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def masked(url: str) -> str:
    """`url` with its password replaced by ***, for logs."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()


class ConfigError(ValueError):
    """A setting has a value agentos refuses; the message names the variable and the rule."""


class Environment:
    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ

    def raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is None:
            return None
        value = value.strip()
        return value or None

    def text(self, name: str, default: str | None = None) -> str | None:
        value = self.raw(name)
        return default if value is None else value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise ConfigError(f"{name} must be true or false (got {value!r})")

    def integer(self, name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self.raw(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{name} must be an integer (got {value!r})") from None
        if minimum is not None and number < minimum:
            raise ConfigError(f"{name} must be >= {minimum} (got {value!r})")
        if maximum is not None and number > maximum:
            raise ConfigError(f"{name} must be <= {maximum} (got {value!r})")
        return number

    def number(self, name: str, default: float | None, *, minimum: float, strict: bool = False) -> float | None:
        value = self.raw(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds (got {value!r})") from None
        if not math.isfinite(number) or number < minimum or (strict and number == minimum):
            rule = f"> {minimum:g}" if strict else f">= {minimum:g}"
            raise ConfigError(f"{name} must be {rule} (got {value!r})")
        return number

    def timeout(self, name: str, default: float) -> float | None:
        """A positive number of seconds; unset means `default`, set but empty means no limit."""
        if name in self.environ and self.raw(name) is None:
            return None
        return self.number(name, default, minimum=0, strict=True)

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.text(name, default).lower()
        if value not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)} (got {value!r})")
        return value

    def url(self, name: str, default: str, schemes: tuple[str, ...]) -> str:
        value = self.text(name, default)
        parts = urlsplit(value)
        if parts.scheme not in schemes or not (parts.netloc or parts.path):
            raise ConfigError(f"{name} must be a URL with scheme {' or '.join(schemes)} (got {masked(value)!r})")
        return value
