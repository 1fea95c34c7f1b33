"""Giving back a thread's unused stack (`agentos_project.stacks`): threads that went deep and now wait hold few
stack pages once they released them, and go on working."""

import json
import threading

import pytest

from agentos_project import stacks

pytestmark = pytest.mark.skipif(stacks._LIBC is None, reason="releasing a stack needs Linux on x86-64 with glibc")

THREADS = 200


def deep(depth: int) -> str:
    """Recursion through C (a sort key), which uses the thread's C stack as pure Python recursion does not."""
    return json.dumps([depth]) if depth == 0 else sorted(["x"], key=lambda _: deep(depth - 1))[0]


def resident_kb() -> int:
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])


def held_per_thread(release: bool) -> tuple[float, list[int]]:
    """KB of resident memory each of THREADS threads adds while it waits after a deep call; what each released."""
    waiting, go_on, released, answers = threading.Barrier(THREADS + 1), threading.Event(), [], []

    def work():
        deep(120)
        if release:
            released.append(stacks.release_unused_stack())
        waiting.wait()
        go_on.wait()
        answers.append(deep(120))  # as deep again, on zero pages where it had released some

    before = resident_kb()
    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    waiting.wait()
    held = (resident_kb() - before) / THREADS
    go_on.set()
    for thread in threads:
        thread.join()
    assert answers == ["x"] * THREADS
    return held, released


def test_threads_that_released_their_stack_hold_a_fraction_of_it_while_they_wait():
    kept, _ = held_per_thread(release=False)
    released_kb, released = held_per_thread(release=True)

    assert kept > 100, "a deep call leaves its stack pages resident"
    assert released_kb < kept / 3
    assert len(released) == THREADS and min(released) > 0


def test_the_main_thread_releases_nothing():
    assert stacks.release_unused_stack() == 0
