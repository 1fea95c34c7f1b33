"""`python manage.py serve`: web (ASGI) + worker + sweeper in the foreground, stopped together.

Without DATABASE_URL / REDIS_URL it first starts the embedded PostgreSQL and Redis (agentos_project.embedded).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from agentos_project.conf import current
from agentos_project.embedded import EmbeddedPostgres, EmbeddedRedis


class Command(BaseCommand):
    help = "Start web + worker + sweeper (embedded PostgreSQL and Redis when none is configured)."

    def add_arguments(self, parser):
        server = current().server
        parser.add_argument("--host", default=server.host)
        parser.add_argument("--port", type=int, default=server.port)
        only = parser.add_mutually_exclusive_group()
        only.add_argument("--web-only", action="store_true", help="serve HTTP only")
        only.add_argument("--worker-only", action="store_true", help="run the worker and the sweeper only")

    def handle(self, *args, host: str, port: int, web_only: bool, worker_only: bool, **options):
        embedded = self._start_embedded()
        try:
            call_command("migrate", interactive=False, verbosity=0)
            children = self._start_children(host, port, web_only=web_only, worker_only=worker_only)
            self.stdout.write(f"agentos serving on http://{host}:{port} ({', '.join(children)}); Ctrl-C stops it")
            code = self._supervise(children)
        finally:
            for server in reversed(embedded):
                server.stop()
        if code:
            raise CommandError(f"a child process exited with {code}; everything was stopped", returncode=code)

    def _start_embedded(self) -> list:
        root = settings.BASE_DIR / ".run"
        servers = []
        if "DATABASE_URL" not in os.environ:
            servers.append(EmbeddedPostgres(root))
        if "REDIS_URL" not in os.environ:
            servers.append(EmbeddedRedis(root))
        for server in servers:
            self.stdout.write(f"starting embedded {type(server).__name__[8:]} at {server.start()}")
        return servers

    def _start_children(self, host: str, port: int, *, web_only: bool, worker_only: bool) -> dict:
        services = current().services
        env = {**os.environ, "DATABASE_URL": services.database_url, "REDIS_URL": services.redis_url}
        python = sys.executable
        commands = {}
        if not worker_only:
            commands["web"] = [
                python, "-m", "uvicorn", "agentos_project.asgi:application",
                "--host", host, "--port", str(port), "--no-access-log", "--timeout-graceful-shutdown", "5",
            ]  # fmt: skip
        if not web_only:
            commands["worker"] = [
                python, "-m", "celery", "-A", "agentos_project", "worker", "-l", "info",
                "--without-gossip", "--without-mingle",
            ]  # fmt: skip
            commands["sweeper"] = [python, str(settings.BASE_DIR / "manage.py"), "sweeper"]
        return {
            name: subprocess.Popen(command, env=env, cwd=settings.BASE_DIR, start_new_session=True)
            for name, command in commands.items()
        }

    def _supervise(self, children: dict) -> int:
        stopping = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda signum, frame: stopping.append(signum))
        code = 0
        while not stopping:
            exited = {name: p.returncode for name, p in children.items() if p.poll() is not None}
            if exited:
                self.stderr.write(f"stopping everything: {exited} exited")
                code = next(iter(exited.values())) or 1
                break
            time.sleep(0.2)
        self._stop(children)
        return code

    def _stop(self, children: dict) -> None:
        window = current().queue.stop_timeout_seconds + 5
        for process in children.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + window
        for process in children.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
