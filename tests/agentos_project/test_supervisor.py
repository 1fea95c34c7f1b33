"""The supervisor of `serve`, with real child processes: restarts with back-off, gives up on a child that keeps
dying, and stops every child (and its process group) on a signal."""

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from agentos_project.supervisor import Supervisor, lower_priority

from ..conftest import wait_until


def supervisor(commands, lines, **options) -> Supervisor:
    return Supervisor(commands, env=dict(os.environ), cwd=os.getcwd(), log=lines.append, stop_timeout=5, **options)


def test_a_child_that_keeps_dying_is_restarted_with_doubling_back_off_then_everything_stops():
    lines = []
    flaky = [sys.executable, "-c", "raise SystemExit(3)"]
    steady = [sys.executable, "-c", "import time; time.sleep(60)"]
    watched = supervisor({"flaky": flaky, "steady": steady}, lines, first_backoff=0.1, max_backoff=0.3)

    started = time.monotonic()
    assert watched.run(handle_signals=False) == 1

    assert time.monotonic() - started < 20
    delays = [
        float(d)
        for d in re.findall(r"flaky \(pid \d+\) exited with status 3; restarting it in ([\d.]+)s", "\n".join(lines))
    ]
    assert delays == [0.1, 0.2, 0.3, 0.3], "doubling, capped"
    assert len(re.findall(r"flaky restarted \(pid \d+\)", "\n".join(lines))) == 4
    assert re.search(
        r"flaky \(pid \d+\) exited with status 3, its 5th death within 60s; stopping everything", lines[-1]
    )
    steady_process = watched.children[1].process
    assert steady_process.poll() == -signal.SIGTERM, "the others were stopped"


def test_a_killed_child_is_restarted_and_a_stop_signal_ends_every_child_and_its_group():
    lines = []
    parent = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(60)']); time.sleep(60)"]  # fmt: skip
    watched = supervisor({"worker": parent}, lines)
    runner = threading.Thread(target=lambda: lines.append(f"returned {watched.run(handle_signals=False)}"))
    runner.start()
    deadline = time.monotonic() + 10
    while watched.children[0].process is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first = watched.children[0].process
    time.sleep(0.5)

    first.send_signal(signal.SIGKILL)
    while watched.children[0].process is first and time.monotonic() < deadline:
        time.sleep(0.05)
    second = watched.children[0].process
    [grandchild] = wait_until(lambda: psutil.Process(second.pid).children(), timeout=10, what="the grandchild")
    watched.request_stop()
    runner.join(10)

    assert f"worker (pid {first.pid}) was killed by SIGKILL; restarting it in 1s" in lines
    assert f"worker restarted (pid {second.pid})" in lines
    assert second.poll() == -signal.SIGTERM and lines[-1] == "returned 0"
    assert not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE, "its process group too"


def _nice_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def _autogroup_nice(pid: int) -> str:
    return Path(f"/proc/{pid}/autogroup").read_text().split()[-1]


def test_a_child_given_a_nice_runs_below_the_supervisor_thread_by_thread_and_its_session_too():
    lines = []
    threads = [sys.executable, "-c", "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start();"
               " time.sleep(60)"]  # fmt: skip
    watched = supervisor({"worker": threads, "web": threads}, lines, nice={"worker": 7})
    runner = threading.Thread(target=lambda: watched.run(handle_signals=False))
    runner.start()
    try:
        worker, web = (wait_until(lambda c=c: c.process, timeout=10, what="the child") for c in watched.children)
        wait_until(lambda: len(os.listdir(f"/proc/{worker.pid}/task")) == 2, timeout=10, what="the second thread")

        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert {_nice_of(int(tid)) for tid in os.listdir(f"/proc/{worker.pid}/task")} == {mine + 7}
        assert _nice_of(web.pid) == mine, "only the child named"
        if os.path.exists(f"/proc/{worker.pid}/autogroup"):
            assert (_autogroup_nice(worker.pid), _autogroup_nice(web.pid)) == ("7", "0")
        assert not [line for line in lines if "CPU priority" in line]
    finally:
        watched.request_stop()
        runner.join(10)


def test_lowering_the_priority_of_a_process_that_is_gone_says_so():
    gone = psutil.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    gone.wait()

    assert lower_priority(gone.pid, 5) is False
