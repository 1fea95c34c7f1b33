"""Keeps the processes of `serve` (web, worker) alive, and stops them together (CONTRACT 12).

`manage.py serve` prepares (embedded servers, migrations), then replaces itself with this file run as a script
(`main`), which holds no Django. Each child's stdout and stderr pass through unchanged; a child is *ready* once it
wrote its ready text (uvicorn's "Uvicorn running on", Celery's " ready."), and its last lines until then are kept.
A child that dies is logged and restarted after 1 s, doubling up to 30 s while it keeps dying young (reset after a
minute alive); it finds its restart count in its environment (RESTARTS, shown in `/metrics`). A child once ready is
restarted for ever; one that died `max_tries` times never ready (a configuration error) stops the whole, as SIGINT
or SIGTERM do: SIGTERM to every child (a worker drains its runs), SIGKILL to what lives after `stop_timeout`
seconds, and the failed child's last lines printed last.
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
import threading
import time
from pathlib import Path
from typing import BinaryIO

if __package__:
    from . import logs
    from .core import resp
    from .passthrough import ChildOutput
else:  # run as a script, as serve runs it: this folder is on sys.path, and the package (which loads Celery) is not
    import logs
    from core import resp
    from passthrough import ChildOutput

STABLE_SECONDS = 60.0
TAIL_LINES = 20
CHILD, RESTARTS = "AGENTOS_SERVE_CHILD", "AGENTOS_SERVE_RESTARTS"
LOGGER = "agentos.serve"  # the logger its lines name in the json format


@dataclasses.dataclass
class Child:
    name: str
    command: list[str]
    nice: int = 0  # how much lower than the supervisor's its CPU priority is (see `lower_priority`)
    ready_line: str | None = None  # what the child writes once it is ready (None: ready once started)
    process: subprocess.Popen | None = None
    output: ChildOutput | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    restarts: int = 0
    young_deaths: int = 0  # deaths in a row, each within STABLE_SECONDS of its start: the back-off's exponent
    unready_deaths: int = 0  # deaths before the child was ever ready
    ever_ready: bool = False
    tail: collections.deque = dataclasses.field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


class Supervisor:
    def __init__(
        self,
        commands: dict[str, list[str]],
        *,
        env: dict[str, str],
        cwd: str,
        stop_timeout: float,
        nice: dict[str, int] | None = None,
        ready: dict[str, str] | None = None,
        streams: tuple[BinaryIO, BinaryIO] | None = None,
        log_format: str = "text",
        max_tries: int = 5,
        first_backoff: float = 1.0,
        max_backoff: float = 30.0,
    ):
        nice, ready = nice or {}, ready or {}
        self.children = [Child(name, command, nice.get(name, 0), ready.get(name)) for name, command in commands.items()]
        self.env, self.cwd = env, cwd
        self.streams = streams or (sys.stdout.buffer, sys.stderr.buffer)
        self.locks = (threading.Lock(), threading.Lock())  # one writer at a time on each of our streams
        self.log_format = log_format
        self.stop_timeout = stop_timeout
        self.max_tries = max_tries
        self.first_backoff, self.max_backoff = first_backoff, max_backoff
        self.stop_signal: int | None = None
        self.failed: Child | None = None

    def run(self, *, handle_signals: bool = True) -> int:
        """Start every child and tend them until a stop signal (exit code 0) or a child that never became ready
        dies for the `max_tries`th time (1)."""
        if handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda signum, _frame: self.request_stop(signum))
        try:
            for child in self.children:
                self._start(child, time.monotonic())
            while self.stop_signal is None and self.failed is None:
                now = time.monotonic()
                for child in self.children:
                    self._tend(child, now)
                time.sleep(0.1)
        finally:  # whatever happens here, no child outlives the supervisor holding its port
            self.stop_all()
        if self.failed:
            self.log(f"{self.failed.name}'s last lines of output:", level="ERROR", output=list(self.failed.tail))
        return 1 if self.failed else 0

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        self.stop_signal = signum

    def log(self, message: str, *, level: str = "INFO", output: list[str] | None = None) -> None:
        """One line of the supervisor's on our stderr, with `output` (a child's lines): in the json format one
        object with an `output` list, in the text format one line more for each."""
        if self.log_format == "json":
            fields = None if output is None else {"output": output}
            lines = [logs.json_line(created=time.time(), level=level, logger=LOGGER, message=message, fields=fields)]
        else:
            lines = [f"agentos serve: {message}", *(f"agentos serve: | {line}" for line in output or ())]
        with self.locks[1], contextlib.suppress(OSError, ValueError):
            self.streams[1].write("".join(f"{line}\n" for line in lines).encode())
            self.streams[1].flush()

    def _start(self, child: Child, now: float) -> bool:
        """Start `child`; False when the system refused (a fork, an exec or a thread refused under memory pressure,
        say): that counts as a death, and the start is tried again after the back-off."""
        env = {**self.env, CHILD: child.name, RESTARTS: str(child.restarts)}
        process = None
        try:
            process = subprocess.Popen(
                child.command, env=env, cwd=self.cwd, start_new_session=True, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )  # fmt: skip
            output = ChildOutput(process, self.streams, locks=self.locks, ready_line=child.ready_line, tail=child.tail)
        except (OSError, RuntimeError) as error:
            if process is not None:  # started, but what copies its output could not be
                _signal_group(process, signal.SIGKILL)
                process.wait()
            child.started_at = now  # a start refused is a death at once: the back-off doubles
            self._died(child, f"{child.name} could not be started ({error})", now)
            return False
        child.process, child.output = process, output
        child.started_at, child.restart_at = time.monotonic(), None
        if child.nice and not lower_priority(child.process.pid, child.nice):
            refused = f"{child.name} (pid {child.process.pid}) runs at the normal CPU priority: lowering it was refused"
            self.log(refused, level="WARNING")
        return True

    def _tend(self, child: Child, now: float) -> None:
        if child.restart_at is not None:
            if now >= child.restart_at:
                child.restarts += 1
                if self._start(child, now):
                    self.log(f"{child.name} restarted (pid {child.process.pid}, restart {child.restarts})")
            return
        if child.process is None:
            return
        code = child.process.poll()
        if code is not None:
            child.output.join(timeout=1.0)  # a ready line written just before the end counts, and the last lines
            self._died(child, f"{child.name} (pid {child.process.pid}) {describe_exit(code)}", now)

    def _died(self, child: Child, death: str, now: float) -> None:
        """Restart `child` after its back-off, or give up on it: it died (or could not be started, `death` says
        which) `max_tries` times, never ready."""
        child.ever_ready = child.ever_ready or (child.output is not None and child.output.ready.is_set())
        child.young_deaths = 1 if now - child.started_at >= STABLE_SECONDS else child.young_deaths + 1
        delay = min(self.max_backoff, self.first_backoff * 2 ** (child.young_deaths - 1))
        if not child.ever_ready:
            child.unready_deaths += 1
            if child.unready_deaths >= self.max_tries:
                given_up = f"{death} before it was ever ready, {self.max_tries} times in a row; stopping everything"
                self.log(given_up, level="ERROR")
                self.failed = child
                return
            death += f" before it was ready (try {child.unready_deaths} of {self.max_tries})"
        self.log(f"{death}; restarting it in {delay:g}s", level="WARNING")
        child.restart_at = now + delay

    def stop_all(self) -> None:
        """SIGTERM to every live child's process group, then SIGKILL to what outlives `stop_timeout`; returns once
        what they wrote has been copied."""
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
        for child in self.children:
            if child.output is not None:
                child.output.join(timeout=1.0)


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
        stop_timeout=spec["stop_timeout"],
        nice=spec.get("nice"),
        ready=spec.get("ready"),
        log_format=spec.get("log_format", "text"),
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
        redis.sendall(resp.command("AUTH", server["password"]) + resp.command("SHUTDOWN", "NOSAVE"))
        with contextlib.suppress(OSError):
            redis.recv(1024)
    if server.get("pid"):
        _reap(server["pid"], timeout=5)


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
