"""The journal scenario's check of its runs: what the poll of a `tooled-agent` run shows when the serve journals
its steps (AGENTOS_STEP_JOURNAL, the default) and when it does not."""

from __future__ import annotations

from .harness import Client, Drain
from .tooled import AGENT_ID, AGNO_AGENT_ID, ANSWER, CALLS, USAGE

TOOLS = [name for _, name, _ in CALLS]
JOURNALED = [("model", None), *(step for name in TOOLS for step in (("tool", name), ("model", None)))]


def offered(client: Client, *, agno: bool = False) -> bool:
    """Whether the server has `tooled-agent` (AGENTOS_COMPONENTS=bench.tooled:components), and with `agno` its twin
    of Agno's classes too (Agno installed)."""
    response = client.http.get(f"{client.url}/config", timeout=30)
    response.raise_for_status()
    wanted = {AGENT_ID, AGNO_AGENT_ID} if agno else {AGENT_ID}
    return wanted <= {agent["id"] for agent in response.json().get("agents", [])}


def journaled(client: Client, measured: Drain, *, polled: int = 3) -> bool:
    """Whether the serve journaled the drain's runs, from the polls of `polled` of them (the first, the last, and
    between). Each must have completed with the fake model's answer after four model calls and the three tools in
    order, and show its seven steps with the journal on, none with it off; else RuntimeError."""
    runs = measured.runs
    chosen = {runs[round(n * (len(runs) - 1) / max(1, polled - 1))] for n in range(polled)}
    found = {_journaled(client.poll(run_id, session_id, agent=AGENT_ID)) for run_id, session_id in chosen}
    if len(found) != 1:
        raise RuntimeError("some runs of one drain were journaled and some were not: two serves on one database?")
    return found.pop()


def _journaled(body: dict) -> bool:
    said = {name: value for name, value in body.items() if name != "events"}
    if body["status"] != "COMPLETED" or body.get("content") != ANSWER:
        raise RuntimeError(f"a {AGENT_ID} run did not complete with the expected answer: {said}")
    if (body.get("metrics") or {}).get("input_tokens") != (len(CALLS) + 1) * USAGE["prompt_tokens"]:
        raise RuntimeError(f"a {AGENT_ID} run did not make {len(CALLS) + 1} model calls: {said}")
    called = [event["tool"]["tool_name"] for event in body["events"] if event["event"] == "ToolCallCompleted"]
    if called != TOOLS:
        raise RuntimeError(f"a {AGENT_ID} run called {called}, not {TOOLS}")
    shown = [(step["kind"], step["tool"]) for step in body.get("steps") or []]
    if shown and shown != JOURNALED:
        raise RuntimeError(f"a {AGENT_ID} run's poll shows the steps {shown}, not {JOURNALED}")
    return bool(shown)
