"""The growth scenario: what a run costs as one session grows (docs/benchmarks.md).

One session of `runs` runs, each a 2 KB message of random letters (so compression cannot hide its size) on
`windowed-agent`, whose runs see the messages of the session's last 20 runs. All runs are submitted by one
client, in order, as fast as the server accepts them, so each run waits for the one before it; the figures
are medians over the first and the last 50 runs of a run's own time (started_at to completed_at) and of the
hand-off gap (completed_at of run k to started_at of run k+1, where k+1 was accepted before k ended).
"""

from __future__ import annotations

import random
import statistics
import string
import uuid

from .harness import Client, _epoch, wait_finished

AGENT = "windowed-agent"
EDGE = 50


def _message(number: int, rng: random.Random) -> str:
    return f"run {number} sleep=0 " + "".join(rng.choices(string.ascii_letters, k=2048))


def session_growth(client: Client, *, runs: int = 1000, agent: str = AGENT) -> dict[str, float]:
    rng = random.Random(runs)
    session_id = f"growth-{uuid.uuid4().hex[:8]}"
    run_ids, accepted = [], {}
    for number in range(runs):
        run_id, elapsed, sent = client.submit(session_id, _message(number, rng), agent=agent)
        run_ids.append(run_id)
        accepted[run_id] = sent + elapsed
    bodies = {
        body["run_id"]: body
        for body in wait_finished(client, [(run_id, session_id) for run_id in run_ids], timeout=900, agent=agent)
    }
    bodies = [bodies[run_id] for run_id in run_ids]
    if any(body["status"] != "COMPLETED" for body in bodies):
        raise RuntimeError("a growth run did not complete")
    own = [(_epoch(b["completed_at"]) - _epoch(b["started_at"])) * 1000 for b in bodies]
    gaps: list[float | None] = [None]
    for before, after in zip(bodies, bodies[1:], strict=False):
        ended = _epoch(before["completed_at"])
        gaps.append((_epoch(after["started_at"]) - ended) * 1000 if accepted[after["run_id"]] < ended else None)
    first, last = slice(0, EDGE), slice(runs - EDGE, runs)
    figures = {
        f"growth run time, runs 1-{EDGE}": statistics.median(own[first]),
        f"growth run time, last {EDGE} of {runs}": statistics.median(own[last]),
    }
    figures["growth run time last / first"] = (
        figures[f"growth run time, last {EDGE} of {runs}"] / figures[f"growth run time, runs 1-{EDGE}"]
    )
    for name, part in ((f"runs 1-{EDGE}", gaps[first]), (f"last {EDGE} of {runs}", gaps[last])):
        measured = [gap for gap in part if gap is not None]
        if measured:
            figures[f"growth hand-off gap, {name}"] = statistics.median(measured)
    return figures
