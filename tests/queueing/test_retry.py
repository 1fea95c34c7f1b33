"""The backoff of CONTRACT 2: uniform in [0, min(base·2^(N-1), 10·base)] after attempt N."""

import random

import pytest

from queueing.retry import backoff_delay


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 30), (2, 60), (3, 120), (4, 240), (5, 300), (9, 300)])
def test_delays_stay_under_a_ceiling_that_doubles_up_to_ten_times_the_base(attempt, ceiling):
    rng = random.Random(attempt)
    delays = [backoff_delay(attempt=attempt, base_seconds=30, rng=rng) for _ in range(2000)]

    assert min(delays) >= 0 and max(delays) <= ceiling
    assert max(delays) > 0.95 * ceiling and min(delays) < 0.05 * ceiling, "the whole range is used (full jitter)"


def test_a_zero_base_retries_at_once():
    assert backoff_delay(attempt=3, base_seconds=0) == 0
