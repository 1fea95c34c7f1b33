"""Every agentos variable of the environment, read into the sections of `AgentOSSettings` (`load`), and the
settings in force (`current`)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from django.conf import settings

from ..units import seconds_text
from .environment import ConfigError, Environment
from .sections import AgentOSSettings, AgentsSettings, HttpLimits, QueueSettings, Security, Server, Services, Streams

EMBEDDED_DATABASE_URL = "postgresql://postgres@127.0.0.1:54329/agentos"
EMBEDDED_REDIS_URL = "redis://127.0.0.1:63790/0"


def _services(env: Environment) -> Services:
    redis_url = env.url("REDIS_URL", EMBEDDED_REDIS_URL, ("redis", "rediss", "unix"))
    pool_size = env.integer("AGENTOS_DB_POOL_SIZE", 16, minimum=0)
    return Services(
        database_pool_size=pool_size or None,
        database_prepare=env.boolean("AGENTOS_DB_PREPARE", True),
        database_url=env.url("DATABASE_URL", EMBEDDED_DATABASE_URL, ("postgres", "postgresql")),
        redis_url=redis_url,
        celery_broker_url=env.url(
            "CELERY_BROKER_URL", redis_url, ("redis", "rediss", "unix", "amqp", "amqps", "pyamqp")
        ),
    )


def _queue(env: Environment) -> QueueSettings:
    concurrency_var = (
        "AGENTOS_MAX_CONCURRENCY" if env.raw("AGENTOS_MAX_CONCURRENCY") else "AGNO_BACKGROUND_MAX_CONCURRENCY"
    )
    concurrency = env.integer(concurrency_var, 32)
    grace = env.number("AGENTOS_LOCK_GRACE_SECONDS", 60.0, minimum=3)
    stop_timeout = env.number("AGENTOS_STOP_TIMEOUT_SECONDS", min(30.0, grace - 1), minimum=0)
    if stop_timeout >= grace:
        raise ConfigError(
            f"AGENTOS_STOP_TIMEOUT_SECONDS must be < AGENTOS_LOCK_GRACE_SECONDS ({grace:g}) (got {stop_timeout:g})"
        )
    return QueueSettings(
        durable=env.boolean("AGENTOS_QUEUE_DURABLE", True),
        per_session=env.boolean("AGENTOS_QUEUE_PER_SESSION", True),
        max_concurrency=concurrency if concurrency > 0 else None,
        max_queue_depth=env.integer("AGENTOS_MAX_QUEUE_DEPTH", 1000, minimum=0),
        max_attempts=env.integer("AGENTOS_MAX_ATTEMPTS", 1, minimum=1),
        retry_delay_seconds=env.number("AGENTOS_RETRY_DELAY_SECONDS", 30.0, minimum=0),
        timeout_seconds=env.timeout("AGENTOS_TIMEOUT_SECONDS", 3600.0),
        lock_grace_seconds=grace,
        stop_timeout_seconds=stop_timeout,
        retention_seconds=env.number("AGENTOS_RETENTION_SECONDS", 86400.0, minimum=0),
        poll_interval=env.number("AGENTOS_POLL_INTERVAL", 1.0, minimum=0, strict=True),
        sweeper_in_worker=env.boolean("AGENTOS_SWEEPER_IN_WORKER", False),
        step_journal=env.boolean("AGENTOS_STEP_JOURNAL", True),
        step_max_bytes=env.integer("AGENTOS_STEP_MAX_BYTES", 1 << 20, minimum=1024),
        max_running_per_user=env.integer("AGENTOS_MAX_RUNNING_PER_USER", 0, minimum=0),
        round_robin_window=env.integer("AGENTOS_ROUND_ROBIN_WINDOW", 8, minimum=0),
        queue_ttl_seconds=_ttl(env),
    )


MAX_TTL_SECONDS = 366 * 86400.0  # a year: a queued run's deadline further away than that is a mistake


def _ttl(env: Environment) -> float | None:
    ttl = env.number("AGENTOS_QUEUE_TTL_SECONDS", None, minimum=0)
    if ttl is not None and ttl > MAX_TTL_SECONDS:
        raise ConfigError(f"AGENTOS_QUEUE_TTL_SECONDS must be <= {seconds_text(MAX_TTL_SECONDS)} (got {ttl:g})")
    return ttl or None  # 0: off


JWT_ALGORITHMS = ("HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "EdDSA")


def _security(env: Environment) -> Security:
    security = Security(
        security_key=env.text("AGENTOS_SECURITY_KEY"),
        admin_token=env.text("AGENTOS_ADMIN_TOKEN"),
        jwt_verification_keys=_keys(env.text("AGENTOS_JWT_VERIFICATION_KEYS")),
        jwt_jwks_file=env.text("AGENTOS_JWT_JWKS_FILE"),
        jwt_algorithm=_algorithm(env.text("AGENTOS_JWT_ALGORITHM", "RS256")),
        jwt_audience=env.text("AGENTOS_JWT_AUDIENCE"),
        jwt_issuer=env.text("AGENTOS_JWT_ISSUER"),
        jwt_require_exp=env.boolean("AGENTOS_JWT_REQUIRE_EXP", True),
        authorization=env.boolean("AGENTOS_AUTHORIZATION", False),
    )
    if security.jwt_jwks_file and not os.access(security.jwt_jwks_file, os.R_OK):
        raise ConfigError(f"AGENTOS_JWT_JWKS_FILE names no readable file (got {security.jwt_jwks_file!r})")
    if security.authorization and not security.jwt:
        raise ConfigError(
            "AGENTOS_AUTHORIZATION=true needs AGENTOS_JWT_VERIFICATION_KEYS or AGENTOS_JWT_JWKS_FILE: scopes come "
            "from verified tokens"
        )
    return security


def _algorithm(value: str) -> str:
    if value not in JWT_ALGORITHMS:
        raise ConfigError(f"AGENTOS_JWT_ALGORITHM must be one of {', '.join(JWT_ALGORITHMS)} (got {value!r})")
    return value


def _keys(value: str | None) -> tuple[str, ...]:
    """AGENTOS_JWT_VERIFICATION_KEYS: one key (a PEM public key, or an HMAC secret), or a JSON list of them."""
    if not value or not value.strip():
        return ()
    if not value.lstrip().startswith("["):
        return (value,)
    try:
        keys = json.loads(value)
    except json.JSONDecodeError as error:
        raise ConfigError(f"AGENTOS_JWT_VERIFICATION_KEYS is not a JSON list of keys ({error})") from None
    if not isinstance(keys, list) or not all(isinstance(key, str) and key for key in keys):
        raise ConfigError("AGENTOS_JWT_VERIFICATION_KEYS must be one key, or a JSON list of keys (strings)")
    return tuple(keys)


_ENTRY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?$")


def _components(value: str | None) -> tuple[str, ...]:
    """AGENTOS_COMPONENTS: comma-separated `package.module[:attribute]` entries."""
    entries = tuple(entry.strip() for entry in (value or "").split(",") if entry.strip())
    for entry in entries:
        if not _ENTRY.match(entry):
            raise ConfigError(f"AGENTOS_COMPONENTS entries must be package.module[:attribute] (got {entry!r})")
    return entries


def load(environ: Mapping[str, str], *, demo_agents_default: bool = True) -> AgentOSSettings:
    """Parse and validate every agentos variable of `environ`; raise `ConfigError` on the first bad one."""
    env = Environment(environ)
    return AgentOSSettings(
        services=_services(env),
        queue=_queue(env),
        security=_security(env),
        agents=AgentsSettings(
            demo_agents=env.boolean("AGENTOS_DEMO_AGENTS", demo_agents_default),
            bench_agents=env.boolean("AGENTOS_BENCH_AGENTS", False),
            openai_base_url=env.text("AGENTOS_OPENAI_BASE_URL"),
            openai_api_key=env.text("AGENTOS_OPENAI_API_KEY"),
            openai_model=env.text("AGENTOS_OPENAI_MODEL", "gpt-4o-mini"),
            components=_components(env.text("AGENTOS_COMPONENTS")),
        ),
        server=Server(
            host=env.text("AGENTOS_HOST", "127.0.0.1"),
            port=env.integer("AGENTOS_PORT", 7777, minimum=1),
            log_format=env.choice("AGENTOS_LOG_FORMAT", "text", ("text", "json")),
            task_events=env.boolean("AGENTOS_TASK_EVENTS", False),
            worker_nice=env.integer("AGENTOS_WORKER_NICE", 10, minimum=0, maximum=19),
            web_threads=env.integer("AGENTOS_WEB_THREADS", 4, minimum=1),
            serve_child=env.text("AGENTOS_SERVE_CHILD"),
            serve_restarts=env.integer("AGENTOS_SERVE_RESTARTS", 0, minimum=0),
        ),
        streams=Streams(
            keepalive_seconds=env.number("AGENTOS_STREAM_KEEPALIVE_SECONDS", 15.0, minimum=0, strict=True),
            buffer_seconds=env.number("AGENTOS_STREAM_BUFFER_SECONDS", 3600.0, minimum=1),
            backlog_bytes=env.integer("AGENTOS_STREAM_BACKLOG_BYTES", 1 << 20, minimum=1024),
        ),
        http=HttpLimits(
            max_header_bytes=env.integer("AGENTOS_MAX_HEADER_BYTES", 64 * 1024, minimum=4096),
            max_headers=env.integer("AGENTOS_MAX_HEADERS", 100, minimum=10),
            header_timeout_seconds=env.timeout("AGENTOS_HEADER_TIMEOUT_SECONDS", 20.0),
            body_timeout_seconds=env.timeout("AGENTOS_BODY_TIMEOUT_SECONDS", 30.0),
        ),
    )


def current() -> AgentOSSettings:
    """The settings in force: the object Django's settings hold as `AGENTOS`."""
    return settings.AGENTOS
