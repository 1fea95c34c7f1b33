"""`/resume` of a run with more than one leg (CONTRACT 10): a paused run continued, a cancelled run requeued. The
stream ends at the run's last ending event, not at the first one in its history, whether the events come from the
Redis buffer, from PostgreSQL once the buffer expired, or live."""

from __future__ import annotations

import json

import pytest
import redis

from agentos_project.core.conf import current
from runs.events import publish
from tests.support.http import sse_frames
from tests.support.runs import HITL_AGENT, STUB_AGENT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
HITL = f"{HITL_AGENT}/runs"
RUNS = f"{STUB_AGENT}/runs"


def events_only(frames) -> list[tuple[str, dict]]:
    return [(name, data) for name, data in frames if data is not None and "event_index" in data]


def names(frames) -> list[str]:
    return [name for name, _ in frames]


def resume(web, runs: str, run_id: str, session_id: str, after: int) -> list[tuple[str, dict]]:
    response = web.post(f"{runs}/{run_id}/resume", streaming=True, session_id=session_id, last_event_index=after)
    return list(sse_frames(response))


def drop_buffer(run_id: str) -> None:
    """What an hour without events does to a run's buffer in Redis."""
    redis.Redis.from_url(current().services.redis_url).delete(publish.buffer_key(run_id))


def buffered(run_id: str) -> list[dict]:
    return [json.loads(raw) for raw in redis.Redis.from_url(current().services.redis_url).zrange(
        publish.buffer_key(run_id), 0, -1
    )]  # fmt: skip


def paused_leg(web, session_id: str, message: str) -> tuple[str, list]:
    """A hitl-agent run streamed up to its pause: its id and its events."""
    leg = events_only(sse_frames(web.post(HITL, streaming=True, message=message, session_id=session_id,
                                          background="true")))  # fmt: skip
    assert leg[-1][0] == "RunPaused", leg
    return leg[0][1]["run_id"], leg


def confirmed(leg: list) -> str:
    return json.dumps([{**tool, "confirmed": True} for tool in leg[-1][1]["tools"]])


def continued_run(web, session_id: str) -> tuple[str, list, list]:
    """A hitl-agent run paused, then continued with its stream read to the end: its id and each leg's events."""
    run_id, first = paused_leg(web, session_id, "please delete scratch sleep=0")
    answer = web.post(f"{HITL}/{run_id}/continue", streaming=True, session_id=session_id, background="true",
                      tools=confirmed(first))  # fmt: skip
    second = events_only(sse_frames(answer))
    assert second[-1][0] == "RunCompleted", second
    return run_id, first, second


def test_a_continued_run_resumes_through_both_legs_from_the_buffer_and_from_the_database(start_web, start_worker):
    start_worker()
    web = start_web()
    run_id, first, second = continued_run(web, "legs-1")
    every = first + second
    in_first, in_second = first[0][1]["event_index"], second[1][1]["event_index"]

    from_start = resume(web, HITL, run_id, "legs-1", -1)
    inside_first = resume(web, HITL, run_id, "legs-1", in_first)
    inside_second = resume(web, HITL, run_id, "legs-1", in_second)
    drop_buffer(run_id)
    stored_from_start = resume(web, HITL, run_id, "legs-1", -1)
    stored_inside_first = resume(web, HITL, run_id, "legs-1", in_first)
    stored_inside_second = resume(web, HITL, run_id, "legs-1", in_second)

    stored = [(name, data) for name, data in every if name != "RunContent"]  # chunks are not stored
    assert names(first)[-1] == "RunPaused" and names(second)[:1] == ["RunContinued"]
    assert from_start[0][0] == "replay"
    assert (from_start[0][1]["status"], from_start[0][1]["total_events"]) == ("COMPLETED", len(every))
    assert from_start[1:] == every
    assert inside_first[1:] == [(n, d) for n, d in every if d["event_index"] > in_first]
    assert inside_second[1:] == [(n, d) for n, d in every if d["event_index"] > in_second]
    assert (stored_from_start[0][0], stored_from_start[0][1]["total_events"]) == ("replay", len(stored))
    assert stored_from_start[1:] == stored
    assert stored_inside_first[1:] == [(n, d) for n, d in stored if d["event_index"] > in_first]
    assert stored_inside_second[1:] == [(n, d) for n, d in stored if d["event_index"] > in_second]
    assert [frames[-1][0] for frames in (from_start, inside_second, stored_from_start, stored_inside_second)] == [
        "RunCompleted"
    ] * 4


def test_a_resume_reads_the_legs_whose_buffer_expired_from_the_database(start_web, start_worker):
    start_worker()
    web = start_web()
    run_id, first = paused_leg(web, "legs-2", "please delete scratch sleep=0")
    drop_buffer(run_id)  # the pause lasted longer than the buffer is kept
    answer = web.post(f"{HITL}/{run_id}/continue", streaming=True, session_id="legs-2", background="true",
                      tools=confirmed(first))  # fmt: skip
    second = events_only(sse_frames(answer))

    replayed = resume(web, HITL, run_id, "legs-2", -1)

    stored_first = [(name, data) for name, data in first if name != "RunContent"]
    assert replayed[0][0] == "replay" and replayed[0][1]["total_events"] == len(stored_first) + len(second)
    assert replayed[1:] == stored_first + second
    assert replayed[-1][0] == "RunCompleted"


def test_a_live_resume_during_a_continuation_is_subscribed_and_follows_it_to_its_end(start_web, start_worker):
    start_worker()
    web = start_web()
    run_id, first = paused_leg(web, "legs-3", "please delete scratch sleep=2 pace=0.05")
    web.post(f"{HITL}/{run_id}/continue", session_id="legs-3", background="true", stream="false",
             tools=confirmed(first))  # fmt: skip
    wait_until(
        lambda: web.poll(run_id, "legs-3", prefix=HITL_AGENT)["status"] == "RUNNING", timeout=20, what="the second leg"
    )

    live = resume(web, HITL, run_id, "legs-3", -1)

    kinds = names(live)
    assert kinds[0] == "catch_up" and "subscribed" in kinds
    events = events_only(live)
    assert events[: len(first)] == first  # the first leg, its RunPaused included, then on
    assert names(events)[len(first)] == "RunContinued"
    assert kinds[-1] == "RunCompleted"
    assert events[-1][1]["content"] == "done: tool result received"
    assert [data["event_index"] for _, data in events] == [event["event_index"] for event in buffered(run_id)]
    before = kinds.index("subscribed")
    assert live[0][1]["missed_events"] == before - 1


def test_a_requeued_run_resumes_past_its_old_end_live_from_the_buffer_and_from_the_database(
    api, start_web, start_worker
):
    start_worker()
    web = start_web()
    response = web.post(RUNS, streaming=True, message="again sleep=1 pace=0.05", session_id="legs-4",
                        background="true")  # fmt: skip
    frames = sse_frames(response)
    started = next(frames)
    run_id = started[1]["run_id"]
    web.post(f"{RUNS}/{run_id}/cancel", session_id="legs-4")
    first = [started, *events_only(frames)]
    assert names(first)[-1] == "RunCancelled"
    assert api.post(f"/queue/jobs/{run_id}/requeue").status_code == 200
    wait_until(lambda: web.poll(run_id, "legs-4")["status"] == "RUNNING", timeout=20, what="the requeued run")

    live = resume(web, RUNS, run_id, "legs-4", -1)
    replayed = resume(web, RUNS, run_id, "legs-4", -1)
    drop_buffer(run_id)
    stored = resume(web, RUNS, run_id, "legs-4", -1)

    events = events_only(live)
    assert "subscribed" in names(live) and names(live)[-1] == "RunCompleted"
    assert events[: len(first)] == first
    assert names(events).count("RunStarted") == 2
    assert events[-1][1]["content"] == "echo: again sleep=1 pace=0.05 (history: 0 messages)"
    assert replayed[0][0] == "replay" and replayed[1:] == events
    assert names(stored[1:]) == ["RunStarted", "RunCancelled", "RunStarted", "RunCompleted"]
    assert stored[1:] == [(name, data) for name, data in events if name != "RunContent"]
