"""Django's DATABASES entry for a PostgreSQL URL: this package's engine, its pool size and prepared statements."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit


def database_settings(url: str, *, pool_size: int | None = None, prepare: bool = True) -> dict:
    """Django's DATABASES entry for a postgres:// URL (host may also come from ?host=/socket/dir), with at most
    `pool_size` connections open per process (`agentos_project.core.postgres`)."""
    parts = urlsplit(url)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    query.setdefault("connect_timeout", "5")  # an unreachable host must not hold a settle or a request for minutes
    return {
        "ENGINE": "agentos_project.core.postgres",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or "postgres"),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": query.pop("host", parts.hostname or ""),
        "PORT": str(parts.port or ""),
        "OPTIONS": query,
        # ASGI serves each request on a thread of its own: persistent connections would leak there.
        # Celery workers raise this at start-up (queueing.worker_signals), where threads are reused.
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": True,
        "POOL_SIZE": pool_size,
        "POOL_TIMEOUT": 10.0,
        "PREPARE": prepare,  # agentos_project.core.postgres.prepared
    }
