"""The hitl scenario: how soon a continued leg starts after its continue's 202, and how soon the run held behind
the paused one starts after the continued leg ends (server timestamps; client and server share a clock here)."""

from __future__ import annotations

import datetime
import json
import time
import uuid

from .harness import Client

AGENT = "hitl-agent"


def _epoch(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


def _wait(client: Client, run_id: str, session_id: str, status: str) -> dict:
    while (body := client.poll(run_id, session_id, AGENT))["status"] != status:
        time.sleep(0.01)
    return body


def continue_latencies(client: Client, *, runs: int = 20) -> tuple[list[float], list[float]]:
    """(ms from sending each continue to its leg's start, which bounds the 202-to-start time from above; ms from
    that leg's end to the held follow-up's start)."""
    to_leg, to_follow_up = [], []
    for _ in range(runs):
        session_id = f"bench-hitl-{uuid.uuid4().hex[:8]}"
        run_id, _, _ = client.submit(session_id, "please delete scratch sleep=0", agent=AGENT)
        paused = _wait(client, run_id, session_id, "PAUSED")
        follow_up, _, _ = client.submit(session_id, "and then sleep=0", agent=AGENT)
        tools = [{**tool, "confirmed": True} for tool in paused["tools"]]
        sent = time.time()
        response = client.http.post(
            f"{client.url}/agents/{AGENT}/runs/{run_id}/continue",
            data={"session_id": session_id, "background": "true", "stream": "false", "tools": json.dumps(tools)},
            timeout=30,
        )
        if response.status_code != 202:
            raise RuntimeError(f"continue answered {response.status_code}: {response.text[:200]}")
        done = _wait(client, run_id, session_id, "COMPLETED")
        after = _wait(client, follow_up, session_id, "COMPLETED")
        to_leg.append((_epoch(done["started_at"]) - sent) * 1000)
        to_follow_up.append((_epoch(after["started_at"]) - _epoch(done["completed_at"])) * 1000)
    return to_leg, to_follow_up
