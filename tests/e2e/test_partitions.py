"""Several hosts in one test, and partitions between them (issue 33): network namespaces joined by a bridge.

The database host is the root namespace: a PostgreSQL and a Redis of the test's own, listening on the bridge's
address. The web and two workers each run in a namespace of their own ("host"), a real `manage.py serve
--web-only` / `--worker-only`, reaching the database host over a veth pair plugged into the bridge. A partition
is a host's link set down on the bridge's side: its packets go nowhere and nothing tells either end (no reset),
as when a switch or a route fails; or, for Redis alone (on an address of its own), a route through a neighbour
that does not exist.
Needs root and `ip netns`; skipped with the reason where they cannot be made.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg2
import pytest

from agentos_project.embedded import EmbeddedPostgres
from tests.support.http import RunsOverHttp, free_port
from tests.support.processes import ChildProcess, process_env
from tests.support.waiting import wait_until

from .conftest import remove_data

pytestmark = pytest.mark.slow

SUBNET = "10.231.{}.{}"
GRACE = {"AGENTOS_LOCK_GRACE_SECONDS": "3", "AGENTOS_POLL_INTERVAL": "0.5"}


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _namespaces_possible() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    probe = f"agp{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "delete", probe, check=False)
    return None


class Network:
    """A bridge in the root namespace (the database host, .1) and a namespace per host, each with a veth pair."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(2)
        self.net = int(self.tag, 16) % 200 + 20  # 10.231.<net>.0/24, apart from other runs' networks
        self.bridge = f"agb{self.tag}"
        self.hosts: dict[str, str] = {}  # name -> address
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.address(1)}/24", "dev", self.bridge)
        _ip("addr", "add", f"{self.address(254)}/24", "dev", self.bridge)  # Redis's: cut apart from PostgreSQL's
        _ip("link", "set", self.bridge, "up")

    def address(self, host: int) -> str:
        return SUBNET.format(self.net, host)

    @property
    def database_host(self) -> str:
        return self.address(1)

    @property
    def redis_host(self) -> str:
        """The database host's second address, where Redis listens."""
        return self.address(254)

    def namespace(self, name: str) -> str:
        return f"ag{self.tag}{name}"

    def link(self, name: str) -> str:
        """The bridge's side of the host's veth pair: what a partition sets down."""
        return f"agv{self.tag}{name}"

    def add_host(self, name: str) -> str:
        namespace, outside, inside = self.namespace(name), self.link(name), f"agi{self.tag}{name}"
        address = self.address(len(self.hosts) + 2)
        _ip("netns", "add", namespace)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", namespace)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", inside)
        _ip("-n", namespace, "link", "set", inside, "up")
        self.hosts[name] = address
        return address

    def cut(self, name: str) -> None:
        """The host loses its link: nothing in or out, and neither end is told."""
        _ip("link", "set", self.link(name), "down")

    def mend(self, name: str) -> None:
        _ip("link", "set", self.link(name), "up")

    def cut_from(self, name: str, address: str) -> None:
        """The host's packets to `address` alone go nowhere: routed through a neighbour that does not exist, so
        they are dropped unanswered (that service is cut off; the others still answer)."""
        _ip("-n", self.namespace(name), "route", "add", f"{address}/32", "via", self.address(253))

    def mend_from(self, name: str, address: str) -> None:
        _ip("-n", self.namespace(name), "route", "del", f"{address}/32")

    def remove(self) -> None:
        for name in self.hosts:
            _ip("netns", "delete", self.namespace(name), check=False)
            _ip("link", "delete", self.link(name), check=False)
        _ip("link", "delete", self.bridge, check=False)


class BridgedPostgres(EmbeddedPostgres):
    """The embedded PostgreSQL, listening on the loopback (where it is made) and on the bridge (the hosts); its
    `url` is the bridge's once `start` made it."""

    def __init__(self, root: Path, bridge: str, port: int):
        super().__init__(root, f"postgresql://postgres@127.0.0.1:{port}/agentos")
        self.bridge = bridge

    def _start_server(self) -> None:
        self._pg_ctl("start", "-w", "-t", "60", "-o", f"-h 127.0.0.1,{self.bridge} -p {self.port} -k ''")

    @property
    def url(self) -> str:
        return super().url.replace("@127.0.0.1:", f"@{self.bridge}:")


class HostProcess(ChildProcess):
    """`manage.py serve` with `options`, run in a host's namespace; stopped like Ctrl-C."""

    stop_signal = signal.SIGINT

    def __init__(self, network: Network, host: str, options: list[str], env: dict[str, str], log: Path):
        namespace = ["ip", "netns", "exec", network.namespace(host)]
        super().__init__([*namespace, sys.executable, "manage.py", "serve", *options], log, env)


class Hosts:
    """The database host (PostgreSQL, Redis), and the web and worker hosts started on demand."""

    def __init__(self, network: Network, directory: Path):
        self.network, self.directory = network, directory
        self.processes: list[HostProcess] = []
        host = network.database_host
        self.postgres = BridgedPostgres(directory / "db", host, free_port(host))
        self.postgres.start()
        hba = self.postgres.pgdata / "pg_hba.conf"
        hba.write_text(hba.read_text() + f"host all all {network.address(0)}/24 scram-sha-256\n")
        self.postgres._pg_ctl("reload")
        redis_host = network.redis_host
        self.redis_port = free_port(redis_host)
        self.redis = subprocess.Popen(
            ["redis-server", "--bind", redis_host, "--port", str(self.redis_port), "--save", "", "--appendonly", "no",
             "--protected-mode", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(lambda: _answers(redis_host, self.redis_port), timeout=10, what="redis to listen")
        self.web = RunsOverHttp()  # its url once the web host is started

    @property
    def env(self) -> dict[str, str]:
        redis_url = f"redis://{self.network.redis_host}:{self.redis_port}/0"
        return process_env(DATABASE_URL=self.postgres.url, REDIS_URL=redis_url, CELERY_BROKER_URL=redis_url, **GRACE)

    def start_web(self) -> str:
        address = self.network.add_host("web")
        serve = HostProcess(self.network, "web", ["--web-only", "--host", address, "--port", "8000"], self.env,
                            self.directory / "web.log")  # fmt: skip
        self.processes.append(serve)
        self.web.url = f"http://{address}:8000"
        serve.wait_for(self.healthy, timeout=90, what="the web host to answer /health")
        return serve

    def healthy(self) -> bool:
        return self.web.get("/health") is not None

    def start_worker(self, name: str, **env: str) -> HostProcess:
        self.network.add_host(name)
        serve = HostProcess(self.network, name, ["--worker-only"], {**self.env, **env}, self.directory / f"{name}.log")
        self.processes.append(serve)
        serve.wait_for(lambda: " ready." in serve.log(), timeout=90, what=f"worker host {name} to be ready")
        return serve

    def sql(self, query: str, *args) -> list[tuple]:
        with psycopg2.connect(self.postgres.url) as connection, connection.cursor() as cursor:
            cursor.execute(query, args)
            return cursor.fetchall() if cursor.description else []

    def submit(self, session_id: str, message: str, *, max_attempts: int | None = None) -> str:
        run_id = self.web.submitted(session_id, message)
        if max_attempts is not None:  # the budget is the deployment's setting; this run gets its own
            self.sql("UPDATE queueing_ticket SET max_attempts = %s WHERE id = %s", max_attempts, run_id)
        return run_id

    def run(self, run_id: str) -> dict:
        (row,) = self.sql("SELECT status, attempt, content FROM runs_run WHERE run_id = %s", run_id)
        return dict(zip(("status", "attempt", "content"), row, strict=True))

    def wait_run(self, run_id: str, status: str, timeout: float) -> dict:
        wait_until(lambda: self.run(run_id)["status"] == status, timeout=timeout, interval=0.2,
                   what=f"run {run_id} to be {status}")  # fmt: skip
        return self.run(run_id)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.redis.terminate()
        self.redis.wait(10)
        self.postgres.stop()
        remove_data(self.postgres)


def _answers(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((host, port)) == 0


@pytest.fixture
def hosts(tmp_path):
    reason = _namespaces_possible()
    if reason and os.environ.get("AGENTOS_REQUIRE_NETNS"):
        pytest.fail(f"partition tests required (AGENTOS_REQUIRE_NETNS): {reason}")
    if reason:
        pytest.skip(reason)
    network = Network()
    try:
        made = Hosts(network, tmp_path)
        try:
            yield made
        finally:
            made.stop()
    finally:
        network.remove()


def test_a_worker_cut_off_mid_run_is_taken_over_and_its_late_writes_are_refused(hosts):
    """w1 loses its link two seconds into a 20 s model call; w2's sweeper finds the lease stale (grace 3 s) and w2
    runs attempt 2. The link comes back before w1's call ends: w1's settle then reaches the database, and the fence
    refuses it."""
    hosts.start_web()
    first = hosts.start_worker("w1")
    session = f"cut-{uuid.uuid4().hex[:6]}"
    victim = hosts.submit(session, "long sleep=20", max_attempts=2)
    hosts.wait_run(victim, "RUNNING", timeout=20)
    time.sleep(2)

    hosts.network.cut("w1")
    hosts.start_worker("w2")
    ticket = lambda: hosts.sql("SELECT status, attempt FROM queueing_ticket WHERE id = %s", victim)  # noqa: E731
    wait_until(lambda: ticket() == [("running", 2)], timeout=30, interval=0.2, what="w2 to take the run over")
    hosts.network.mend("w1")
    fenced = f"ticket={victim} attempt=1 fenced"
    first.wait_for(lambda: fenced in first.log(), timeout=60, what="the first attempt's late settle to be refused")
    done = hosts.wait_run(victim, "COMPLETED", timeout=60)

    assert done == {"status": "COMPLETED", "attempt": 2, "content": "echo: long sleep=20 (history: 0 messages)"}
    assert ticket() == [("completed", 2)]
    attempts = hosts.sql("SELECT DISTINCT attempt FROM runs_runevent WHERE run_id = %s", victim)
    assert attempts == [(2,)], "no event of the dead attempt in the stored stream"


def test_the_web_cut_off_from_redis_keeps_accepting_and_every_run_executes(hosts):
    """Accepts commit to PostgreSQL and answer at once: the broker's message goes from the web's publisher thread,
    which keeps trying, and a run without its message is published by the sweeper of a worker (no marker for 5 s),
    so the runs execute even before the web hears Redis again."""
    web = hosts.start_web()
    hosts.start_worker("w1")
    hosts.network.cut_from("web", hosts.network.redis_host)
    try:
        runs, seconds = [], []
        for n in range(10):
            started = time.monotonic()
            runs.append(hosts.submit(f"web-cut-{n}", "during the cut sleep=0"))
            seconds.append(time.monotonic() - started)
        print(f"\naccepts with the web cut off from Redis: slowest {max(seconds) * 1000:.0f} ms")
        assert max(seconds) < 2, "an accept waited on Redis"
        for run_id in runs:
            assert hosts.wait_run(run_id, "COMPLETED", timeout=60)["attempt"] == 1
        web.wait_for(lambda: "dispatch failed" in web.log(), timeout=30, what="the web to fail to reach Redis")
    finally:
        hosts.network.mend_from("web", hosts.network.redis_host)
    assert hosts.healthy()
    assert hosts.submit("web-mended", "after the cut sleep=0")


def test_a_worker_cut_off_from_the_broker_leaves_the_runs_to_another(hosts):
    hosts.start_web()
    cut_off = hosts.start_worker("w1")
    hosts.start_worker("w2")
    hosts.network.cut_from("w1", hosts.network.redis_host)
    try:
        runs = [hosts.submit(f"broker-cut-{n}", "while w1 hears no broker sleep=0") for n in range(10)]
        for run_id in runs:
            assert hosts.wait_run(run_id, "COMPLETED", timeout=60)["status"] == "COMPLETED"
        lost = "reading the execute queue failed"
        cut_off.wait_for(lambda: lost in cut_off.log(), timeout=30, what="w1 to fail to reach the broker")
    finally:
        hosts.network.mend_from("w1", hosts.network.redis_host)
