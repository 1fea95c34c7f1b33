"""The in-flight scenario: many runs waiting on their model at once in one worker.

N runs on N sessions whose model call waits S seconds, against the same N runs with `sleep=0`, on the same serve
one after the other: efficiency = (T(sleep=0) + S) / T(sleep=S), each T from the first submit to the last
completion the server stored (1.0: waiting on the models cost nothing beyond the wait). Meanwhile a sampler reads
the worker's resident memory, threads and open connections to PostgreSQL every quarter second, and keeps the
highest. The server must run with `AGENTOS_MAX_CONCURRENCY` at least N, or the runs wait for a thread."""

from __future__ import annotations

import dataclasses
import threading

import psutil

from . import cpu
from .harness import Client, Figure, drain

SAMPLE_SECONDS = 0.25


@dataclasses.dataclass
class Peaks:
    """The highest readings of the worker processes (summed over them) while a drain ran."""

    rss_mb: float = 0.0
    threads: int = 0
    database_connections: int = 0


class Sampler(threading.Thread):
    """Samples the worker processes of `serve` until stopped; `peaks` holds the highest readings."""

    def __init__(self, serve: frozenset[int] | None, database_port: int):
        super().__init__(name="inflight-sampler", daemon=True)
        self.workers = [psutil.Process(pid) for pid in serve or () if _is_worker(pid)]
        self.port = database_port
        self.peaks = Peaks()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(SAMPLE_SECONDS):
            rss, threads, connections = 0.0, 0, 0
            for process in self.workers:
                try:
                    with process.oneshot():
                        rss += process.memory_info().rss / 2**20
                        threads += process.num_threads()
                    connections += sum(
                        1 for c in process.net_connections(kind="tcp") if c.raddr and c.raddr.port == self.port
                    )
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
            peaks = self.peaks
            peaks.rss_mb = max(peaks.rss_mb, rss)
            peaks.threads = max(peaks.threads, threads)
            peaks.database_connections = max(peaks.database_connections, connections)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.join()


def _is_worker(pid: int) -> bool:
    try:
        return cpu.kind_of(psutil.Process(pid)) == "worker"
    except psutil.NoSuchProcess:
        return False


@dataclasses.dataclass
class Inflight:
    seconds_idle_model: float  # T(sleep=0)
    seconds: float  # T(sleep=S)
    efficiency: float
    peaks: Peaks
    cpu: dict[str, float]  # CPU ms per run of the sleep=S drain, by process kind


def inflight(client: Client, *, runs: int, sleep: float, clients: int, database_port: int) -> Inflight:
    """The N runs with `sleep=0`, then with `sleep=S`, on N sessions each; the worker sampled during the second."""
    serve = cpu.serve_pids(client.url)
    idle = drain(client, runs=runs, sessions=runs, clients=clients, serve=serve)
    with Sampler(serve, database_port) as sampler:
        waiting = drain(client, runs=runs, sessions=runs, clients=clients, serve=serve, sleep=sleep)
    t0, ts = runs / idle.rate, runs / waiting.rate
    return Inflight(t0, ts, (t0 + sleep) / ts, sampler.peaks, waiting.cpu)


def figures(name: str, measured: list[Inflight]) -> list[Figure]:
    """The scenario's figures over its repeats (its CPU per run aside)."""
    peaks = [m.peaks for m in measured]
    return [
        Figure(f"{name}: T(sleep=0)", "s", [m.seconds_idle_model for m in measured]),
        Figure(f"{name}: T(sleep=S)", "s", [m.seconds for m in measured]),
        Figure(f"{name}: efficiency (T0 + S) / T", "", [m.efficiency for m in measured]),
        Figure(f"{name}: worker RSS, highest", "MB", [p.rss_mb for p in peaks]),
        Figure(f"{name}: worker threads, highest", "", [p.threads for p in peaks]),
        Figure(f"{name}: worker database connections, highest", "", [p.database_connections for p in peaks]),
    ]
