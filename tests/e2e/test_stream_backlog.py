"""A client that stops reading its stream (CONTRACT 10): the web process holds a bounded backlog for it, then closes
the stream with an `error` frame that says where to resume from, and `/resume` gives the rest."""

from __future__ import annotations

import json
import socket
import time

import pytest
import requests

from tests.support.http import sse_frames
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
RUNS = "/agents/stub-agent/runs"
BACKLOG = 16 * 1024


def words(count: int) -> str:
    return " ".join(f"w{n}" for n in range(count))


def idle_stream(port: int, fields: dict) -> socket.socket:
    """A streamed submit whose client reads nothing yet, with a receive buffer as small as the kernel allows."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    client.connect(("127.0.0.1", port))
    body = "&".join(f"{key}={requests.utils.quote(value)}" for key, value in fields.items()).encode()
    head = (
        f"POST {RUNS} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    client.sendall(head.encode() + body)
    return client


def read_all(client: socket.socket) -> bytes:
    client.settimeout(30)
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received


def frames_of(raw: bytes) -> list[tuple[str, dict]]:
    """The SSE frames of a whole chunked HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    text = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        length = int(size, 16)
        if length == 0:
            break
        text, body = text + rest[:length], rest[length + 2 :]
    frames = []
    for block in text.decode().split("\n\n"):
        if block and not block.startswith(":"):
            fields = dict(line.split(": ", 1) for line in block.split("\n"))
            frames.append((fields["event"], json.loads(fields["data"])))
    return frames


def test_a_client_that_stops_reading_is_closed_with_an_error_frame_and_can_resume(start_web, start_worker):
    start_worker()
    web = start_web(AGENTOS_STREAM_BACKLOG_BYTES=str(BACKLOG))
    message = f"{words(30000)} sleep=0"
    client = idle_stream(web.port, {"message": message, "session_id": "backlog-1", "background": "true"})
    run_id = wait_until(
        lambda: requests.get(f"{web.url}/queue/jobs", params={"session_id": "backlog-1"}, timeout=5).json()["data"],
        timeout=20,
        what="the run to be accepted",
    )[0]["id"]
    wait_until(lambda: web.poll(run_id, "backlog-1")["status"] == "COMPLETED", timeout=60, what="the run to end")
    time.sleep(0.5)  # what the run published has reached the web process

    frames = frames_of(read_all(client))
    client.close()
    resumed = list(
        sse_frames(web.post(f"{RUNS}/{run_id}/resume", streaming=True, session_id="backlog-1", last_event_index=-1))
    )

    *events, (last_name, last) = frames
    assert last_name == "error"
    assert last["error"].startswith("Stream closed: the client fell behind the run's events.")
    assert [data["event_index"] for _, data in events] == list(range(last["last_event_index"] + 1))
    assert 0 < len(events) < len(message.split(" "))
    assert resumed[-1][0] == "RunCompleted"
    tail = [data for name, data in resumed if data.get("event_index", -1) > last["last_event_index"]]
    assert tail[-1]["event_index"] == len(message.split(" ")) + 5
