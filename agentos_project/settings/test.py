"""Tests: DATABASE_URL and REDIS_URL when the environment sets them, else an embedded PostgreSQL and Redis of
the test suite's own (data under .run/test/, ports 54339 and 63799), so `make test` needs nothing installed.

They are started here, in the process that runs pytest, and stopped when it exits; the processes the tests
start get the URLs in their environment and start nothing.
"""

import atexit
import os
from pathlib import Path

from agentos_project.embedded import EmbeddedError, EmbeddedPostgres, EmbeddedRedis, FolderLock

EMBEDDED_TEST_SERVICES = {
    "DATABASE_URL": (EmbeddedPostgres, "postgresql://postgres@127.0.0.1:54339/agentos"),
    "REDIS_URL": (EmbeddedRedis, "redis://127.0.0.1:63799/15"),
}


def _start_embedded_services() -> FolderLock | None:
    missing = [name for name in EMBEDDED_TEST_SERVICES if name not in os.environ]
    if not missing:
        return None
    root = Path(__file__).resolve().parents[2] / ".run" / "test"
    try:
        lock = FolderLock(root).acquire()
        for name in missing:
            server_class, url = EMBEDDED_TEST_SERVICES[name]
            server = server_class(root, url)
            os.environ[name] = server.start()
            atexit.register(server.stop)
    except EmbeddedError as error:
        raise SystemExit(f"agentos tests: {error}") from None
    return lock


_held = _start_embedded_services()
os.environ.setdefault("AGENTOS_DEMO_AGENTS", "true")

from .base import *  # noqa: E402, F403
