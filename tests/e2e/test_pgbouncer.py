"""Workers through PgBouncer in transaction mode (docs/operations.md, "PgBouncer"): four worker processes of 32
threads share 20 server connections, with `AGENTOS_DB_PREPARE=false`, and drain without an error."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from django.db import connection

from queueing.models import Ticket
from runs.models import Run
from tests.support.http import free_port
from tests.support.runs import submit_background
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
SERVER_CONNECTIONS = 20


class PgBouncer:
    """Debian's pgbouncer in transaction mode on `port`, in front of the test's PostgreSQL, at most
    SERVER_CONNECTIONS server connections to its database."""

    def __init__(self, port: int):
        settings = connection.settings_dict
        # The clients are trusted; the server (the embedded one of `make test` wants a password) is logged in to
        # with the test's own credentials.
        quoted = str(settings.get("PASSWORD") or "").replace("\\", "\\\\").replace("'", "\\'")
        password = f" user={settings['USER']} password='{quoted}'" if quoted else ""  # a password needs its user
        self.port = port
        self.directory = Path(tempfile.mkdtemp(prefix="agentos-pgbouncer-"))
        (self.directory / "users.txt").write_text(f'"{settings["USER"]}" ""\n')
        (self.directory / "pgbouncer.ini").write_text(
            f"""[databases]
* = host={settings["HOST"] or "127.0.0.1"} port={settings["PORT"] or 5432}{password}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {self.directory}/users.txt
pool_mode = transaction
default_pool_size = {SERVER_CONNECTIONS}
max_db_connections = {SERVER_CONNECTIONS}
max_client_conn = 2000
ignore_startup_parameters = extra_float_digits
logfile = {self.directory}/pgbouncer.log
pidfile = {self.directory}/pgbouncer.pid
"""
        )
        user = []
        if os.geteuid() == 0:  # pgbouncer will not run as root: as postgres, owning its folder (log, pid file)
            entry = pwd.getpwnam(_system_user())
            for path in (self.directory, *self.directory.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            user = ["-u", entry.pw_name]
        command = [PGBOUNCER, *user, str(self.directory / "pgbouncer.ini")]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._listening, timeout=10, what="pgbouncer to listen")

    def _listening(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def url(self) -> str:
        settings = connection.settings_dict
        return f"postgresql://{settings['USER']}@127.0.0.1:{self.port}/{settings['NAME']}"

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


def _system_user() -> str:
    """A system user to run pgbouncer as: Debian's package makes `postgres`; else `nobody`."""
    try:
        return pwd.getpwnam("postgres").pw_name
    except KeyError:
        return "nobody"


@pytest.fixture
def pgbouncer():
    if not os.path.exists(PGBOUNCER):
        missing = "pgbouncer is not installed (apt-get install pgbouncer; .ci/run installs it)"
        if os.environ.get("AGENTOS_REQUIRE_PGBOUNCER"):
            pytest.fail(missing)
        pytest.skip(missing)
    bouncer = PgBouncer(free_port())
    yield bouncer
    bouncer.stop()


def client_backends_of(database: str) -> dict[int, str]:
    """The server's client connections to `database` (pid: where from and what it did last), the caller's own left
    out. Only client backends: an autovacuum worker on the database (on by default in the embedded server of
    `make test`) is no client."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, concat_ws(' ', client_addr, client_port, backend_start, left(query, 60)) FROM pg_stat_activity"
            " WHERE datname = %s AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
            [database],
        )
        return dict(cursor.fetchall())


def test_four_workers_of_32_threads_drain_through_20_server_connections(pgbouncer, start_worker, start_sweeper, api):
    sessions, per_session = 200, 4
    runs = [
        (submit_background(api, f"bouncer-{s}", f"turn {k} sleep=0.05"), f"bouncer-{s}")
        for k in range(per_session)
        for s in range(sessions)
    ]  # all queued before a worker starts: the drain below is the workers' alone
    through = {"DATABASE_URL": pgbouncer.url(), "AGENTOS_DB_PREPARE": "false"}
    database = connection.settings_dict["NAME"]
    # Connections this test process holds already (threads of earlier tests, the accept's) are not the workers'.
    before = client_backends_of(database)
    started = time.monotonic()
    workers = [start_worker(concurrency=32, ready=False, **through) for _ in range(4)]
    start_sweeper(**through)
    most: dict[int, str] = {}

    def drained() -> bool:
        nonlocal most
        now = {pid: seen for pid, seen in client_backends_of(database).items() if pid not in before}
        most = max(most, now, key=len)
        return Run.objects.filter(pk__in=[run_id for run_id, _ in runs], status="COMPLETED").count() == len(runs)

    wait_until(drained, timeout=300, interval=0.1, what=f"{len(runs)} runs through pgbouncer to complete")
    seconds = time.monotonic() - started
    print(f"\n{len(runs)} runs through pgbouncer in {seconds:.1f} s, {len(most)} server connections at most")

    assert Ticket.objects.filter(pk__in=[run_id for run_id, _ in runs]).exclude(status="completed").count() == 0
    for run_id, session_id in runs[-sessions:]:  # each session's last turn saw the three before it
        assert Run.objects.get(pk=run_id).content.endswith("(history: 6 messages)"), session_id
    # every connection the workers and the sweeper made goes through pgbouncer
    assert 4 < len(most) <= SERVER_CONNECTIONS, "\n".join(most.values())
    for worker in workers:
        log = worker.log()
        assert " ready." in log
        assert "Traceback" not in log and " ERROR " not in log and "PoolExhausted" not in log, log[-3000:]
