"""The supervisor of `serve`, with real child processes: restarts with back-off, for ever once a child has been
ready, gives up on a child that never becomes ready (printing its last lines), passes every child's output through
unchanged, and stops every child (and its process group) on a signal."""

import collections
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from agentos_project.supervisor import SPEC, Supervisor, lower_priority
from tests.support.processes import ROOT
from tests.support.waiting import wait_until

PREFIX = "agentos serve: "


def supervisor(commands, **options) -> Supervisor:
    streams = (io.BytesIO(), io.BytesIO())
    return Supervisor(commands, env=dict(os.environ), cwd=os.getcwd(), stop_timeout=5, streams=streams, **options)


def said(watched: Supervisor) -> list[str]:
    """The supervisor's own lines on its stderr, without their prefix."""
    with watched.locks[1]:
        err = watched.streams[1].getvalue().decode()
    return [line.removeprefix(PREFIX) for line in err.splitlines() if line.startswith(PREFIX)]


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def in_background(watched: Supervisor) -> threading.Thread:
    runner = threading.Thread(target=lambda: setattr(watched, "returned", watched.run(handle_signals=False)))
    runner.start()
    return runner


def test_a_child_never_ready_stops_everything_at_its_fifth_death_then_its_last_lines_are_printed():
    broken = python(
        "import sys; print('on stdout'); print('connecting', file=sys.stderr); "
        "print('ACCESS_REFUSED', file=sys.stderr); raise SystemExit(3)"
    )
    steady = python("import time; print('up', flush=True); time.sleep(60)")
    watched = supervisor(
        {"broken": broken, "steady": steady},
        ready={"broken": "serving", "steady": "up"},
        first_backoff=0.1,
        max_backoff=0.3,
    )

    started = time.monotonic()
    assert watched.run(handle_signals=False) == 1

    assert time.monotonic() - started < 20
    lines = said(watched)
    deaths = re.findall(r"broken \(pid \d+\) exited with status 3 before it was ready \(try (\d) of 5\); "
                        r"restarting it in ([\d.]+)s", "\n".join(lines))  # fmt: skip
    assert deaths == [("1", "0.1"), ("2", "0.2"), ("3", "0.3"), ("4", "0.3")], "doubling, capped"
    assert len(re.findall(r"broken restarted \(pid \d+, restart \d\)", "\n".join(lines))) == 4
    report = lines.index("broken's last lines of output:")
    assert re.fullmatch(
        r"broken \(pid \d+\) exited with status 3 before it was ever ready, 5 times in a row; stopping everything",
        lines[report - 1],
    )
    assert collections.Counter(lines[report + 1 :]) == {"| on stdout": 5, "| connecting": 5, "| ACCESS_REFUSED": 5}
    err = watched.streams[1].getvalue().decode().splitlines()
    assert err[-16:] == [PREFIX + line for line in lines[report:]], "the report is the last thing written"
    assert watched.children[1].process.poll() == -signal.SIGTERM, "the others were stopped first"


def test_in_the_json_format_each_line_of_the_supervisor_is_one_object_the_report_with_its_output():
    broken = python("import sys; print('ACCESS_REFUSED', file=sys.stderr); raise SystemExit(3)")
    watched = supervisor({"broken": broken}, ready={"broken": "serving"}, log_format="json", first_backoff=0.05)

    assert watched.run(handle_signals=False) == 1

    lines = watched.streams[1].getvalue().decode().splitlines()
    objects = [json.loads(line) for line in lines if not line.startswith("ACCESS_REFUSED")]
    assert len(objects) == 4 + 4 + 2 and len(lines) == len(objects) + 5, "deaths, restarts, the end; the child's"
    assert {(o["logger"], o["level"]) for o in objects[:-2]} == {
        ("agentos.serve", "WARNING"),
        ("agentos.serve", "INFO"),
    }
    assert objects[-1] == {
        "time": objects[-1]["time"],
        "level": "ERROR",
        "logger": "agentos.serve",
        "message": "broken's last lines of output:",
        "output": ["ACCESS_REFUSED"] * 5,
    }
    assert objects[-2]["level"] == "ERROR" and objects[-2]["message"].endswith("5 times in a row; stopping everything")


def test_a_child_that_was_ready_once_is_restarted_for_ever_and_told_its_restart_count():
    crashing = python(
        "import os, sys; restarts = int(os.environ['AGENTOS_SERVE_RESTARTS']); print(f'restart {restarts}'); "
        "print('ready' if restarts == 0 else 'dying young', flush=True); sys.exit(1)"
    )
    watched = supervisor({"worker": crashing}, ready={"worker": "ready"}, first_backoff=0.02, max_backoff=0.1)
    runner = in_background(watched)
    try:
        wait_until(lambda: watched.children[0].restarts >= 12, timeout=20, what="12 restarts")
        assert watched.failed is None, "dying before ready after having been ready never stops everything"
    finally:
        watched.request_stop()
        runner.join(10)

    assert watched.returned == 0
    delays = [float(d) for d in re.findall(r"restarting it in ([\d.]+)s", "\n".join(said(watched)))]
    assert delays[:5] == [0.02, 0.04, 0.08, 0.1, 0.1] and set(delays[5:]) == {0.1}
    out = watched.streams[0].getvalue().decode()
    assert [f"restart {n}" for n in range(12)] == re.findall(r"restart \d+", out)[:12], "each child its count"


def test_a_restart_the_system_refuses_is_tried_again_with_back_off_and_the_others_live_on(tmp_path):
    program = tmp_path / "web"  # an executable the test takes away, so the restart's exec is refused (OSError)
    program.write_text(f"#!{sys.executable}\nimport time\nprint('up', flush=True)\ntime.sleep(60)\n")
    program.chmod(0o755)
    steady = python("import time; print('up', flush=True); time.sleep(60)")
    watched = supervisor(
        {"web": [str(program)], "worker": steady}, ready={"web": "up", "worker": "up"}, first_backoff=0.05
    )
    runner = in_background(watched)
    try:
        wait_until(lambda: all(c.output and c.output.ready.is_set() for c in watched.children), timeout=10, what="up")
        worker_pid = watched.children[1].process.pid
        program.rename(tmp_path / "web.away")
        watched.children[0].process.kill()
        wait_until(lambda: len(re.findall("web could not be started", "\n".join(said(watched)))) >= 3, timeout=10,
                   what="three refused restarts")  # fmt: skip
        assert runner.is_alive() and watched.failed is None, "the supervisor goes on"
        assert watched.children[1].process.pid == worker_pid and watched.children[1].process.poll() is None
        (tmp_path / "web.away").rename(program)
        wait_until(lambda: "web restarted" in "\n".join(said(watched)), timeout=10, what="the restart")
    finally:
        watched.request_stop()
        runner.join(10)

    assert watched.returned == 0
    refused = re.findall(
        r"web could not be started \(.*No such file.*\); restarting it in ([\d.]+)s", "\n".join(said(watched))
    )
    assert [float(delay) for delay in refused[:3]] == [0.1, 0.2, 0.4], "backing off as after a death"


def test_each_childs_output_passes_through_the_script_unchanged_to_its_stdout_and_stderr():
    raw_out = b"caf\xc3\xa9 \xff\xfe bytes\r\nno newline at the end"
    raw_err = b"a line on stderr\n\x1b[31mcoloured\x1b[0m\n"
    child = python(
        f"import os, time; os.write(1, {raw_out!r}); os.write(2, {raw_err!r}); print('ready', flush=True); "
        "time.sleep(60)"
    )
    spec = {"commands": {"web": child}, "env": {}, "cwd": os.getcwd(), "stop_timeout": 5, "ready": {"web": "ready"},
            "embedded": []}  # fmt: skip
    script = subprocess.Popen(
        [sys.executable, str(ROOT / "agentos_project" / "supervisor.py")],
        env={**os.environ, SPEC: json.dumps(spec)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(2)
    script.send_signal(signal.SIGTERM)
    out, err = script.communicate(timeout=20)

    assert script.returncode == 0
    assert out == raw_out + b"ready\n"
    assert err == raw_err


def test_a_killed_child_is_restarted_and_a_stop_signal_ends_every_child_and_its_group():
    parent = python(
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "time.sleep(60)"
    )
    watched = supervisor({"worker": parent})
    runner = in_background(watched)
    first = wait_until(lambda: watched.children[0].process, timeout=10, what="the child")
    time.sleep(0.5)

    first.send_signal(signal.SIGKILL)
    second = wait_until(
        lambda: (p := watched.children[0].process) is not first and p, timeout=10, what="the restarted child"
    )
    [grandchild] = wait_until(lambda: psutil.Process(second.pid).children(), timeout=10, what="the grandchild")
    watched.request_stop()
    runner.join(10)

    lines = said(watched)
    assert f"worker (pid {first.pid}) was killed by SIGKILL; restarting it in 1s" in lines
    assert f"worker restarted (pid {second.pid}, restart 1)" in lines
    assert second.poll() == -signal.SIGTERM and watched.returned == 0
    assert psutil.wait_procs([grandchild], timeout=5)[1] == [], "its process group too"


def _nice_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def _autogroup_nice(pid: int) -> str:
    return Path(f"/proc/{pid}/autogroup").read_text().split()[-1]


def test_a_child_given_a_nice_runs_below_the_supervisor_thread_by_thread_and_its_session_too():
    threads = python("import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)")
    watched = supervisor({"worker": threads, "web": threads}, nice={"worker": 7})
    runner = in_background(watched)
    try:
        worker, web = (wait_until(lambda c=c: c.process, timeout=10, what="the child") for c in watched.children)
        wait_until(lambda: len(os.listdir(f"/proc/{worker.pid}/task")) == 2, timeout=10, what="the second thread")

        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert {_nice_of(int(tid)) for tid in os.listdir(f"/proc/{worker.pid}/task")} == {mine + 7}
        assert _nice_of(web.pid) == mine, "only the child named"
        if os.path.exists(f"/proc/{worker.pid}/autogroup"):
            assert (_autogroup_nice(worker.pid), _autogroup_nice(web.pid)) == ("7", "0")
        assert not [line for line in said(watched) if "CPU priority" in line]
    finally:
        watched.request_stop()
        runner.join(10)


def test_lowering_the_priority_of_a_process_that_is_gone_says_so():
    gone = psutil.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    gone.wait()

    assert lower_priority(gone.pid, 5) is False
