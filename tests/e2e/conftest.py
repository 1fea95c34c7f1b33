"""Fixtures of the end-to-end tests: a throwaway PostgreSQL, a headless Chromium driven by Selenium, and a raw HTTP
exchange over a socket (`exchange`) for what an HTTP client library refuses to send.

Chromium and its driver are Debian packages (`chromium`, `chromium-driver`) that `.ci/run` installs; without them
the browser tests are skipped, unless AGENTOS_REQUIRE_BROWSER is set (as `.ci/run` sets it), where they fail instead.
"""

import dataclasses
import json
import os
import select
import shutil
import socket
import time
from collections.abc import Iterable

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

from agentos_project.embedded import SHARED, EmbeddedPostgres
from tests.support.http import free_port

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    not (CHROMIUM and DRIVER) and not os.environ.get("AGENTOS_REQUIRE_BROWSER"),
    reason="needs the Debian packages chromium and chromium-driver",
)
# Without the networking flags Chromium floods the closed network (a fresh profile, each test its own).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,900",
]


@pytest.fixture
def throwaway_postgres(tmp_path):
    """A started embedded PostgreSQL of the test's own (its own port and data), stopped and removed afterwards."""
    postgres = EmbeddedPostgres(tmp_path / "run", f"postgresql://postgres@127.0.0.1:{free_port()}/agentos")
    postgres.start()
    yield postgres
    postgres.stop()
    remove_data(postgres)


def remove_data(postgres: EmbeddedPostgres) -> None:
    """A stopped embedded PostgreSQL's data. As root it may be under /var/lib/agentos-embedded/<digest>/postgres:
    the digest's folder goes too."""
    shutil.rmtree(
        postgres.pgdata.parent if postgres.pgdata.is_relative_to(SHARED) else postgres.pgdata, ignore_errors=True
    )


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium (mark the test `needs_browser`); fails when AGENTOS_REQUIRE_BROWSER is set and Chromium
    or its driver is missing."""
    if not (CHROMIUM and DRIVER):
        pytest.fail("AGENTOS_REQUIRE_BROWSER is set but chromium / chromedriver are not installed")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    yield driver
    driver.quit()


@dataclasses.dataclass(frozen=True)
class RawReply:
    """What the server did with a raw request: its answer (status None when it closed without one), the bytes the
    client had sent when it came, the seconds from connecting to it, and whether the server closed afterwards."""

    status: int | None
    body: object
    sent: int
    seconds: float
    closed: bool


def exchange(port: int, pieces: Iterable[bytes], *, timeout: float = 60) -> RawReply:
    """Connect to 127.0.0.1:`port` and send `pieces` in turn (a generator may pause between them), stopping as soon as
    the server has answered; then wait, the connection open, for its answer and for it to close or keep it."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sent = 0
        try:
            for piece in pieces:
                if select.select([sock], [], [], 0)[0]:
                    break  # the server has answered (or closed) already
                sock.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = _answer(sock)
        seconds = time.monotonic() - started
        closed = _closes(sock)
    if not answer:
        return RawReply(None, None, sent, seconds, closed)
    head, _, body = answer.partition(b"\r\n\r\n")
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = body.decode("latin1")
    return RawReply(int(head.split()[1]), parsed, sent, seconds, closed)


def _answer(sock: socket.socket) -> bytes:
    """An answer's bytes, as far as its Content-Length goes (nothing when the server closed without one)."""
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _content_length(answer):
        try:
            data = sock.recv(65536)
        except ConnectionResetError:  # the server closed with what it was sent unread; its answer came first
            break
        except TimeoutError:  # no answer within the exchange's timeout
            break
        if not data:
            break
        answer += data
    return answer


def _content_length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def _closes(sock: socket.socket) -> bool:
    """Whether the server closes the connection within 2 s."""
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
