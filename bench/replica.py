"""A second `serve` of the deployment being measured (web + worker + sweeper), started and stopped by the
benchmark, so that one serve and two are measured in the same state of the database (scenario replicas).

It is the same deployment only if the benchmark runs with the server's environment: its DATABASE_URL and
REDIS_URL (`missing_environment` says when they are not set: serve would start embedded ones) and its AGENTOS_*
settings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import requests
from django.conf import settings

from agentos_project.core.conf import current

NEEDED = ("DATABASE_URL", "REDIS_URL")


def missing_environment() -> list[str]:
    return [name for name in NEEDED if not os.environ.get(name)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ReplicaServer:
    """`manage.py serve` on a free port of 127.0.0.1 with this process's environment, ready once its web answers
    `/health` and its worker has logged that it is ready; its output goes to .run/bench-replica.log."""

    def __init__(self, *, start_timeout: float = 120):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = settings.BASE_DIR / ".run" / "bench-replica.log"
        self.start_timeout = start_timeout
        self.stop_timeout = current().queue.stop_timeout_seconds + 10  # serve's own, and then some
        self.process: subprocess.Popen | None = None
        self.children: list[psutil.Process] = []

    def __enter__(self) -> ReplicaServer:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        self.log.parent.mkdir(exist_ok=True)
        offset = self.log.stat().st_size if self.log.exists() else 0
        command = [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("ab") as output:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                command, cwd=str(settings.BASE_DIR), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=output, stderr=output,
            )  # fmt: skip
        deadline = time.monotonic() + self.start_timeout
        while not (self._answers() and self._worker_ready(offset)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the replica on port {self.port} did not start; see {self.log}")
            time.sleep(0.2)
        self.children = psutil.Process(self.process.pid).children(recursive=True)

    def _answers(self) -> bool:
        try:
            return requests.get(f"{self.url}/health", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def _worker_ready(self, offset: int) -> bool:
        with self.log.open("rb") as log:
            log.seek(offset)
            return b" ready." in log.read()  # Celery's "celery@<host> ready."

    def __exit__(self, *_) -> None:
        """SIGTERM to serve's supervisor, which stops its children as on a deploy; then SIGKILL to whatever of it
        outlived that (the supervisor starts each child in a process group of its own)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for child in self.children:
            if child.is_running():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
