"""The stream scenario: how long an event takes from its publish to an SSE client on another web replica, and
how long a cancel takes to end a running run.

The publisher is this process, using the module a worker publishes with (`runs.events.publish`), so the timestamp in
each event is taken right where a worker would hand it over; the events go to a real run that executes on the
server's worker (a long stub run, cancelled at the end). Run it with the server's DATABASE_URL and REDIS_URL:
the channel names derive from them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

from runs.events import publish

from .harness import Client, wait_finished


def _frames(response):
    buffer = b""
    for chunk in response.iter_content(chunk_size=None):
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            if not block.startswith(b":"):
                yield json.loads(block.split(b"\ndata: ", 1)[1])


def delivery_delays(publisher: Client, reader: Client, *, events: int = 1000, rate: float = 500.0) -> list[float]:
    """Milliseconds from publish to arrival for `events` events sent at `rate` per second."""
    session_id = f"bench-stream-{uuid.uuid4().hex[:8]}"
    run_id, _, _ = publisher.submit(session_id, "hold the stream open sleep=600")
    while publisher.poll(run_id, session_id)["status"] != "RUNNING":
        time.sleep(0.05)
    first = publish.last_index(run_id) + 1_000_000  # far above what the run itself emits meanwhile
    response = reader.http.post(
        f"{reader.url}/agents/stub-agent/runs/{run_id}/resume",
        data={"session_id": session_id, "last_event_index": first - 1},
        stream=True,
        timeout=60,
    )
    delays: list[float] = []
    subscribed = threading.Event()

    def read():
        for event in _frames(response):
            if event["event"] == "subscribed":
                subscribed.set()
            elif event.get("content_type") == "bench":
                delays.append((time.time() - event["sent"]) * 1000)
                if len(delays) == events:
                    return

    reader_thread = threading.Thread(target=read, daemon=True)
    reader_thread.start()
    subscribed.wait(10)
    for n in range(events):
        event = {"event": "RunContent", "event_index": first + n, "content_type": "bench", "sent": time.time()}
        publish.sender.send(run_id, [event])
        time.sleep(1 / rate)
    publish.sender.flush()
    reader_thread.join(30)
    response.close()
    publisher.http.post(f"{publisher.url}/agents/stub-agent/runs/{run_id}/cancel", params={"session_id": session_id})
    wait_finished(publisher, [(run_id, session_id)], timeout=30)
    return delays


def cancel_times(submitter: Client, canceller: Client, *, runs: int = 20) -> list[float]:
    """Milliseconds from a cancel's 200 on one replica to CANCELLED for a run executing behind another."""
    times = []
    for _ in range(runs):
        session_id = f"bench-cancel-{uuid.uuid4().hex[:8]}"
        run_id, _, _ = submitter.submit(session_id, "cancel me sleep=600")
        while submitter.poll(run_id, session_id)["status"] != "RUNNING":
            time.sleep(0.02)
        started = time.perf_counter()
        canceller.http.post(f"{canceller.url}/agents/stub-agent/runs/{run_id}/cancel", timeout=10)
        while canceller.poll(run_id, session_id)["status"] != "CANCELLED":
            time.sleep(0.005)
        times.append((time.perf_counter() - started) * 1000)
    return times
