"""The settings object (`AgentOSSettings`) and its sections, one per concern; `loading` fills them."""

from __future__ import annotations

import dataclasses


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
