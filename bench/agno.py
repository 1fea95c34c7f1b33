"""The Agno adapter's cost (scenario agno): `tooled-agent` and its twin made of Agno's own classes
(`agno-tooled-agent`: Agno's `Agent` and `OpenAIChat`, the same three tools, run by agentos as it is), drained in
turn against one serve, on the same fake model (bench/tooled.py, in a process of its own): four model calls and
three tool calls a run, each run's CPU by process kind, the serve's own processes only."""

from __future__ import annotations

from collections.abc import Callable

from . import cpu
from .harness import CPU_KINDS, Client, Drain, Figure, cpu_figures, drain
from .tooled import AGENT_ID, AGNO_AGENT_ID, ANSWER, ModelProcess

AGENTS = (AGENT_ID, AGNO_AGENT_ID)


def agno_figures(command, repeats: int) -> list[Figure]:
    """The scenario, for `manage.py bench` (`command`): the drains of both agents on the fake model's process."""
    serve = cpu.serve_pids(command.client.url)
    measure = lambda agent: command._drain_measured(command.client, agent=agent, serve=serve)  # noqa: E731
    name = f"tooled drain {command.options['runs']} runs / {command.options['sessions']} sessions"
    with ModelProcess(command.model_port):
        return adapter_drains(command.client, measure, repeats=repeats, kinds=(*CPU_KINDS, "model"), name=name)


def adapter_drains(client: Client, measure: Callable[[str], Drain], *, repeats: int, kinds, name: str) -> list[Figure]:
    """`repeats` drains of each agent, interleaved (`measure(agent)` drains one), after a warm-up of each; the rate
    and the CPU per run of each. Every drain's last run must have completed with the fake model's answer."""
    for agent in AGENTS:
        drain(client, runs=50, sessions=10, agent=agent)  # its first runs open its connections
    drains: dict[str, list[Drain]] = {agent: [] for agent in AGENTS}
    for _ in range(repeats):
        for agent in AGENTS:
            measured = measure(agent)
            run_id, session_id = measured.runs[-1]
            body = client.poll(run_id, session_id, agent=agent)
            if body["status"] != "COMPLETED" or body.get("content") != ANSWER:
                raise RuntimeError(f"a {agent} run did not complete with the fake model's answer: {body['status']}")
            drains[agent].append(measured)
    figures = []
    for agent, measured in drains.items():
        figures.append(Figure(f"{name}, {agent}", "runs/s", [d.rate for d in measured]))
        figures += cpu_figures(f"per run, {agent}", measured, kinds)
    return figures
