"""Prometheus metrics of the queue (CONTRACT 12): counters and histograms summed over every process, and gauges
read from PostgreSQL at scrape time.

Each process adds its increments to one Redis hash per deployment (`coordination.deployment_key("metrics")`) from a
thread of its own (`Recorder`), so a request or a run never waits on Redis and one `/metrics` answer covers every
process; increments Redis refuses stay, summed, for the next batch. A Redis flush reads as a counter reset. Gauges
(tickets by status, oldest queued age, sessions held, runs in flight per worker) come from the tickets themselves. A
`serve` child counts its own restart once Django has loaded (`record_serve_restart`), as its supervisor tells it.
"""

from __future__ import annotations

import bisect
import collections
import logging
import os
import threading
import uuid

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from agentos_project.core.batching import BatchingThread
from agentos_project.core.conf import Server
from agentos_project.core.coordination import deployment_key, redis_connection

from . import selectors

log = logging.getLogger("agentos.metrics")
PREFIX = "agentos_"

COUNTERS = {
    "accepted": "Runs accepted into the queue",
    "claimed": "Attempts claimed by a worker (reclaims included)",
    "reclaimed": "Stale leases claimed again by another attempt",
    "completed": "Tickets completed",
    "failed": "Tickets failed (sweeps included)",
    "cancelled": "Tickets cancelled (expirations included)",
    "expired": "Queued tickets cancelled because their deadline passed before they started",
    "paused": "Tickets paused for a human decision",
    "continued": "Paused tickets continued",
    "retried": "Failed attempts queued again for a retry",
    "requeued": "Dead letters (failed or cancelled tickets) requeued by an operator",
    "swept": "Stale leases ended by the sweeper (failed, parked back to paused, or resumed)",
    "resumed": "Lost attempts without budget queued once more because the work kept their progress",
    "pruned": "Terminal tickets deleted after the retention window",
}
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
HISTOGRAMS = {
    "accept_latency_seconds": ("Submit to committed ticket, in the accepting process", _FAST),
    "wait_seconds": ("Accept to the start of a run's first attempt (claim latency)", _SLOW),
    "handoff_latency_seconds": ("Release of a session by its previous run to the start of the next one", _FAST),
    "run_duration_seconds": ("Execution of one attempt, from its start to its outcome", _SLOW),
}


def register_counters(counters: dict[str, str]) -> None:
    """Counters of the work the queue carries (name: description), shown as `agentos_runs_<name>_total` beside the
    queue's own; registering one again keeps its first description."""
    for name, description in counters.items():
        COUNTERS.setdefault(name, description)


# Applies a batch once: each process numbers its batches, and a batch whose number is not above the last one
# applied for that process (a resend after a lost reply) changes nothing.
APPLY_ONCE = """
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local number = tonumber(ARGV[1])
if number > last then
  for i = 2, #ARGV, 2 do
    if string.sub(ARGV[i], -4) == ':sum' then
      redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
    else
      redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
    end
  end
  last = number
end
redis.call('SET', KEYS[2], last, 'EX', 86400)
return last
"""


class Recorder(BatchingThread):
    """This process's increments, added to the shared Redis hash off the caller's thread, each exactly once.

    The first increment after a quiet spell goes out at once; the ones after it are summed and sent together
    `pause` seconds later, so a busy process makes at most 1/pause round trips a second (not four or five per
    run) and a counter trails what happened by at most `pause` plus a round trip. A batch Redis does not
    confirm is sent again, with its number, until it is (every `retry_seconds` while nothing else arrives);
    increments made meanwhile wait in one sum behind it.
    """

    name = "agentos-metrics"
    batch = 4096
    pause = 0.02
    retry_seconds = 1.0

    def __init__(self) -> None:
        super().__init__()
        self._send_lock = threading.Lock()
        self._forget()

    def _forget(self) -> None:
        self._process = uuid.uuid4().hex
        self._numbered = 0
        self._unconfirmed: tuple[int, dict] | None = None  # sent, not confirmed
        self._fresh: collections.Counter = collections.Counter()  # not sent yet
        self._retry: threading.Timer | None = None

    def _start(self) -> None:
        if self._owner_pid != os.getpid():  # a forked child owes nothing of its parent's
            self._forget()
        super()._start()

    def count(self, name: str, amount: float = 1) -> None:
        assert name in COUNTERS, name
        self.put((f"c:{name}", amount))

    def count_restart(self, child: str) -> None:
        self.put((f"r:{child}", 1))

    def observe(self, name: str, seconds: float) -> None:
        seconds = max(0.0, seconds)
        bucket = bisect.bisect_left(HISTOGRAMS[name][1], seconds)
        self.put((f"h:{name}:{bucket}", 1, f"h:{name}:count", 1, f"h:{name}:sum", seconds))

    def handle(self, items: list) -> None:
        with self._send_lock:
            for item in items:
                for field, amount in zip(item[::2], item[1::2], strict=True):
                    self._fresh[field] += amount
            self._send()

    def flush(self, timeout: float = 10) -> bool:
        """Wait until every increment made so far was sent; False if one is still unconfirmed."""
        handled = super().flush(timeout)
        with self._send_lock:
            return self._send() and handled

    def _send(self) -> bool:
        """Send the unconfirmed batch, then what has summed up since; False when Redis refused (a retry is set)."""
        while self._unconfirmed is not None or self._fresh:
            if self._unconfirmed is None:
                self._numbered += 1
                self._unconfirmed, self._fresh = (self._numbered, dict(self._fresh)), collections.Counter()
            number, fields = self._unconfirmed
            arguments = [number]
            for field, amount in fields.items():
                arguments += [field, repr(float(amount)) if field.endswith(":sum") else int(amount)]
            try:
                redis_connection().eval(
                    APPLY_ONCE,
                    2,
                    deployment_key("metrics"),
                    deployment_key(f"metrics:applied:{self._process}"),
                    *arguments,
                )
            except redis.RedisError as error:
                log.warning("metrics not sent (%s); sent again in %ss", error, self.retry_seconds)
                self._retry_later()
                return False
            self._unconfirmed = None
        return True

    def _retry_later(self) -> None:
        if self._retry is None or not self._retry.is_alive():
            self._retry = threading.Timer(self.retry_seconds, self.put, args=[()])
            self._retry.daemon = True
            self._retry.start()


recorder = Recorder()
SERVE_CHILDREN = ("web", "worker")


def record_serve_restart(server: Server) -> None:
    """Count this process in `agentos_serve_restarts_total` when serve's supervisor started it as a restart."""
    if server.serve_restarts and server.serve_child:
        recorder.count_restart(server.serve_child)


def shared_values() -> dict[str, float] | None:
    """The summed counters and histogram buckets of every process; None when Redis does not answer."""
    try:
        raw = redis_connection().hgetall(deployment_key("metrics"))
    except redis.RedisError:
        return None
    return {field.decode(): float(value) for field, value in raw.items()}


class QueueCollector:
    """What `/metrics` shows, read when it is scraped; the user ids and worker names only with `identities`."""

    def __init__(self, *, identities: bool):
        self.identities = identities

    def collect(self):
        values = shared_values()
        yield _gauge("metrics_store_up", "1 when the shared counters (Redis) answered this scrape", values is not None)
        if values is not None:  # left out rather than shown as 0, which Prometheus would read as a counter reset
            for name, description in COUNTERS.items():
                yield CounterMetricFamily(f"{PREFIX}runs_{name}", description, value=values.get(f"c:{name}", 0.0))
            for name, (description, buckets) in HISTOGRAMS.items():
                yield _histogram(name, description, buckets, values)
            yield _restarts(values)
        yield from _database_gauges(self.identities)

    def describe(self):
        return []


def _gauge(name: str, description: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}{name}", description, value=float(value))


def _histogram(name: str, description: str, buckets: tuple, values: dict) -> HistogramMetricFamily:
    cumulative, total = [], 0.0
    for index, bound in enumerate((*buckets, float("inf"))):
        total += values.get(f"h:{name}:{index}", 0.0)
        cumulative.append((_bound(bound), total))
    return HistogramMetricFamily(
        f"{PREFIX}{name}", description, buckets=cumulative, sum_value=values.get(f"h:{name}:sum", 0.0)
    )


def _restarts(values: dict) -> CounterMetricFamily:
    restarts = CounterMetricFamily(
        f"{PREFIX}serve_restarts", "Children of serve restarted by its supervisor after they died", labels=["child"]
    )
    children = {*SERVE_CHILDREN, *(field[2:] for field in values if field.startswith("r:"))}
    for child in sorted(children):
        restarts.add_metric([child], values.get(f"r:{child}", 0.0))
    return restarts


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _database_gauges(identities: bool):
    health = selectors.queue_health()
    tickets = GaugeMetricFamily(f"{PREFIX}tickets", "Tickets by status", labels=["status"])
    for status, count in health.counts.items():
        tickets.add_metric([status], count)
    yield tickets
    oldest = health.oldest_queued_age_seconds
    yield _gauge("oldest_queued_age_seconds", "Age of the oldest queued ticket (0 when none)", oldest or 0.0)
    held = GaugeMetricFamily(
        f"{PREFIX}sessions_held", "Sessions held by a paused head or one waiting for its retry", labels=["reason"]
    )
    held_age = GaugeMetricFamily(
        f"{PREFIX}sessions_held_oldest_age_seconds", "Age of the oldest such hold (0 when none)", labels=["reason"]
    )
    waiting = GaugeMetricFamily(
        f"{PREFIX}sessions_held_waiting_runs", "Runs queued behind those held heads", labels=["reason"]
    )
    for reason, hold in health.held.items():
        held.add_metric([reason], hold.sessions)
        held_age.add_metric([reason], hold.oldest_age_seconds)
        waiting.add_metric([reason], hold.waiting)
    yield from (held, held_age, waiting)
    in_flight = GaugeMetricFamily(f"{PREFIX}runs_in_flight", "Runs executing now, per worker", labels=["worker"])
    for worker, count in health.in_flight.items() if identities else ():  # a worker's name is its host and pid
        in_flight.add_metric([worker], count)
    yield in_flight
    fair = selectors.fair_share()
    by_user = GaugeMetricFamily(
        f"{PREFIX}user_runs_running",
        f"Runs executing now, for the {selectors.TOP_USERS} users with the most",
        labels=["user_id"],
    )
    for user_id, count in fair.running_by_user.items() if identities else ():
        by_user.add_metric([user_id], count)
    yield by_user
    held = GaugeMetricFamily(
        f"{PREFIX}runs_held",
        "Queued runs that could start but wait for their user: at AGENTOS_MAX_RUNNING_PER_USER (cap), or for the "
        "user's turn in the broker's line (turn)",
        labels=["reason"],
    )
    held.add_metric(["cap"], fair.held_by_cap)
    held.add_metric(["turn"], fair.held_for_turn)
    yield held


def exposition(*, identities: bool) -> bytes:
    """The Prometheus text answer of `/metrics`; without `identities`, the series that name a user or a worker
    (host and pid) have no samples."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(identities=identities))
    return generate_latest(registry)
