"""The fair-share scenario's mix: one big user's runs submitted all at once, then a few runs of many small users, on
distinct sessions; how long the small users waited from their 202 to their run's start, and how fast the big
user's runs went through. Whether the server round robins and caps is its own settings'
(`AGENTOS_ROUND_ROBIN_WINDOW`, `AGENTOS_MAX_RUNNING_PER_USER`): run the scenario against each."""

from __future__ import annotations

import dataclasses
import uuid

from .harness import Client, Figure, _epoch, percentile, submit_all, wait_finished

BIG = "big"


@dataclasses.dataclass
class Mix:
    small_wait_p50: float  # ms from a small user's 202 to its run's start
    small_wait_p99: float
    big_rate: float  # the big user's runs per second, from its first submit to its last completion
    # How many of the big user's runs started between the first small 202 and the last small start.
    big_started_meanwhile: int


def mix(client: Client, *, big: int, small_users: int, per_small: int, sleep: float, clients: int) -> Mix:
    """`big` runs of one user, then `per_small` runs of each of `small_users` users, each run on a session of its
    own, each run's model waiting `sleep` seconds; submitted from `clients` threads, the big user's first."""
    tag = uuid.uuid4().hex[:6]
    message = f"mixed sleep={sleep:g}"
    big_plan = [(f"fair-{tag}-{BIG}-{n}", message) for n in range(big)]
    small_plan = [(f"fair-{tag}-small{u}-{k}", message) for u in range(small_users) for k in range(per_small)]

    def owner(session_id: str) -> str:
        return session_id.split("-")[2]

    rows = submit_all(client, big_plan, clients, users=owner) + submit_all(client, small_plan, clients, users=owner)
    bodies = {
        body["run_id"]: body
        for body in wait_finished(client, [(run_id, session) for session, run_id, _, _ in rows], timeout=1800)
    }
    failed = [body for body in bodies.values() if body["status"] != "COMPLETED"]
    if failed:
        raise RuntimeError(f"{len(failed)} runs did not complete, e.g. {failed[0]}")
    waits, big_starts, big_sent, big_done = [], [], [], []
    small_starts, small_accepted = [], []
    for session, run_id, elapsed, sent in rows:
        started = _epoch(bodies[run_id]["started_at"])
        if owner(session) == BIG:
            big_starts.append(started)
            big_sent.append(sent)
            big_done.append(_epoch(bodies[run_id]["completed_at"]))
        else:
            waits.append((started - (sent + elapsed)) * 1000)
            small_starts.append(started)
            small_accepted.append(sent + elapsed)
    first_small, last_small = min(small_accepted), max(small_starts)
    return Mix(
        percentile(waits, 0.50),
        percentile(waits, 0.99),
        big / (max(big_done) - min(big_sent)),
        sum(first_small <= start < last_small for start in big_starts),
    )


def figures(name: str, mixes: list[Mix]) -> list[Figure]:
    """The mix's figures over its repeats."""
    return [
        Figure(f"{name}: small users' wait p50", "ms", [m.small_wait_p50 for m in mixes]),
        Figure(f"{name}: small users' wait p99", "ms", [m.small_wait_p99 for m in mixes]),
        Figure(f"{name}: big user's rate", "runs/s", [m.big_rate for m in mixes]),
        Figure(f"{name}: big runs started while small ones waited", "runs", [m.big_started_meanwhile for m in mixes]),
    ]
