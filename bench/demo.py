"""The seed scenario (CONTRACT 12): A, B, C on one session and D on another, each a 1 s stub model call,
submitted to a running server; the timeline shows who started when and whom each run waited on."""

from __future__ import annotations

import dataclasses
import datetime
import time
import uuid

from .harness import FINISHED, Client

SCENARIO = (("A", "chat-1"), ("B", "chat-1"), ("C", "chat-1"), ("D", "chat-2"))
COLUMN_SECONDS = 0.1


@dataclasses.dataclass
class Lane:
    name: str
    session: str
    run_id: str
    session_id: str
    submitted: float
    waited_on: list[str] = dataclasses.field(default_factory=list)
    body: dict = dataclasses.field(default_factory=dict)

    def started(self) -> float:
        return datetime.datetime.fromisoformat(self.body["started_at"]).timestamp()

    def ended(self) -> float:
        return datetime.datetime.fromisoformat(self.body["completed_at"]).timestamp()


def run_scenario(client: Client, *, sleep: float = 1.0, timeout: float = 60) -> list[Lane]:
    """Submit the scenario, poll until every run ends, remembering whom each waiting run waited on."""
    tag = uuid.uuid4().hex[:6]
    lanes = []
    for name, session in SCENARIO:
        session_id = f"{session}-{tag}"
        run_id, _, sent = client.submit(session_id, f"{name} sleep={sleep:g}")
        lanes.append(Lane(name, session, run_id, session_id, sent))
    names = {lane.run_id: lane.name for lane in lanes}
    deadline = time.monotonic() + timeout
    while any(lane.body.get("status") not in FINISHED for lane in lanes):
        if time.monotonic() > deadline:
            raise RuntimeError("the demo runs did not finish in time; is a worker running?")
        for lane in lanes:
            lane.body = client.poll(lane.run_id, lane.session_id)
            holder = names.get(lane.body.get("waiting_on"), lane.body.get("waiting_on"))
            if holder and holder not in lane.waited_on:
                lane.waited_on.append(holder)
        time.sleep(0.05)
    return lanes


def timeline(lanes: list[Lane]) -> str:
    """A text timeline: offsets from the first start, whom the run waited on, and a bar (. waiting, # running)."""
    t0 = min(lane.submitted for lane in lanes)
    rows = [
        f"{'run':<4}{'session':<9}{'start':>7}{'end':>7}  {'waited on':<10}timeline ({COLUMN_SECONDS:g} s a column)"
    ]
    for lane in lanes:
        if lane.body["status"] != "COMPLETED":
            rows.append(f"{lane.name:<4}{lane.session:<9}  {lane.body['status']}: {lane.body.get('content')}")
            continue
        start, end = lane.started() - t0, lane.ended() - t0
        bar = "." * round(start / COLUMN_SECONDS) + "#" * max(1, round((end - start) / COLUMN_SECONDS))
        waited = ", ".join(lane.waited_on) or "-"
        rows.append(f"{lane.name:<4}{lane.session:<9}{start:>6.2f}s{end:>6.2f}s  {waited:<10}|{bar}")
    return "\n".join(rows)


def draw(lanes: list[Lane], path: str, title: str) -> None:
    """The same timeline as a picture: a light bar while waiting, a dark one while running."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min(lane.submitted for lane in lanes)
    figure, axes = plt.subplots(figsize=(8, 2.8))
    for row, lane in enumerate(reversed(lanes)):
        if lane.body["status"] != "COMPLETED":
            continue
        start, end = lane.started() - t0, lane.ended() - t0
        axes.broken_barh([(0, start)], (row - 0.3, 0.6), color="#d9e2ef")
        axes.broken_barh([(start, end - start)], (row - 0.3, 0.6), color="#2f5d95")
        label = f"waited on {', '.join(lane.waited_on)}" if lane.waited_on else "started at once"
        axes.text(end + 0.05, row, label, va="center", fontsize=8)
    axes.set_yticks(range(len(lanes)), [f"{lane.name} ({lane.session})" for lane in reversed(lanes)])
    axes.set_xlabel("seconds since the first submit")
    axes.set_xlim(0, max(lane.ended() - t0 for lane in lanes if lane.body.get("completed_at")) + 1.2)
    axes.set_title(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
