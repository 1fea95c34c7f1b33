"""Retry policy (CONTRACT 2): full-jitter exponential backoff, capped at ten times the base."""

from __future__ import annotations

import random


def backoff_delay(*, attempt: int, base_seconds: float, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based): uniform in [0, min(base·2^(attempt-1), 10·base)]."""
    ceiling = min(base_seconds * 2 ** (attempt - 1), 10 * base_seconds)
    return (rng or random).uniform(0, ceiling)
