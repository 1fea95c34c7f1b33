"""Request heads (the request line and header fields) through the real web server: a head over its size or its
count of fields is answered 431 as it arrives, with the server's memory flat, whichever server runs the app."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
import requests

from tests.support.http import sse_frames

from .conftest import exchange

pytestmark = pytest.mark.slow
TOO_LARGE = {"detail": "Request headers exceed the 64 KiB limit"}
MIB = 1024 * 1024
SECRET = "a-string-secret-at-least-256-bits-long"


def get(*fields: str, path: str = "/health") -> bytes:
    """A GET's head with `fields` ("Name: value") after its Host."""
    return "".join(f"{line}\r\n" for line in (f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *fields, "")).encode()


def huge_head(size: int, field: str = "X-Padding: ", path: str = "/health"):
    """A GET whose one header field (`field` begins it) has `size` bytes more, sent 64 KiB at a time."""
    yield f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{field}".encode()
    for _ in range(size // (64 * 1024)):
        yield b"a" * (64 * 1024)
    yield b"\r\n\r\n"


def web_process(serve) -> psutil.Process:
    return next(p for p in psutil.Process(serve.pid).children() if "uvicorn" in " ".join(p.cmdline()))


def test_eight_32_mib_heads_are_refused_431_as_they_arrive_with_the_memory_flat(start_serve):
    serve = start_serve()
    web = web_process(serve)
    before = web.memory_info().rss
    replies = [None] * 8

    def attack(n: int) -> None:
        replies[n] = exchange(serve.port, huge_head(32 * MIB))

    attackers = [threading.Thread(target=attack, args=(n,)) for n in range(8)]
    for attacker in attackers:
        attacker.start()
    for attacker in attackers:
        attacker.join()

    assert [(reply.status, reply.body, reply.closed) for reply in replies] == [(431, TOO_LARGE, True)] * 8
    assert max(reply.sent for reply in replies) < 32 * MIB, "refused as the head arrived, not once it was whole"
    assert (web.memory_info().rss - before) / MIB < 16
    assert serve.get("/health")["status"] == "ok"


def test_a_head_of_more_than_100_fields_is_refused_431(start_web):
    web = start_web()
    fields = [f"X-Field-{n}: {n}" for n in range(100)]  # and Host: 101

    refused = exchange(web.port, [get(*fields)])
    served = exchange(web.port, [get(*fields[:99])])

    assert (refused.status, refused.body, refused.closed) == (
        431,
        {"detail": "Request has more than 100 header fields"},
        True,
    )
    assert (served.status, served.body["status"]) == (200, "ok")


def test_uvicorn_run_by_hand_refuses_such_heads_too_with_the_limits_set(start_web):
    web = start_web(plain=True, AGENTOS_MAX_HEADER_BYTES="8192", AGENTOS_MAX_HEADERS="20")

    large = exchange(web.port, [get(f"X-Padding: {'a' * 8192}")])
    many = exchange(web.port, [get(*(f"X-Field-{n}: {n}" for n in range(20)))])
    served = exchange(web.port, [get(f"X-Padding: {'a' * 7000}", *(f"X-Field-{n}: {n}" for n in range(18)))])

    assert (large.status, large.body) == (431, {"detail": "Request headers exceed the 8 KiB limit"})
    assert (many.status, many.body) == (431, {"detail": "Request has more than 20 header fields"})
    assert (served.status, served.body["status"]) == (200, "ok")


def test_an_authorization_header_over_16_kib_is_refused_431_before_any_token_is_verified(start_web):
    web = start_web(AGENTOS_JWT_VERIFICATION_KEYS=SECRET, AGENTOS_JWT_ALGORITHM="HS256")

    refused = exchange(web.port, [get(f"Authorization: Bearer {'a' * (16 * 1024)}", path="/config")])
    verified = exchange(web.port, [get(f"Authorization: Bearer {'a' * (16 * 1024 - 7)}", path="/config")])
    huge = exchange(web.port, huge_head(8 * MIB, "Authorization: Bearer ", "/config"))

    assert (refused.status, refused.body, refused.closed) == (
        431,
        {"detail": "Authorization header exceeds the 16 KiB limit"},
        True,
    )
    assert verified.status == 401, "a token of 16 KiB is still verified (and refused)"
    assert (huge.status, huge.body) == (431, TOO_LARGE)


def trickled(head: bytes, *, every: float):
    """`head` a byte at a time, `every` seconds apart."""
    for byte in head:
        yield bytes([byte])
        time.sleep(every)


def test_a_head_sent_slower_than_the_header_timeout_is_answered_408_and_closed(start_web):
    web = start_web(AGENTOS_HEADER_TIMEOUT_SECONDS="2")

    slow = exchange(web.port, trickled(get("X-Slow: " + "s" * 100), every=0.1), timeout=15)
    silent = exchange(web.port, [], timeout=15)
    served = exchange(web.port, [get()])

    assert (slow.status, slow.body, slow.closed) == (408, {"detail": "Request headers not received within 2 s"}, True)
    assert 1.5 < slow.seconds < 5, "at the deadline"
    assert (silent.status, silent.closed) == (None, True), "a connection that sent nothing is closed, unanswered"
    assert 1.5 < silent.seconds < 5
    assert (served.status, served.closed) == (200, False)


def test_a_response_and_its_stream_outlast_the_header_and_body_timeouts(start_web):
    web = start_web(AGENTOS_HEADER_TIMEOUT_SECONDS="1", AGENTOS_BODY_TIMEOUT_SECONDS="1")

    with requests.Session() as session:
        streamed = session.post(
            f"{web.url}/agents/stub-agent/runs", data={"message": "slow sleep=3", "stream": "true"}, stream=True
        )
        frames = [name for name, _ in sse_frames(streamed)]
        time.sleep(2)  # idle on the kept-alive connection: uvicorn's keep-alive timeout's, not the head's
        again = session.get(f"{web.url}/health", timeout=5)

    assert frames[0] == "RunStarted" and frames[-1] == "RunCompleted"
    assert again.status_code == 200
