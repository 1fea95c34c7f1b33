"""The web process's ASGI handler (`agentos_project.handlers`), in process: a request's synchronous work is one
call on one of the shared threads, and a response with a body goes out after its request has finished."""

import asyncio
import threading

import pytest
from asgiref.testing import ApplicationCommunicator
from django.core import signals
from django.http import StreamingHttpResponse

from agentos_project.core.streaming import LastPart, PartsResponse
from agentos_project.handlers import SharedThreads, SyncChainHandler
from tests.support.conf import with_conf
from tests.support.http import AsgiServer


def http_scope(path: str) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }


def test_a_request_starts_and_finishes_on_one_shared_thread_before_its_answer_goes_out():
    seen = []
    application = SharedThreads(SyncChainHandler(), threads=2)

    async def call():
        communicator = ApplicationCommunicator(application, http_scope("/config"))

        def started(**_):
            seen.append(("started", threading.current_thread().name, communicator.output_queue.qsize()))

        def finished(**_):
            seen.append(("finished", threading.current_thread().name, communicator.output_queue.qsize()))

        signals.request_started.connect(started, weak=False)
        signals.request_finished.connect(finished, weak=False)
        try:
            await communicator.send_input({"type": "http.request", "body": b""})
            start = await communicator.receive_output(10)
            body = await communicator.receive_output(10)
            await communicator.wait(10)
        finally:
            signals.request_started.disconnect(started)
            signals.request_finished.disconnect(finished)
        return start, body

    start, body = asyncio.run(call())

    assert start["status"] == 200 and body["body"].startswith(b"{")
    [(first, thread, before_start), (last, same_thread, before_answer)] = seen
    assert (first, last) == ("started", "finished")
    assert thread == same_thread and thread.startswith("agentos-sync-")
    assert (before_start, before_answer) == (0, 0), "nothing was sent before the request finished"


@pytest.mark.django_db(transaction=True)
def test_a_streamed_requests_finish_comes_on_its_thread_before_its_body_and_not_again(redis_db):
    seen = []
    application = SharedThreads(SyncChainHandler(), threads=1)
    unknown = "00000000-0000-4000-8000-000000000000"
    scope = {**http_scope(f"/agents/stub-agent/runs/{unknown}/resume"), "method": "POST"}
    form = b"session_id=nobody&stream=true"
    form_headers = [(b"content-type", b"application/x-www-form-urlencoded"), (b"content-length", b"%d" % len(form))]
    scope["headers"] = [*scope["headers"], *form_headers]

    async def call():
        communicator = ApplicationCommunicator(application, scope)

        def finished(**_):
            seen.append((threading.current_thread().name, communicator.output_queue.qsize()))

        signals.request_finished.connect(finished, weak=False)
        try:
            await communicator.send_input({"type": "http.request", "body": form})
            messages = [await communicator.receive_output(10)]
            while messages[-1]["type"] == "http.response.start" or messages[-1].get("more_body"):
                messages.append(await communicator.receive_output(10))
            await communicator.wait(10)
        finally:
            signals.request_finished.disconnect(finished)
        return messages

    start, *body = asyncio.run(call())

    assert start["status"] == 200 and b"".join(m.get("body", b"") for m in body).startswith(b"event: error\n")
    assert seen == [("agentos-sync-0_0", 0)], "once, on the request's thread, before anything was sent"


@pytest.mark.parametrize("threads", [1, 3])
def test_requests_spread_over_as_many_threads_as_agentos_web_threads_says(threads):
    """Six requests at once, each held a moment in its synchronous part (so all six are handed out before one
    ends): they run on exactly `threads` threads, as many on each."""
    names = []

    def started(**_):
        names.append(threading.current_thread().name)
        threading.Event().wait(0.2)

    async def call():
        with with_conf("server", web_threads=threads):
            application = SharedThreads(SyncChainHandler())
        communicators = [ApplicationCommunicator(application, http_scope("/config")) for _ in range(6)]
        for communicator in communicators:
            await communicator.send_input({"type": "http.request", "body": b""})
        return [(await communicator.receive_output(10))["status"] for communicator in communicators]

    signals.request_started.connect(started, weak=False)
    try:
        statuses = asyncio.run(call())
    finally:
        signals.request_started.disconnect(started)

    assert statuses == [200] * 6
    assert sorted(set(names)) == [f"agentos-sync-{n}_0" for n in range(threads)]
    assert [names.count(name) for name in sorted(set(names))] == [6 // threads] * threads


def test_a_streamed_response_is_closed_once_its_body_has_gone_out_without_a_thread():
    sent, finished = [], []

    async def chunks():
        yield b"event: a\n\n"
        yield b"event: b\n\n"

    def on_finished(**_):
        finished.append((len(sent), threading.current_thread().name))

    async def call():
        async def receive():
            await asyncio.sleep(10)

        async def send(message):
            sent.append(message)

        signals.request_finished.connect(on_finished, weak=False)
        try:
            await SyncChainHandler().stream_response(StreamingHttpResponse(chunks()), receive, send)
        finally:
            signals.request_finished.disconnect(on_finished)

    asyncio.run(call())

    assert [m.get("body", b"") for m in sent[1:]] == [b"event: a\n\n", b"event: b\n\n", b""]
    assert finished == [(4, "MainThread")], "once, after the end of the body, on the event loop's thread"


def test_a_last_part_ends_the_body_and_what_the_stream_does_after_it_still_runs_to_its_end():
    steps = []

    async def chunks():
        yield b"event: a\n\n"
        yield LastPart(b"event: end\n\n")
        steps.append("after the last part")
        await asyncio.sleep(0.01)  # a clean-up that waits (an unsubscribe), while the server reports a disconnect
        steps.append("cleaned up")

    async def call():
        server = AsgiServer()
        await SyncChainHandler().stream_response(PartsResponse(chunks()), server.receive, server.send)
        return server.sent

    sent = asyncio.run(call())

    assert [(m["type"], m.get("body"), m.get("more_body")) for m in sent] == [
        ("http.response.start", None, None),
        ("http.response.body", b"event: a\n\n", True),
        ("http.response.body", b"event: end\n\n", False),
    ]
    assert type(sent[2]["body"]) is bytes
    assert steps == ["after the last part", "cleaned up"]


def test_a_part_after_the_last_part_is_an_error_not_lost_in_silence():
    async def chunks():
        yield LastPart(b"event: end\n\n")
        yield b"event: late\n\n"

    async def call():
        server = AsgiServer()
        await SyncChainHandler().stream_response(PartsResponse(chunks()), server.receive, server.send)

    with pytest.raises(RuntimeError, match="went on after its last part"):
        asyncio.run(call())


def test_a_client_that_leaves_mid_stream_stops_the_sending_and_the_stream_cleans_up():
    steps, closed = [], []
    left = asyncio.Event()

    async def chunks():
        try:
            yield b"event: a\n\n"
            left.set()
            await asyncio.sleep(10)  # a quiet run
            yield b"event: never\n\n"
        finally:
            steps.append("cleaned up")

    async def receive():
        await left.wait()
        return {"type": "http.disconnect"}

    async def call():
        sent = []

        async def send(message):
            sent.append(message)

        response = PartsResponse(chunks())
        response.close = lambda: closed.append(True)
        async with asyncio.timeout(5):
            await SyncChainHandler().stream_response(response, receive, send)
        return sent, asyncio.current_task().cancelling()

    sent, cancelling = asyncio.run(call())

    assert [m.get("body") for m in sent] == [None, b"event: a\n\n"]
    assert (steps, closed, cancelling) == (["cleaned up"], [True], 0)


def test_a_stream_cancelled_from_outside_is_cancelled_not_taken_for_a_client_leaving():
    closed = []

    async def chunks():
        yield b"event: a\n\n"
        await asyncio.sleep(10)

    async def call():
        server = AsgiServer()
        response = PartsResponse(chunks())
        response.close = lambda: closed.append(True)
        sending = asyncio.create_task(SyncChainHandler().stream_response(response, server.receive, server.send))
        await asyncio.sleep(0.05)
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending

    asyncio.run(call())

    assert closed == [True]
