"""Benchmarks against a running agentos (`make serve`), from the outside, as a client sees it.

Every figure is a median over `repeats` with min and max, so one noisy run does not decide it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import requests
from prometheus_client.parser import text_string_to_metric_families

from . import cpu

AGENT = "stub-agent"
FINISHED = ("COMPLETED", "ERROR", "CANCELLED")
CPU_KINDS = ("web", "worker", "sweeper", "postgres", "redis", "client")


@dataclasses.dataclass
class Figure:
    name: str
    unit: str
    samples: list[float]

    def line(self) -> str:
        median = statistics.median(self.samples)
        return (
            f"{self.name:<40} {median:>10.2f} {self.unit:<6} (min {min(self.samples):.2f}, max {max(self.samples):.2f})"
        )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class Client:
    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.local = threading.local()

    @property
    def http(self) -> requests.Session:
        if not hasattr(self.local, "session"):
            self.local.session = requests.Session()
        return self.local.session

    def submit(
        self, session_id: str, message: str, agent: str = AGENT, user_id: str | None = None
    ) -> tuple[str, float, float]:
        """Submit a background run (of `user_id`, if given); returns (run_id, seconds the 202 took, wall-clock time
        it was sent)."""
        sent = time.time()
        started = time.perf_counter()
        data = {"message": message, "session_id": session_id, "background": "true", "stream": "false"}
        if user_id is not None:
            data["user_id"] = user_id
        response = self.http.post(f"{self.url}/agents/{agent}/runs", data=data, timeout=30)
        elapsed = time.perf_counter() - started
        if response.status_code != 202:
            raise RuntimeError(f"submit answered {response.status_code}: {response.text[:200]}")
        return response.json()["run_id"], elapsed, sent

    def submit_streamed(self, session_id: str, message: str, agent: str = AGENT) -> tuple[str, float, float]:
        """Submit a background run with `stream=true` and read its stream to the end; returns (run_id, seconds to
        the first byte, wall-clock time it was sent)."""
        sent = time.time()
        started = time.perf_counter()
        data = {"message": message, "session_id": session_id, "background": "true", "stream": "true"}
        with self.http.post(f"{self.url}/agents/{agent}/runs", data=data, stream=True, timeout=60) as response:
            if response.status_code != 200:
                raise RuntimeError(f"streamed submit answered {response.status_code}: {response.text[:200]}")
            chunks = response.iter_content(chunk_size=None)
            first = next(chunks, b"")
            elapsed = time.perf_counter() - started
            body = first + b"".join(chunks)
        data = next(line for line in body.splitlines() if line.startswith(b"data: "))
        return json.loads(data[6:])["run_id"], elapsed, sent

    def busy(self) -> int | None:
        """How many tickets the server's queue holds queued or running (None when /queue/stats is not open to us)."""
        response = self.http.get(f"{self.url}/queue/stats", timeout=30)
        if response.status_code != 200:
            return None
        counts = response.json()["counts"]  # the statuses present only
        return counts.get("queued", 0) + counts.get("running", 0)

    def histogram(self, name: str) -> tuple[float, float] | None:
        """(sum, count) of the server's histogram `agentos_<name>` from `/metrics`; None when that is not open."""
        response = self.http.get(f"{self.url}/metrics", timeout=30)
        if response.status_code != 200:
            return None
        values = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                values[sample.name] = sample.value
        return values.get(f"agentos_{name}_sum", 0.0), values.get(f"agentos_{name}_count", 0.0)

    def poll(self, run_id: str, session_id: str, agent: str = AGENT) -> dict:
        response = self.http.get(
            f"{self.url}/agents/{agent}/runs/{run_id}", params={"session_id": session_id}, timeout=30
        )
        response.raise_for_status()
        return response.json()


def submit_all(
    client: Client,
    plan: list[tuple[str, str]],
    clients: int,
    *,
    stream: bool = False,
    replicas: tuple = (),
    agent: str = AGENT,
    users: Callable[[str], str | None] | None = None,
    rate: float | None = None,
) -> list[tuple[str, str, float, float]]:
    """Submit (session, message) pairs to `agent` from `clients` threads, each session's runs in order on one
    thread (with `stream`, each run's stream read to its end before the session's next run is sent). With
    `replicas` (more Clients of the same deployment), the sessions are spread over `client` and them in turn.
    `users`: the user_id of each session's runs (none by default). `rate`: the sessions start at that many a
    second, evenly (else each as soon as a thread is free)."""
    by_session: dict[str, list[str]] = {}
    for session_id, message in plan:
        by_session.setdefault(session_id, []).append(message)
    servers = (client, *replicas)
    place = {session_id: servers[n % len(servers)] for n, session_id in enumerate(by_session)}
    begin = time.monotonic()
    start = {session_id: begin + n / rate for n, session_id in enumerate(by_session)} if rate else {}

    def one_session(item):
        session_id, messages = item
        server = place[session_id]
        if rate:
            time.sleep(max(0.0, start[session_id] - time.monotonic()))
        if stream:
            return [(session_id, *server.submit_streamed(session_id, message, agent)) for message in messages]
        user_id = users(session_id) if users else None
        return [(session_id, *server.submit(session_id, message, agent, user_id)) for message in messages]

    with ThreadPoolExecutor(clients) as pool:
        return [row for rows in pool.map(one_session, by_session.items()) for row in rows]


def wait_idle(client: Client, timeout: float, *, before: int | None = 0) -> None:
    """Wait until the server's queue holds no more queued or running tickets than `before` (what it held before the
    scenario: a blocked backlog stays), asking `/queue/stats` once every 0.5 s, so the waiting costs the server
    being measured next to nothing (the rates use the server's own completion times, not when this noticed); at
    once when that is not open to us."""
    deadline = time.monotonic() + timeout
    while (busy := client.busy()) is not None and before is not None and busy > before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the queue did not settle within {timeout}s")
        time.sleep(0.5)


def wait_finished(client: Client, runs: list[tuple[str, str]], timeout: float, agent: str = AGENT) -> list[dict]:
    """Wait until every run is terminal; returns their poll bodies.

    Runs of a session finish in order, so only each session's last run is polled until it ends (a light load
    on the server being measured); then every run is read once.
    """
    last_of_session = {session_id: run_id for run_id, session_id in runs}
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(4) as pool:
        pending = {run_id: session_id for session_id, run_id in last_of_session.items()}
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(pending)} sessions did not finish within {timeout}s")
            for body in pool.map(lambda item: client.poll(*item, agent=agent), list(pending.items())):
                if body["status"] in FINISHED:
                    pending.pop(body["run_id"])
            if pending:
                time.sleep(0.5)
        bodies = list(pool.map(lambda item: client.poll(*item, agent=agent), runs))
    unfinished = [body for body in bodies if body["status"] not in FINISHED]
    if unfinished:
        return wait_finished(client, [(b["run_id"], b["session_id"]) for b in unfinished], timeout, agent) + [
            body for body in bodies if body["status"] in FINISHED
        ]
    return bodies


def _epoch(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


@dataclasses.dataclass
class Accepts:
    """A burst of submits: the 202's latency (ms) at p50 and p99, accepts per second, and CPU ms per accept by
    process kind (over the submits only: the worker's share is whatever it executed meanwhile)."""

    p50: float
    p99: float
    rate: float
    cpu: dict[str, float]


def accept_burst(client: Client, *, clients: int = 16, total: int = 800, wait: bool = True) -> Accepts:
    """`clients` threads submitting `total` `sleep=0` runs on distinct sessions; then (with `wait`) waits for them."""
    tag = uuid.uuid4().hex[:6]
    plan = [(f"acc-{tag}-{i}", "bench sleep=0") for i in range(total)]
    before = client.busy() if wait else None
    meter = cpu.Meter().start()
    started = time.perf_counter()
    rows = submit_all(client, plan, clients)
    elapsed = time.perf_counter() - started
    spent = meter.stop()
    latencies = [seconds * 1000 for _, _, seconds, _ in rows]
    if wait:
        wait_idle(client, timeout=600, before=before)
        wait_finished(client, [(run_id, session) for session, run_id, _, _ in rows], timeout=600)
    return Accepts(
        percentile(latencies, 0.50), percentile(latencies, 0.99), total / elapsed, cpu.per_run_ms(spent, total)
    )


@dataclasses.dataclass
class Drain:
    """Runs per second from the first submit to the last completion, and CPU ms per run by process kind; and its
    submits as an accept burst with runs executing meanwhile: accepts per second (first submit to last 202) and
    the 202's latency at p50 and p99 (ms); and the (run_id, session_id) of its runs, session by session."""

    rate: float
    cpu: dict[str, float]
    accepts: float = 0.0
    accept_p50: float = 0.0
    accept_p99: float = 0.0
    runs: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def drain(
    client: Client,
    *,
    runs: int,
    sessions: int,
    clients: int = 16,
    stream: bool = False,
    replicas: tuple = (),
    agent: str = AGENT,
    serve: frozenset[int] | None = None,
    users: int = 0,
    sleep: float = 0.0,
    rate: float | None = None,
) -> Drain:
    """Runs of `agent` per second from the first submit to the last completion (completion times as the server
    stored them). With `stream`, every run is submitted with `stream=true` and its stream read to the end; with
    `replicas`, the sessions are spread over them and `client`. With `serve` (`cpu.serve_pids`), the CPU figures
    count no other serve's processes. With `users`, the sessions belong to that many users in turn (else to
    none). `sleep`: the seconds each run's model call waits. `rate`: the sessions start at that many a second
    (`submit_all`), so the drain measures a load, not the most the server does."""
    tag = uuid.uuid4().hex[:6]
    plan = [(f"drain-{tag}-{i % sessions}", f"run {i} sleep={sleep:g}") for i in range(runs)]
    owner = (lambda session_id: f"user-{int(session_id.rsplit('-', 1)[1]) % users}") if users else None
    before = client.busy()
    meter = cpu.Meter(serve=serve).start()
    rows = submit_all(client, plan, clients, stream=stream, replicas=replicas, agent=agent, users=owner, rate=rate)
    wait_idle(client, timeout=900, before=before)
    spent = meter.stop()
    first_sent = min(sent for _, _, _, sent in rows)
    sent_runs = [(run_id, session) for session, run_id, _, _ in rows]
    bodies = wait_finished(client, sent_runs, timeout=900, agent=agent)
    failed = [body for body in bodies if body["status"] != "COMPLETED"]
    if failed:
        raise RuntimeError(f"{len(failed)} runs did not complete, e.g. {failed[0]}")
    last_done = max(_epoch(body["completed_at"]) for body in bodies)
    last_accepted = max(sent + elapsed for _, _, elapsed, sent in rows)
    latencies = [elapsed * 1000 for _, _, elapsed, _ in rows]
    return Drain(
        runs / (last_done - first_sent),
        cpu.per_run_ms(spent, runs),
        accepts=runs / (last_accepted - first_sent),
        accept_p50=percentile(latencies, 0.50),
        accept_p99=percentile(latencies, 0.99),
        runs=sent_runs,
    )


def handoff(client: Client, *, sessions: int = 20, runs_per_session: int = 10, sleep: float = 0.5) -> list[float]:
    """Milliseconds from the end of run k to the start of run k+1 of the same session (server times), counted
    only where run k+1 had been accepted before run k ended, so the gap is the hand-off and not the client.

    A hand-off claims run k+1 in the very statement that records run k's end, so the two stored times are equal;
    the worker's histogram `agentos_handoff_latency_seconds` (`Client.histogram`, read by the bench's handoff
    scenario) tells the rest: that statement's commit to the next leg's start."""
    tag = uuid.uuid4().hex[:6]
    plan = [
        (f"handoff-{tag}-{s}", f"run {k} sleep={sleep:g}") for s in range(sessions) for k in range(runs_per_session)
    ]
    rows = submit_all(client, plan, clients=min(16, sessions))
    accepted = {run_id: sent + elapsed for _, run_id, elapsed, sent in rows}
    bodies = {b["run_id"]: b for b in wait_finished(client, [(run_id, session) for session, run_id, _, _ in rows], 600)}
    by_session: dict[str, list[str]] = {}
    for session, run_id, _, _ in rows:
        by_session.setdefault(session, []).append(run_id)
    gaps = []
    for run_ids in by_session.values():
        for before, after in zip(run_ids, run_ids[1:], strict=False):
            ended, started = _epoch(bodies[before]["completed_at"]), _epoch(bodies[after]["started_at"])
            if accepted[after] < ended:
                gaps.append((started - ended) * 1000)
    if not gaps:
        raise RuntimeError("no run was queued behind another; raise sleep")
    return gaps


def cpu_figures(per: str, measured: list, kinds: tuple[str, ...] = CPU_KINDS) -> list[Figure]:
    return [Figure(f"CPU {per}, {kind}", "ms", [m.cpu[kind] for m in measured]) for kind in kinds]
