"""A web process's inbox (`runs.events.hub.Hub`), in process against the real Redis: events that reach it before
their stream asks are kept for it (a while), and a stream that receives an event past the next index it expects
rereads the buffer for the ones it missed; the frames that end a stream end the response's body."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
import redis

from agentos_project.core.conf import current
from agentos_project.core.streaming import Ending
from agentos_project.handlers import SyncChainHandler
from runs import responses
from runs.events import hub as process_hub
from runs.events import publish
from runs.events import tail as tails
from tests.support.conf import with_conf
from tests.support.http import AsgiServer

pytestmark = pytest.mark.django_db(transaction=True)


def event(run_id: str, index: int, name: str = "RunContent") -> str:
    return publish.encode({"event": name, "run_id": run_id, "event_index": index, "content": f"c{index}"})


@pytest.fixture
def publisher(redis_db):
    client = redis.Redis.from_url(current().services.redis_url)
    yield client
    client.close()
    process_hub.inbox_lost()


async def started_hub() -> process_hub.Hub:
    hub = process_hub.hub()
    await hub.start()
    for _ in range(200):
        if process_hub.ready_inbox() == hub.inbox:
            return hub
        await asyncio.sleep(0.01)
    raise AssertionError("the inbox was not confirmed")


def test_events_that_reach_the_inbox_before_their_stream_are_kept_for_it_and_only_a_while(publisher, monkeypatch):
    early, late, forgotten = (str(uuid.uuid4()) for _ in range(3))

    async def scenario():
        hub = await started_hub()
        publisher.publish(hub.inbox, f"{early}\n{event(early, 0)}\n{event(early, 1)}")
        publisher.publish(hub.inbox, f"{forgotten}\n{event(forgotten, 0)}")
        await asyncio.sleep(0.2)
        with hub.from_inbox(early) as queue:
            publisher.publish(hub.inbox, f"{early}\n{event(early, 2)}")
            got = [await asyncio.wait_for(queue.get(), 2) for _ in range(2)]
        monkeypatch.setattr(process_hub, "UNCLAIMED_SECONDS", 0.0)
        publisher.publish(hub.inbox, f"{late}\n{event(late, 0)}")  # its arrival drops what waited too long
        await asyncio.sleep(0.2)
        return got, hub.unclaimed(), hub.reading()

    got, unclaimed, direct = asyncio.run(scenario())

    frames = [[json.loads(frame)["event_index"] for frame in publish.frames_of(raw)] for raw in got]
    assert frames == [[0, 1], [2]]
    assert (unclaimed, direct) == ({late}, set())


def test_after_its_connection_is_cut_the_hub_subscribes_again_and_tells_every_stream_to_reread(publisher):
    run_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    channel = publish.channel(run_id)

    async def scenario():
        hub = await started_hub()
        async with hub.listening(channel) as listening:
            with hub.from_inbox(other) as direct:
                [client] = [c for c in publisher.client_list() if c["name"] == hub.name]
                publisher.client_kill_filter(_id=client["id"])
                gaps = [await asyncio.wait_for(queue.get(), 5) for queue in (listening, direct)]
                ready = await asyncio.wait_for(started_hub(), 5)
                subscribers = publisher.pubsub_numsub(channel)
                publisher.publish(channel, event(run_id, 0))
                publisher.publish(hub.inbox, f"{other}\n{event(other, 0)}")
                after = [await asyncio.wait_for(queue.get(), 2) for queue in (listening, direct)]
        return gaps, ready is hub, subscribers, after

    gaps, ready, subscribers, after = asyncio.run(scenario())

    assert gaps == [process_hub.RESYNC, process_hub.RESYNC]
    assert ready, "the inbox is offered to submits again"
    assert subscribers == [(channel.encode(), 1)]
    assert after == [event(run_id, 0).encode(), event(other, 0).encode()]


def test_a_fault_in_dispatching_makes_the_hub_reconnect_not_stop(publisher, monkeypatch):
    run_id = str(uuid.uuid4())
    channel = publish.channel(run_id)

    async def scenario():
        hub = await started_hub()
        dispatch = hub._dispatch
        faults = iter([RuntimeError("a fault of ours")])

        def faulty(reply):
            if reply[0] == b"message" and (fault := next(faults, None)):
                raise fault
            dispatch(reply)

        monkeypatch.setattr(hub, "_dispatch", faulty)
        async with hub.listening(channel) as queue:
            publisher.publish(channel, event(run_id, 0))  # lost with the fault
            gap = await asyncio.wait_for(queue.get(), 5)
            await asyncio.wait_for(started_hub(), 5)
            publisher.publish(channel, event(run_id, 1))
            return gap, await asyncio.wait_for(queue.get(), 2)

    gap, after = asyncio.run(scenario())

    assert (gap, after) == (process_hub.RESYNC, event(run_id, 1).encode())


def test_a_stream_that_receives_an_event_past_the_next_one_rereads_the_buffer_first(publisher):
    run_id = str(uuid.uuid4())
    publish.sender.send(run_id, [json.loads(event(run_id, i)) for i in range(4)])
    assert publish.sender.flush()

    async def scenario():
        await started_hub()
        tail = tails.Tail(run_id, "agent")
        queue = tails.Backlog()
        queue.put_nowait(event(run_id, 0).encode())
        queue.put_nowait(event(run_id, 3).encode())  # 1 and 2 were lost on the way
        queue.put_nowait(f"{event(run_id, 4)}\n{event(run_id, 5, 'RunCompleted')}".encode())
        return [frame async for frame in tails.follow(tail, queue)]

    sent = asyncio.run(scenario())

    data = [line[len("data: ") :] for sse in sent for line in sse.splitlines() if line.startswith("data: ")]
    indices = [json.loads(line)["event_index"] for line in data]
    assert indices == [0, 1, 2, 3, 4, 5]


def test_what_came_while_the_stream_waited_goes_out_as_one_chunk_and_later_events_as_the_next():
    run_id = str(uuid.uuid4())

    async def scenario():
        tail = tails.Tail(run_id, "agent")
        queue = tails.Backlog()
        for raw in (f"{event(run_id, 0)}\n{event(run_id, 1)}", event(run_id, 2), event(run_id, 3)):
            queue.put_nowait(raw.encode())
        stream = tails.follow(tail, queue)
        first = await anext(stream)
        queue.put_nowait(event(run_id, 4, "RunCompleted").encode())
        return [first, *[chunk async for chunk in stream]]

    chunks = asyncio.run(scenario())

    assert chunks == [
        "".join(tails.frame("RunContent", event(run_id, i)) for i in range(4)),
        tails.frame("RunCompleted", event(run_id, 4, "RunCompleted")),
    ]
    assert [type(chunk) for chunk in chunks] == [str, tails.Ending], "the chunk that ends the stream ends the body"


def test_an_sse_response_sends_the_frames_that_end_the_stream_as_the_end_of_its_body():
    run_id = str(uuid.uuid4())
    last = tails.frame("RunCompleted", event(run_id, 1, "RunCompleted"))

    async def frames():
        yield tails.frame("RunContent", event(run_id, 0))
        yield tails.Ending(last)

    response = responses.sse_response(frames())  # as a view returns it, on the request's thread

    async def scenario():
        server = AsgiServer()
        await SyncChainHandler().stream_response(response, server.receive, server.send)
        return server.sent

    sent = asyncio.run(scenario())

    assert [(m.get("body"), m.get("more_body")) for m in sent[1:]] == [
        (tails.frame("RunContent", event(run_id, 0)).encode(), True),
        (last.encode(), False),
    ]


def test_an_inline_run_whose_stream_has_ended_is_not_cancelled_by_a_disconnect(monkeypatch):
    cancelled = []
    monkeypatch.setattr(responses, "cancel_soon", cancelled.append)

    async def frames():
        yield "event: RunContent\n\n"
        yield tails.Ending("event: RunPaused\n\n")
        await asyncio.sleep(10)  # its clean-up, which the client's going away cuts short

    async def scenario(ends: bool):
        stream = responses.cancelled_on_disconnect("run-1" if ends else "run-2", frames())
        await anext(stream)
        if ends:
            await anext(stream)
        await stream.aclose()

    asyncio.run(scenario(ends=True))
    asyncio.run(scenario(ends=False))

    assert cancelled == ["run-2"], "only the run whose stream had not ended"


@with_conf("streams", backlog_bytes=100)
def test_a_backlog_past_its_bound_drops_what_waits_and_ends_the_stream_with_an_error_frame():
    async def scenario():
        backlog = tails.Backlog()
        backlog.offer(b"x" * 150)  # larger than the bound, but nothing waits: taken
        alone = (backlog.size, backlog.overflowed)
        backlog.get_nowait()
        for _ in range(2):
            backlog.offer(b"y" * 40)
        within = (backlog.size, backlog.overflowed)
        backlog.offer(b"z" * 40)  # 120 would wait
        backlog.offer(b"w" * 10)  # nothing more is taken
        tail = tails.Tail("r", "agent", last=6)
        frames = [frame async for frame in tails.follow(tail, backlog)]
        return alone, within, frames, backlog.size

    alone, within, frames, left = asyncio.run(scenario())

    assert alone == (150, False)
    assert within == (80, False)
    assert left == 0
    assert len(frames) == 1 and isinstance(frames[0], Ending)
    assert frames[0] == tails.meta_frame(
        "error",
        {
            "run_id": "r",
            "error": "Stream closed: the client fell behind the run's events. Resume it (POST /runs/<run_id>/resume "
            "under the component's path) with last_event_index set to the last event_index received.",
            "last_event_index": 6,
        },
    )
