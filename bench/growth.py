"""The growth scenario: what a turn costs as one session grows (docs/benchmarks.md).

One session of `turns` turns, each a 2 KB message of random letters (so compression cannot hide its size) on
`windowed-agent`, whose runs see the messages of the session's last 20 runs. All turns are submitted by one
client, in order, as fast as the server accepts them, so each run waits for the one before it; the figures
are medians over the first and the last 50 turns of a run's own time (started_at to completed_at) and of the
hand-off gap (completed_at of turn k to started_at of turn k+1, where k+1 was accepted before k ended).
"""

from __future__ import annotations

import random
import statistics
import string
import uuid

from .harness import Client, _epoch, wait_finished

AGENT = "windowed-agent"
EDGE = 50


def _message(turn: int, rng: random.Random) -> str:
    return f"turn {turn} sleep=0 " + "".join(rng.choices(string.ascii_letters, k=2048))


def session_growth(client: Client, *, turns: int = 1000, agent: str = AGENT) -> dict[str, float]:
    rng = random.Random(turns)
    session_id = f"growth-{uuid.uuid4().hex[:8]}"
    run_ids, accepted = [], {}
    for turn in range(turns):
        run_id, elapsed, sent = client.submit(session_id, _message(turn, rng), agent=agent)
        run_ids.append(run_id)
        accepted[run_id] = sent + elapsed
    bodies = {
        body["run_id"]: body
        for body in wait_finished(client, [(run_id, session_id) for run_id in run_ids], timeout=900, agent=agent)
    }
    bodies = [bodies[run_id] for run_id in run_ids]
    if any(body["status"] != "COMPLETED" for body in bodies):
        raise RuntimeError("a growth turn did not complete")
    own = [(_epoch(b["completed_at"]) - _epoch(b["started_at"])) * 1000 for b in bodies]
    gaps: list[float | None] = [None]
    for before, after in zip(bodies, bodies[1:], strict=False):
        ended = _epoch(before["completed_at"])
        gaps.append((_epoch(after["started_at"]) - ended) * 1000 if accepted[after["run_id"]] < ended else None)
    first, last = slice(0, EDGE), slice(turns - EDGE, turns)
    figures = {
        f"growth run time, turns 1-{EDGE}": statistics.median(own[first]),
        f"growth run time, last {EDGE} of {turns}": statistics.median(own[last]),
    }
    figures["growth run time last / first"] = (
        figures[f"growth run time, last {EDGE} of {turns}"] / figures[f"growth run time, turns 1-{EDGE}"]
    )
    for name, part in ((f"turns 1-{EDGE}", gaps[first]), (f"last {EDGE} of {turns}", gaps[last])):
        measured = [gap for gap in part if gap is not None]
        if measured:
            figures[f"growth hand-off gap, {name}"] = statistics.median(measured)
    return figures
