"""Request bodies through the real ASGI server: chunked bodies are read, no body beyond 1 MiB is kept, and none is
waited for beyond the body timeout."""

import json
import select
import socket
import time

import psutil
import pytest
import requests

from runs.models import Run
from tests.support.waiting import wait_until

from .conftest import exchange

pytestmark = pytest.mark.slow
REFUSED = {"detail": "Request body exceeds the 1 MiB limit"}
TOO_SLOW = {"detail": "Request body not received within 2 s"}


def web_process(serve) -> psutil.Process:
    return next(p for p in psutil.Process(serve.pid).children() if "uvicorn" in " ".join(p.cmdline()))


def raw_request(serve, head: str, body_chunks=(), *, chunked: bool = True) -> tuple[int, dict, int]:
    """Send `head` then each chunk (chunked encoding) until the server answers; returns (status, body, sent)."""
    with socket.create_connection(("127.0.0.1", serve.port), timeout=30) as sock:
        sock.sendall(head.encode())
        sent = 0
        try:
            for chunk in body_chunks:
                if select.select([sock], [], [], 0)[0]:
                    break  # the server has answered already
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                sent += len(chunk)
            else:
                if chunked:
                    sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = b""
        while b"\r\n\r\n" not in response or len(response.split(b"\r\n\r\n", 1)[1]) < _length(response):
            try:
                data = sock.recv(65536)
            except ConnectionResetError:  # the server closed with body unread; what it answered came first
                break
            if not data:
                break
            response += data
    status_line, _, rest = response.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.split(b"\r\n\r\n", 1)[1]), sent


def _length(response: bytes) -> int:
    for line in response.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def head(serve, *, length: int | None = None) -> str:
    size = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (
        f"POST /agents/stub-agent/runs HTTP/1.1\r\nHost: 127.0.0.1:{serve.port}\r\n"
        f"Content-Type: application/json\r\n{size}\r\n\r\n"
    )


def test_a_chunked_submit_is_read_and_accepted(start_serve):
    serve = start_serve()
    body = json.dumps({"message": "chunked sleep=0", "session_id": "chunked-1", "background": True, "stream": False})
    chunks = [body[:10].encode(), body[10:30].encode(), body[30:].encode()]

    status, answer, _ = raw_request(serve, head(serve), chunks)

    assert (status, answer["session_id"], answer["status"]) == (202, "chunked-1", "PENDING")
    run = wait_until(lambda: Run.objects.filter(pk=answer["run_id"], status="COMPLETED").first(), timeout=20)
    assert run.content == "echo: chunked sleep=0 (history: 0 messages)"


def test_a_64_mib_chunked_body_is_refused_after_1_mib_with_server_memory_flat(start_serve):
    serve = start_serve()
    web = web_process(serve)
    before = web.memory_info().rss
    megabyte = b"x" * (1024 * 1024)

    status, answer, sent = raw_request(serve, head(serve), (megabyte for _ in range(64)))

    assert (status, answer) == (413, REFUSED)
    assert sent < 64 * len(megabyte), "the server answered before the client finished"
    assert web.memory_info().rss - before < 16 * 1024 * 1024
    assert Run.objects.count() == 0
    assert serve.get("/health")["status"] == "ok"


def test_a_declared_length_over_1_mib_is_refused_before_the_body_is_sent(start_serve):
    serve = start_serve()

    started = time.monotonic()
    status, answer, _ = raw_request(serve, head(serve, length=64 * 1024 * 1024), chunked=False)

    assert (status, answer) == (413, REFUSED), "answered without a byte of the body"
    assert time.monotonic() - started < 5, "not after waiting for the body"
    assert Run.objects.count() == 0


def test_a_multipart_body_another_boundary_frames_is_refused_and_runs_nothing(start_web):
    web = start_web()
    fields = {"message": "hi sleep=0", "background": "true", "stream": "false", "session_id": "mp-e2e"}
    parts = [f'--BBB\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    body = ("".join(parts) + "--BBB--\r\n").encode()

    response = requests.post(
        f"{web.url}/agents/stub-agent/runs",
        data=body,
        headers={"Content-Type": "multipart/form-data; boundary=AAA"},
        timeout=30,
    )

    assert (response.status_code, response.headers["Content-Type"]) == (422, "application/json"), response.text
    assert response.json()["detail"] == [
        {
            "type": "multipart_invalid",
            "loc": ["body"],
            "msg": "Multipart body is not framed by the boundary it declares",
            "input": None,
        }
    ]
    assert Run.objects.count() == 0


def test_a_body_that_stops_coming_is_answered_408_and_its_connection_closed(start_serve):
    serve = start_serve(AGENTOS_BODY_TIMEOUT_SECONDS="2")

    chunked = exchange(serve.port, [head(serve).encode(), b"5\r\nhello\r\n"], timeout=15)
    declared = exchange(serve.port, [head(serve, length=100).encode(), b"x" * 10], timeout=15)

    for reply in (chunked, declared):
        assert (reply.status, reply.body, reply.closed) == (408, TOO_SLOW, True)
        assert 1.5 < reply.seconds < 5, "at the deadline"
    assert Run.objects.count() == 0


def test_a_trickled_body_is_answered_408_at_the_deadline_whatever_server_runs_the_app(start_web):
    web = start_web(plain=True, AGENTOS_BODY_TIMEOUT_SECONDS="2")

    def trickle():
        yield head(web).encode()
        for _ in range(100):
            yield b"1\r\nx\r\n"
            time.sleep(0.2)

    reply = exchange(web.port, trickle(), timeout=30)

    assert (reply.status, reply.body, reply.closed) == (408, TOO_SLOW, True)
    assert reply.seconds < 5
