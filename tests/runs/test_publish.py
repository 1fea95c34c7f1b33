"""Publishing live events: the buffer and channel in Redis, held events only after commit, index continuity."""

from __future__ import annotations

import json
import uuid

import pytest
from django.db import transaction

from runs.events import publish
from runs.events.sink import EventSink, first_event_index
from runs.models import Run
from tests.runs.conftest import accept_run
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def buffered(redis_db, run_id) -> list[dict]:
    return [json.loads(raw) for raw in redis_db.zrange(publish.buffer_key(run_id), 0, -1)]


def next_message(pubsub) -> dict:
    return wait_until(lambda: pubsub.get_message(timeout=0.1), timeout=2, what="a published event")


def test_events_are_buffered_in_index_order_and_published_on_the_runs_channel(redis_db):
    run_id = str(uuid.uuid4())
    pubsub = redis_db.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(publish.channel(run_id))

    publish.sender.send(run_id, [{"event": "RunContent", "event_index": i, "content": f"c{i}"} for i in (2, 0, 1)])
    assert publish.sender.flush()

    published = [json.loads(frame)["event_index"] for frame in publish.frames_of(next_message(pubsub)["data"])]
    assert published == [2, 0, 1]  # as sent, in one message
    assert pubsub.get_message(timeout=0.2) is None
    assert [event["event_index"] for event in buffered(redis_db, run_id)] == [0, 1, 2]  # by index
    assert publish.last_index(run_id) == 2
    assert 0 < redis_db.ttl(publish.buffer_key(run_id)) <= 3600


def test_a_held_event_is_published_only_when_its_transaction_commits(redis_db):
    committed, rolled_back = str(uuid.uuid4()), str(uuid.uuid4())

    with transaction.atomic():
        publish.sender.send_on_commit(committed, [{"event": "RunCompleted", "event_index": 3}])
        assert publish.sender.flush()
        assert buffered(redis_db, committed) == []
    with pytest.raises(RuntimeError), transaction.atomic():
        publish.sender.send_on_commit(rolled_back, [{"event": "RunCompleted", "event_index": 3}])
        raise RuntimeError("rolled back")
    assert publish.sender.flush()

    assert buffered(redis_db, committed) == [{"event": "RunCompleted", "event_index": 3}]
    assert buffered(redis_db, rolled_back) == []


def test_a_sink_sends_chunks_at_once_and_holds_the_end(redis_db):

    run = Run.objects.get(pk=accept_run(session_id="sink-1"))
    sink = EventSink(run, attempt=1, first_index=0)

    sink.emit("RunStarted", {})
    sink.emit("RunContent", {"content": "hi"})
    sink.emit("RunCompleted", {"content": "hi"})
    assert publish.sender.flush()

    assert [event["event"] for event in buffered(redis_db, run.run_id)] == ["RunStarted", "RunContent"]
    assert [event["event"] for event in sink.held] == ["RunCompleted"]
    assert [event["event"] for event in sink.stored] == ["RunStarted", "RunCompleted"]


def test_a_new_leg_numbers_after_what_a_dead_attempt_published(redis_db):

    run = Run.objects.get(pk=accept_run(session_id="sink-2"))
    assert first_event_index(run) == 0
    publish.sender.send(run.run_id, [{"event": "RunContent", "event_index": i} for i in range(6)])
    assert publish.sender.flush()

    assert first_event_index(run) == 6  # the attempt died before storing anything: next_event_index is still 0
    Run.objects.filter(pk=run.run_id).update(next_event_index=9)
    run.refresh_from_db()
    assert first_event_index(run) == 9


def test_a_run_with_an_inbox_has_its_events_published_there_too_after_its_id(redis_db):
    run = Run.objects.get(pk=accept_run(session_id="sink-3"))
    run.stream_inbox = publish.inbox("test")
    pubsub = redis_db.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(run.stream_inbox, publish.channel(run.run_id))
    sink = EventSink(run, attempt=1, first_index=0)

    sink.emit("RunStarted", {})
    sink.emit("RunContent", {"content": "hi"})
    sink.emit("RunCompleted", {"content": "hi"})
    sink.publish_held()
    assert publish.sender.flush()

    by_channel: dict[str, list[str]] = {}
    for _ in range(20):  # until both channels had theirs and nothing more comes
        message = pubsub.get_message(timeout=0.5)
        if message is None and len(by_channel) == 2:
            break
        if message is not None:
            by_channel.setdefault(message["channel"].decode(), []).append(message["data"].decode())
    on_run, on_inbox = by_channel[publish.channel(run.run_id)], by_channel[run.stream_inbox]
    assert on_inbox == [f"{run.run_id}\n{message}" for message in on_run]
    names = [json.loads(frame)["event"] for message in on_run for frame in publish.frames_of(message)]
    assert names == ["RunStarted", "RunContent", "RunCompleted"]


def test_redis_keeps_a_streamed_runs_events_for_the_buffer_time_and_an_unstreamed_ones_for_minutes(redis_db):
    streamed, unstreamed = (Run.objects.get(pk=accept_run(session_id=f"keep-{n}")) for n in (1, 2))
    streamed.stream = True
    for run in (streamed, unstreamed):
        EventSink(run, attempt=1, first_index=0).emit("RunStarted", {})
    assert publish.sender.flush()

    assert 3590 < redis_db.ttl(publish.buffer_key(streamed.run_id)) <= 3600
    assert 290 < redis_db.ttl(publish.buffer_key(unstreamed.run_id)) <= publish.UNSTREAMED_SECONDS == 300


def test_an_encoded_event_starts_with_its_name_and_index_which_head_reads_off():
    event = {"run_id": "r", "content": {"event_index": 99, "event": "Nested"}, "event_index": 7, "event": "RunContent"}

    encoded = publish.encode(event)

    assert encoded.startswith('{"event":"RunContent","event_index":7,"run_id":"r",')
    assert json.loads(encoded) == event
    assert publish.head(encoded) == ("RunContent", 7)
    assert publish.head(publish.encode({"event": "RunStarted", "event_index": 0})) == ("RunStarted", 0)


def test_head_parses_a_frame_encoded_in_another_order_whole():
    older = json.dumps({"content": {"event": "Nested", "event_index": 99}, "event_index": 3, "event": "RunCompleted"})

    assert publish.head(older) == ("RunCompleted", 3)
    assert publish.head('{"event":"Run\\u00e9","event_index":4}') == ("Run\u00e9", 4)
