"""`python manage.py serve`: web (ASGI) + worker + sweeper in the foreground, supervised, stopped together.

Before starting them it migrates the database and, unless `--worker-only`, collects the static files (the Django
admin's) into STATIC_ROOT, from where the web serves them (`agentos_project.middleware.StaticFilesMiddleware`).

Without DATABASE_URL / REDIS_URL it first starts the embedded PostgreSQL and Redis (agentos_project.embedded),
holding `.run/` so that a second serve of the same checkout refuses instead of sharing or stopping them.
Every refusal to start is one line on stderr and exit status 1.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys

import psycopg2
import redis
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from agentos_project.core.conf import current, masked
from agentos_project.core.exceptions import first_line
from agentos_project.core.postgres.url import database_settings
from agentos_project.core.stopping import WEB_GRACEFUL_SECONDS
from agentos_project.embedded import EmbeddedError, EmbeddedPostgres, EmbeddedRedis, FolderLock
from agentos_project.supervisor import SPEC

# What each child writes once it serves: uvicorn once its socket listens, Celery once it consumes. The supervisor
# restarts for ever a child that got this far, and gives up on one that keeps dying before (a configuration error).
READY_LINES = {"web": "Uvicorn running on", "worker": " ready."}
log = logging.getLogger("agentos.serve")


class Refusal(Exception):
    """Why serve will not start, in one line."""


class Command(BaseCommand):
    help = "Start web + worker + sweeper (embedded PostgreSQL and Redis when none is configured)."
    requires_system_checks = []

    def add_arguments(self, parser):
        server = current().server
        parser.add_argument("--host", default=server.host)
        parser.add_argument("--port", type=int, default=server.port)
        only = parser.add_mutually_exclusive_group()
        only.add_argument("--web-only", action="store_true", help="serve HTTP only")
        only.add_argument("--worker-only", action="store_true", help="run the worker and the sweeper only")

    def handle(self, *args, host: str, port: int, web_only: bool, worker_only: bool, **options):
        embedded = []
        try:
            if not worker_only:
                port_is_free(host, port)
            embedded = self._start_embedded()
            self._check_configured_services()
            call_command("migrate", interactive=False, verbosity=0)
            if not worker_only:
                self.collect_static()
            commands = self._commands(host, port, web_only=web_only, worker_only=worker_only)
            self._say(f"agentos serving on http://{host}:{port} ({', '.join(commands)}); Ctrl-C stops it")
            child_env = self._child_env(embedded)
            spec = {
                "commands": commands,
                "env": {key: value for key, value in child_env.items() if os.environ.get(key) != value},
                "cwd": str(settings.BASE_DIR),
                "stop_timeout": current().queue.stop_timeout_seconds + 5,
                "nice": {"worker": current().server.worker_nice},
                "log_format": current().server.log_format,
                "ready": {name: line for name, line in READY_LINES.items() if name in commands},
                "embedded": [server.stop_spec() for server in embedded],
            }
            self._become_supervisor(spec)
        except (Refusal, EmbeddedError, OSError) as refusal:
            self._say(f"agentos: {refusal}", level=logging.ERROR)
            for server in reversed(embedded):
                server.stop()
            sys.exit(1)
        except BaseException:
            for server in reversed(embedded):
                server.stop()
            raise

    def _say(self, line: str, *, level: int = logging.INFO) -> None:
        """One line of serve's: an error on stderr, the rest on stdout; in the json format, an object of logger
        `agentos.serve` on the console, as the supervisor's lines."""
        if current().server.log_format == "json":
            log.log(level, line)
        else:
            (self.stderr if level >= logging.ERROR else self.stdout).write(line)

    def _become_supervisor(self, spec: dict) -> None:
        """Replace this process (same pid, same `.run/` lock) with the supervisor, which holds no Django. The spec
        carries only what the children's environment adds to this one's. Returns only by raising (OSError)."""
        if getattr(self, "_lock", None) is not None:
            os.set_inheritable(self._lock.file.fileno(), True)
        sys.stdout.flush()
        sys.stderr.flush()
        python = sys.executable
        env = {**os.environ, SPEC: json.dumps(spec)}
        os.execve(python, [python, str(settings.BASE_DIR / "agentos_project" / "supervisor.py")], env)

    def collect_static(self) -> None:
        """The admin's CSS and scripts into STATIC_ROOT, from where the web serves them. A checkout this user may
        not write (the Docker image, collected at build, run as its own user) keeps what it holds: one line says
        so, and the service starts all the same."""
        try:
            call_command("collectstatic", interactive=False, verbosity=0)
        except OSError as error:
            self.stderr.write(
                f"agentos: static files not collected into {settings.STATIC_ROOT} ({error}); serving what is there"
            )

    def _start_embedded(self) -> list:
        root = settings.BASE_DIR / ".run"
        servers = []
        if "DATABASE_URL" not in os.environ:
            servers.append(EmbeddedPostgres(root))
        if "REDIS_URL" not in os.environ:
            servers.append(EmbeddedRedis(root))
        if not servers:
            return []
        self._lock = FolderLock(root).acquire()
        started = []
        try:
            for server in servers:
                url = server.start()
                started.append(server)
                self._say(f"embedded {type(server).__name__[8:]} at {masked(url)}")
                if isinstance(server, EmbeddedPostgres):  # this process migrates it, with its password
                    services = current().services
                    database = database_settings(
                        url, pool_size=services.database_pool_size, prepare=services.database_prepare
                    )
                    settings.DATABASES["default"].update(database)
        except BaseException:
            for server in reversed(started):
                server.stop()
            raise
        return started

    def _check_configured_services(self) -> None:
        """A DATABASE_URL or REDIS_URL that was given must answer now; one line names the one that does not."""
        services = current().services
        if "DATABASE_URL" in os.environ:
            try:
                psycopg2.connect(services.database_url, connect_timeout=3).close()
            except psycopg2.Error as error:
                url = masked(services.database_url)
                raise Refusal(f"cannot reach DATABASE_URL {url}: {first_line(error)}") from None
        if "REDIS_URL" in os.environ:
            try:
                redis.Redis.from_url(services.redis_url, socket_connect_timeout=3, socket_timeout=3).ping()
            except redis.RedisError as error:
                url = masked(services.redis_url)
                raise Refusal(f"cannot reach REDIS_URL {url}: {first_line(error)}") from None

    def _child_env(self, embedded: list) -> dict:
        env = {**os.environ, "AGENTOS_SWEEPER_IN_WORKER": "true"}  # serve has no sweeper process: its worker sweeps
        env["PYTHONUNBUFFERED"] = "1"  # the children write into pipes: a child killed must not take its last lines
        for server in embedded:
            env["DATABASE_URL" if isinstance(server, EmbeddedPostgres) else "REDIS_URL"] = server.url
        return env

    def _commands(self, host: str, port: int, *, web_only: bool, worker_only: bool) -> dict[str, list[str]]:
        python = sys.executable
        commands = {}
        if not worker_only:
            commands["web"] = [
                python, "-m", "uvicorn", "agentos_project.asgi:application",
                "--host", host, "--port", str(port), "--no-access-log",
                "--timeout-graceful-shutdown", f"{WEB_GRACEFUL_SECONDS:g}", "--lifespan", "on",
                "--http", "agentos_project.httpserver:HttpToolsProtocol",
            ]  # fmt: skip
        if not web_only:
            quiet = ["--quiet"] if current().server.log_format == "json" else []  # no banner between the objects
            commands["worker"] = [
                python, "-m", "celery", "-A", "agentos_project", *quiet, "worker", "-l", "info",
                "--without-gossip", "--without-mingle",
            ]  # fmt: skip
            # The sweeper runs as a thread of the worker (AGENTOS_SWEEPER_IN_WORKER, set in `_child_env`).
        return commands


def port_is_free(host: str, port: int) -> None:
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
    except OSError as error:
        reason = (error.strerror or str(error)).lower()
        raise Refusal(f"cannot serve on {host}:{port}: {reason} (is another agentos running?)") from None
    finally:
        probe.close()
