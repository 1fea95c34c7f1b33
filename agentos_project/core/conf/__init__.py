"""The typed settings of agentos, read once from the environment (CONTRACT section 2).

`load(environ)` parses and validates every variable and returns one frozen `AgentOSSettings` with a section per
concern: `services` (where PostgreSQL, Redis and the broker are), `queue` (what `queueing` obeys), `security`,
`agents` (what `agents_registry` registers), `server` (where `serve` listens), `streams` (the live event
streams: keepalive cadence, how long Redis keeps a run's events) and `http` (what a web process takes of a
request). A bad value raises `ConfigError`, whose message is the single line start-up prints. Code reads the
settings in force through `current()`, the object Django's settings hold as `AGENTOS`, so tests swap it with
`override_settings`.

Inside: `sections` (the settings object and its sections), `environment` (reading and checking one variable),
`loading` (every variable, into the sections: `load`, `current`).
"""

from .environment import ConfigError, masked
from .loading import EMBEDDED_DATABASE_URL, EMBEDDED_REDIS_URL, JWT_ALGORITHMS, MAX_TTL_SECONDS, current, load
from .sections import AgentOSSettings, AgentsSettings, HttpLimits, QueueSettings, Security, Server, Services, Streams

__all__ = [
    "EMBEDDED_DATABASE_URL",
    "EMBEDDED_REDIS_URL",
    "JWT_ALGORITHMS",
    "MAX_TTL_SECONDS",
    "AgentOSSettings",
    "AgentsSettings",
    "ConfigError",
    "HttpLimits",
    "QueueSettings",
    "Security",
    "Server",
    "Services",
    "Streams",
    "current",
    "load",
    "masked",
]
