"""A second `serve` of the deployment being measured (web + worker + sweeper), started and stopped by the
benchmark, so that one serve and two are measured in the same state of the database (scenario replicas).

It is the same deployment only if the benchmark runs with the server's environment: its DATABASE_URL and
REDIS_URL (required here: without them serve would start embedded ones) and its AGENTOS_* settings.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import requests
from django.conf import settings


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ReplicaServer:
    """`manage.py serve` on a free port of 127.0.0.1, with this process's environment; its output goes to
    .run/bench-replica.log."""

    def __init__(self, *, start_timeout: float = 60, stop_timeout: float = 60):
        missing = [name for name in ("DATABASE_URL", "REDIS_URL") if not os.environ.get(name)]
        if missing:
            raise RuntimeError(f"a replica needs the server's {' and '.join(missing)} in the benchmark's environment")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> ReplicaServer:
        command = [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        log = settings.BASE_DIR / ".run" / "bench-replica.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("ab") as output:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                command, cwd=str(settings.BASE_DIR), start_new_session=True, stdout=output, stderr=output
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if requests.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"the replica on port {self.port} did not start")

    def __exit__(self, *_) -> None:
        """SIGTERM to serve's supervisor (it stops its children as on a deploy), SIGKILL to the group if it hangs."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
