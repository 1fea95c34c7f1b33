"""The typed settings of agentos, read once from the environment (CONTRACT section 2).

`load(environ)` parses and validates every variable and returns one frozen `AgentOSSettings` with a section per
concern: `services` (where PostgreSQL, Redis and the broker are), `queue` (what `queueing` obeys), `security`,
`agents` (what `agents_registry` registers), `server` (where `serve` listens), `streams` (the live event
streams: keepalive cadence, how long Redis keeps a run's events) and `http` (what a web process takes of a
request). A bad value raises `ConfigError`, whose message is the single line start-up prints. Code reads the
settings in force through `current()`, the object Django's settings hold as `AGENTOS`, so tests swap it with
`override_settings`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from django.conf import settings

from .units import seconds_text

EMBEDDED_DATABASE_URL = "postgresql://postgres@127.0.0.1:54329/agentos"
EMBEDDED_REDIS_URL = "redis://127.0.0.1:63790/0"

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


@dataclasses.dataclass(frozen=True)
class Services:
    database_url: str
    redis_url: str
    celery_broker_url: str
    database_pool_size: int | None = 16  # connections a process may have open at once (None: no cap)
    database_prepare: bool = True  # server-side prepared statements (off behind a transaction-mode pooler)


@dataclasses.dataclass(frozen=True)
class QueueSettings:
    durable: bool = True
    per_session: bool = True
    max_concurrency: int | None = 32
    max_queue_depth: int = 1000
    max_attempts: int = 1
    retry_delay_seconds: float = 30.0
    timeout_seconds: float | None = 3600.0
    lock_grace_seconds: float = 60.0
    stop_timeout_seconds: float = 30.0
    retention_seconds: float = 86400.0
    poll_interval: float = 1.0
    sweeper_in_worker: bool = False  # a worker process runs the sweeper on a thread of its own (what serve does)
    # A run's model calls and tool calls are journaled as they complete, and a later attempt replays them
    # (runs.services.journal); a step whose JSON is larger than `step_max_bytes` fails its run instead.
    step_journal: bool = True
    step_max_bytes: int = 1 << 20
    # Fair share (CONTRACT 17, queueing.tickets.fair): at most `max_running_per_user` runs of one user_id run at once
    # (0: no cap), and at most `round_robin_window` of one user's runs wait in the broker at once, the rest held in
    # PostgreSQL and let in one by one as the user's runs start, so users take turns (0: first come, first served).
    max_running_per_user: int = 0
    round_robin_window: int = 8
    # A queued run's deadline when its submit names none (`expires_in`); None: it waits as long as it takes.
    queue_ttl_seconds: float | None = None

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between lease refreshes: a third of the grace, at least one second."""
        return max(1.0, self.lock_grace_seconds / 3)

    @property
    def effective_per_session(self) -> bool:
        """What the queue enforces: per-session order needs the durable queue."""
        return self.durable and self.per_session


@dataclasses.dataclass(frozen=True)
class Security:
    security_key: str | None = None
    admin_token: str | None = None
    # JWT (`core.identity.tokens`): keys tried in order, and/or a JWKS file's keys (by `kid`); on when either is set.
    jwt_verification_keys: tuple[str, ...] = ()
    jwt_jwks_file: str | None = None
    jwt_algorithm: str = "RS256"
    jwt_audience: str | None = None
    jwt_issuer: str | None = None  # a token's `iss` must be it, when set
    jwt_require_exp: bool = True  # a token without `exp` is refused (else it would never expire)
    authorization: bool = False  # scopes enforced per endpoint

    @property
    def jwt(self) -> bool:
        """Whether callers are identified by a JWT."""
        return bool(self.jwt_verification_keys or self.jwt_jwks_file)


@dataclasses.dataclass(frozen=True)
class AgentsSettings:
    demo_agents: bool = True
    bench_agents: bool = False  # also the benchmark's own stubs (windowed-agent), beside CONTRACT 13's
    openai_base_url: str | None = None
    openai_api_key: str | None = None
    openai_model: str = "gpt-4o-mini"
    # A user's components: `package.module[:attribute]` entries, imported in every process (agents_registry.loading)
    components: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Streams:
    keepalive_seconds: float = 15.0
    buffer_seconds: float = 3600.0  # how long Redis keeps a streamed run's events after its last one
    backlog_bytes: int = 1 << 20  # what an open stream holds for a client that does not read, before closing it


@dataclasses.dataclass(frozen=True)
class Server:
    host: str = "127.0.0.1"
    port: int = 7777
    log_format: str = "text"  # or "json": one object per line
    task_events: bool = False  # Celery worker task events (Flower turns them on by itself while it watches)
    worker_nice: int = 10  # serve runs its worker this much below the web's CPU priority (0: the same)
    web_threads: int = 4  # the request threads of a web process (agentos_project.handlers)
    # Set by serve's supervisor in the environment of a child it starts (agentos_project.supervisor): which child
    # this process is, and how many times the supervisor restarted it.
    serve_child: str | None = None
    serve_restarts: int = 0


@dataclasses.dataclass(frozen=True)
class HttpLimits:
    """What a web process takes of a request before Django sees it (agentos_project.headerlimit, .bodylimit,
    .httpserver)."""

    max_header_bytes: int = 64 * 1024  # the request line and header fields together
    max_headers: int = 100
    header_timeout_seconds: float | None = 20.0  # from the connection, or a request's first byte, to its last header
    body_timeout_seconds: float | None = 30.0  # from a request's last header to its body's last byte


@dataclasses.dataclass(frozen=True)
class AgentOSSettings:
    services: Services
    queue: QueueSettings
    security: Security
    agents: AgentsSettings
    server: Server
    streams: Streams = Streams()
    http: HttpLimits = HttpLimits()

    def replace(self, section: str, **changes) -> AgentOSSettings:
        """A copy with some fields of one section changed (tests use it with `override_settings`)."""
        return dataclasses.replace(self, **{section: dataclasses.replace(getattr(self, section), **changes)})


class _Reader:
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


def _services(env: _Reader) -> Services:
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


def _queue(env: _Reader) -> QueueSettings:
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


def _ttl(env: _Reader) -> float | None:
    ttl = env.number("AGENTOS_QUEUE_TTL_SECONDS", None, minimum=0)
    if ttl is not None and ttl > MAX_TTL_SECONDS:
        raise ConfigError(f"AGENTOS_QUEUE_TTL_SECONDS must be <= {seconds_text(MAX_TTL_SECONDS)} (got {ttl:g})")
    return ttl or None  # 0: off


JWT_ALGORITHMS = ("HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "EdDSA")


def _security(env: _Reader) -> Security:
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
    env = _Reader(environ)
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
