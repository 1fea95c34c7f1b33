"""Keeps the processes of `serve` (web, worker) alive, and stops them together (CONTRACT 12).

`manage.py serve` prepares (embedded servers, migrations) and then replaces itself with this file run as a script,
`main`: the supervisor of a running serve holds no Django, only the standard library.

A child that dies is restarted after a back-off of 1 s, doubling up to 30 s while it keeps dying young (it is
reset once a child has lived a minute), and each death and restart is logged. Only SIGINT or SIGTERM, or a
child that died `max_deaths` times within `window` seconds, stops the whole: every child gets SIGTERM (a worker
drains its runs), and whatever is still alive after `stop_timeout` seconds gets SIGKILL.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

STABLE_SECONDS = 60.0


@dataclasses.dataclass
class Child:
    name: str
    command: list[str]
    nice: int = 0  # how much lower than the supervisor's its CPU priority is (see `lower_priority`)
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    young_deaths: int = 0
    deaths: collections.deque = dataclasses.field(default_factory=collections.deque)


def describe(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


class Supervisor:
    def __init__(
        self,
        commands: dict[str, list[str]],
        *,
        env: dict[str, str],
        nice: dict[str, int] | None = None,
        cwd: str,
        log: Callable[[str], None],
        stop_timeout: float,
        max_deaths: int = 5,
        window: float = 60.0,
        first_backoff: float = 1.0,
        max_backoff: float = 30.0,
    ):
        nice = nice or {}
        self.children = [Child(name, command, nice.get(name, 0)) for name, command in commands.items()]
        self.env, self.cwd, self.log = env, cwd, log
        self.stop_timeout = stop_timeout
        self.max_deaths, self.window = max_deaths, window
        self.first_backoff, self.max_backoff = first_backoff, max_backoff
        self.stop_signal: int | None = None
        self.failed: Child | None = None

    def run(self, *, handle_signals: bool = True) -> int:
        """Start every child and tend them until a stop signal (exit code 0) or a child that keeps dying (1)."""
        if handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda signum, _frame: self.request_stop(signum))
        for child in self.children:
            self._start(child)
        while self.stop_signal is None and self.failed is None:
            now = time.monotonic()
            for child in self.children:
                self._tend(child, now)
            time.sleep(0.1)
        self.stop_all()
        return 1 if self.failed else 0

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        self.stop_signal = signum

    def _start(self, child: Child) -> None:
        child.process = subprocess.Popen(child.command, env=self.env, cwd=self.cwd, start_new_session=True)
        child.started_at, child.restart_at = time.monotonic(), None
        if child.nice and not lower_priority(child.process.pid, child.nice):
            self.log(f"{child.name} (pid {child.process.pid}) runs at the normal CPU priority: lowering it was refused")

    def _tend(self, child: Child, now: float) -> None:
        if child.restart_at is not None:
            if now >= child.restart_at:
                self._start(child)
                self.log(f"{child.name} restarted (pid {child.process.pid})")
            return
        code = child.process.poll()
        if code is None:
            return
        child.deaths.append(now)
        while child.deaths and child.deaths[0] < now - self.window:
            child.deaths.popleft()
        if len(child.deaths) >= self.max_deaths:
            self.log(
                f"{child.name} (pid {child.process.pid}) {describe(code)}, its {len(child.deaths)}th death within "
                f"{self.window:g}s; stopping everything"
            )
            self.failed = child
            return
        child.young_deaths = 1 if now - child.started_at >= STABLE_SECONDS else child.young_deaths + 1
        delay = min(self.max_backoff, self.first_backoff * 2 ** (child.young_deaths - 1))
        self.log(f"{child.name} (pid {child.process.pid}) {describe(code)}; restarting it in {delay:g}s")
        child.restart_at = now + delay

    def stop_all(self) -> None:
        """SIGTERM to every live child's process group, then SIGKILL to what outlives `stop_timeout`."""
        alive = [c.process for c in self.children if c.process is not None and c.process.poll() is None]
        for process in alive:
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for process in alive:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()


def lower_priority(pid: int, nice: int) -> bool:
    """Lower the CPU priority of the process group `pid` leads (a child started in a session of its own) by `nice`;
    False when the system refused.

    Two settings, because Linux weighs CPU time at two levels. With autogroups on (the default of desktop and many
    server kernels), the scheduler first shares the CPU between sessions, equally whatever the nice of their
    processes, and a process's nice only counts against the other processes of its session: so the session's
    own nice (`/proc/<pid>/autogroup`) is what lowers the child against the web server, PostgreSQL and the
    clients, each in a session of its own. Without autogroups, the processes' nice does it (`PRIO_PGRP` reaches
    every thread of the group; threads started later inherit it)."""
    try:
        os.setpriority(os.PRIO_PGRP, pid, os.getpriority(os.PRIO_PROCESS, 0) + nice)
    except OSError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/autogroup", "w") as autogroup:
        autogroup.write(str(min(19, nice)))
    return True


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


SPEC = "AGENTOS_SUPERVISOR_SPEC"


def main() -> int:
    """Run the supervisor `serve` described in the environment variable SPEC (JSON: commands, what their
    environment adds to this one's, cwd, stop_timeout, and the embedded servers to stop last), then stop those
    servers; returns the exit status."""
    spec = json.loads(os.environ.pop(SPEC))
    supervisor = Supervisor(
        spec["commands"],
        env={**os.environ, **spec["env"]},
        cwd=spec["cwd"],
        log=lambda line: print(f"agentos serve: {line}", file=sys.stderr, flush=True),
        stop_timeout=spec["stop_timeout"],
        nice=spec.get("nice"),
    )
    try:
        return supervisor.run()
    finally:
        for server in reversed(spec["embedded"]):
            stop_embedded(server)


def stop_embedded(server: dict) -> None:
    """Stop an embedded server `serve` started: PostgreSQL with its pg_ctl, Redis with SHUTDOWN NOSAVE."""
    if server["kind"] == "postgres":
        if Path(server["pidfile"]).exists():
            subprocess.run(server["stop"], user=server["user"], capture_output=True, start_new_session=True)
        return
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", server["port"]), timeout=2) as redis:
        redis.sendall(_resp("AUTH", server["password"]) + _resp("SHUTDOWN", "NOSAVE"))
        with contextlib.suppress(OSError):
            redis.recv(1024)
    if server.get("pid"):
        _reap(server["pid"], timeout=5)


def _resp(*words: str) -> bytes:
    encoded = [word.encode() for word in words]
    return b"".join([b"*%d\r\n" % len(encoded), *(b"$%d\r\n%s\r\n" % (len(w), w) for w in encoded)])


def _reap(pid: int, *, timeout: float) -> None:
    """Wait for the child `pid` to exit (SIGKILL after `timeout`)."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
