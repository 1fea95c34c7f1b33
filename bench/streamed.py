"""The streamed scenario: the drain with every run `stream=true`, its stream read to the end, against the plain
one, and the CPU of a streamed run over a plain one's by kind.

A streamed run is never handed off (a session's next run is sent once its stream ended): `--sessions` = `--runs`
makes the plain drain hand none off either. Two comparisons:
- unpaced, each drain as fast as its clients go: the plain submits are a burst, which the server takes in batches
  (many accepts per wake-up of a thread, many broker messages per write), while a streaming client sends its next
  run only once its stream ended, so the server meets those one at a time. The ratio mixes what streaming costs
  with that difference of load.
- paced (`--streamed-rate`), both drains starting their runs at the same rate, below what either sustains: the
  same load, one at a time for both, and the ratio is what streaming costs. Its runs/s is that rate, not a
  capacity."""

from __future__ import annotations

from .harness import Drain, Figure, cpu_figures

SERVER_KINDS = ("web", "worker", "postgres", "redis")


def figures(name: str, pairs: list[tuple[Drain, Drain]]) -> list[Figure]:
    """The figures of (plain, streamed) drains measured in turn."""
    plain, streamed = [p for p, _ in pairs], [s for _, s in pairs]
    return [
        Figure(f"drain {name}", "runs/s", [d.rate for d in plain]),
        Figure(f"streamed drain {name}", "runs/s", [d.rate for d in streamed]),
        *cpu_figures("per run", plain, SERVER_KINDS),
        *cpu_figures("per streamed run", streamed),
        Figure("streamed / plain", "ratio", [s.rate / p.rate for p, s in pairs]),
        *[
            Figure(f"CPU per streamed run / plain, {kind}", "ratio", [s.cpu[kind] / p.cpu[kind] for p, s in pairs])
            for kind in SERVER_KINDS
        ],
    ]
