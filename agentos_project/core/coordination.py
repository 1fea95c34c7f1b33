"""Redis as agentos uses it for coordination: one client per URL per process, and names scoped to a deployment.

Redis pub/sub ignores the database number (a publish on db 12 reaches a subscriber on db 0), so every channel,
and for symmetry every key, carries a prefix derived from the PostgreSQL database the process uses (host, port,
name, as Django connects to it): two agentos installations sharing one Redis never hear each other's events
or cancellations.
"""

from __future__ import annotations

import functools
import hashlib

import redis
from django.db import connections

from .conf import current


@functools.cache
def redis_client(url: str) -> redis.Redis:
    """One client per Redis URL per process, with short timeouts (a down Redis must answer quickly)."""
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)


def redis_connection() -> redis.Redis:
    """The client for REDIS_URL: live events and cancellation intents."""
    return redis_client(current().services.redis_url)


@functools.cache
def _prefix(host: str, port: str, name: str) -> str:
    return "agentos:" + hashlib.sha256(f"{host}:{port}/{name}".encode()).hexdigest()[:12]


def deployment_key(name: str) -> str:
    """`name` under this deployment's prefix, e.g. `agentos:3f2a…:run:<id>`."""
    database = connections["default"].settings_dict
    return f"{_prefix(database['HOST'], str(database['PORT']), database['NAME'])}:{name}"
