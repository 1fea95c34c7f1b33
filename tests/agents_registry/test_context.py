"""RunContext.wait: a run waiting on its model sleeps on its wake event, not in steps that each ask `cancelled`."""

from __future__ import annotations

import threading
import time

from agents_registry.context import WOKEN_CHECK_SECONDS, RunContext


def context(**overrides) -> RunContext:
    return RunContext(run_id="r", session_id="s", user_id=None, history=[], session_state={}, **overrides)


def counting(answer: threading.Event) -> tuple[list[int], callable]:
    asked = [0]

    def cancelled() -> bool:
        asked[0] += 1
        return answer.is_set()

    return asked, cancelled


def test_a_wait_without_a_wake_event_asks_every_step():
    asked, cancelled = counting(threading.Event())

    assert context(cancelled=cancelled).wait(0.5, step=0.05) is False
    assert asked[0] >= 9


def test_a_wait_on_its_wake_event_asks_once_per_check_and_at_its_end():
    asked, cancelled = counting(threading.Event())

    assert context(cancelled=cancelled, woken=threading.Event()).wait(2.5 * WOKEN_CHECK_SECONDS) is False
    assert asked[0] == 4  # at the start, and after each of its three sleeps (1, 1, then the last 0.5)


def test_a_wait_ends_as_soon_as_its_wake_event_is_set():
    stop, woken = threading.Event(), threading.Event()
    _, cancelled = counting(stop)
    ended = []

    def waiting():
        started = time.monotonic()
        ended.append((context(cancelled=cancelled, woken=woken).wait(30), time.monotonic() - started))

    thread = threading.Thread(target=waiting)
    thread.start()
    time.sleep(0.1)
    stop.set()
    woken.set()
    thread.join(5)

    ((was_cancelled, seconds),) = ended
    assert was_cancelled is True and seconds < WOKEN_CHECK_SECONDS


def test_a_wake_event_set_for_nothing_the_run_sees_leaves_it_waiting_in_steps():
    """A set event whose cause `cancelled` does not report (as no caller does) must not spin the wait."""
    asked, cancelled = counting(threading.Event())
    woken = threading.Event()
    woken.set()

    assert context(cancelled=cancelled, woken=woken).wait(0.3, step=0.05) is False
    assert 5 <= asked[0] <= 8
