"""Live streams, resume and cancel across real web replicas (uvicorn) and real workers (CONTRACT 3.1, 3.3, 3.5,
9, 10)."""

from __future__ import annotations

import signal
import time

import pytest
import redis
import requests
from django.db import connection

from agentos_project.core.conf import current
from runs.events import publish
from runs.models import Run
from tests.support.http import sse_frames
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
RUNS = "/agents/stub-agent/runs"


def words(count: int) -> str:
    return " ".join(f"w{n}" for n in range(count))


def final_index(message: str) -> int:
    """The stub's last event index for `message`: RunStarted 0, one chunk per word of `echo: <message> (history:
    0 messages)`, then RunCompleted."""
    return len(message.split(" ")) + 5


def indices(frames) -> list[int]:
    return [data["event_index"] for name, data in frames if data is not None and "event_index" in data]


def read_until(frames, predicate) -> list:
    seen = []
    for name, data in frames:
        seen.append((name, data))
        if predicate(name, data):
            return seen
    return seen


def stream_then_resume(a, b, message: str, session_id: str, *, disconnect_after: int) -> tuple[list, list]:
    """Stream a background run from replica `a` up to index `disconnect_after`, disconnect, and resume it on
    replica `b`: the frames of each."""
    response = a.post(RUNS, streaming=True, message=message, session_id=session_id, background="true")
    first = read_until(sse_frames(response), lambda name, data: data and data["event_index"] == disconnect_after)
    response.close()
    resume = f"{RUNS}/{first[0][1]['run_id']}/resume"
    resumed = sse_frames(b.post(resume, streaming=True, session_id=session_id, last_event_index=disconnect_after))
    return first, list(resumed)


def events_only(frames) -> list:
    return [(name, data) for name, data in frames if data is not None and "event_index" in data]


def test_a_stream_disconnected_on_replica_a_resumes_on_replica_b_exactly(start_web, start_worker):
    start_worker(concurrency=4)
    start_worker(concurrency=4)
    a, b = start_web(), start_web()
    message = f"{words(150)} pace=0.01 sleep=0"
    first, resumed = stream_then_resume(a, b, message, "resume-1", disconnect_after=40)

    assert indices(first) == list(range(41))
    assert [name for name, _ in resumed[:1]] == ["catch_up"]
    subscribed = [name for name, _ in resumed].index("subscribed")
    assert resumed[0][1]["missed_events"] == subscribed - 1
    after = events_only(resumed)
    assert indices(after) == list(range(41, final_index(message) + 1))
    assert after[-1][0] == "RunCompleted"
    assert resumed[-1][0] == "RunCompleted"  # the stream closed after it
    content = "".join(data["content"] for name, data in first + after if name == "RunContent")
    assert content == a.poll(first[0][1]["run_id"], "resume-1")["content"] == after[-1][1]["content"]


def test_resume_replays_a_finished_run_from_the_buffer_then_from_the_database(start_web, start_worker):
    start_worker()
    web = start_web()
    frames = list(
        sse_frames(web.post(RUNS, streaming=True, message="hi there sleep=0", session_id="r-2", background="true"))
    )
    run_id = frames[0][1]["run_id"]
    last = frames[-1][1]["event_index"]

    buffered = list(
        sse_frames(web.post(f"{RUNS}/{run_id}/resume", streaming=True, session_id="r-2", last_event_index=2))
    )
    redis.Redis.from_url(current().services.redis_url).delete(publish.buffer_key(run_id))
    stored = list(sse_frames(web.post(f"{RUNS}/{run_id}/resume", streaming=True, session_id="r-2", last_event_index=0)))

    assert buffered[0] == (
        "replay",
        {
            "event": "replay",
            "run_id": run_id,
            "status": "COMPLETED",
            "total_events": last - 2,
            "total_buffered": last + 1,
            "last_event_index_requested": 2,
            "message": f"Run COMPLETED. Replaying {last - 2} missed events (of {last + 1} total).",
        },
    )
    assert buffered[1:] == frames[3:]
    assert stored[0][0] == "replay" and stored[0][1]["total_events"] == 1
    assert stored[1:] == [frames[-1]]  # content chunks are not stored; the final output is


def test_resume_of_a_non_stream_run_in_the_database_says_it_has_no_stored_events(start_web, start_worker):
    start_worker()
    web = start_web()
    run_id = web.post(RUNS, message="quiet sleep=0", session_id="r-3", background="true", stream="false").json()[
        "run_id"
    ]
    wait_until(lambda: web.poll(run_id, "r-3")["status"] == "COMPLETED", timeout=20, what="the run to complete")
    redis.Redis.from_url(current().services.redis_url).delete(publish.buffer_key(run_id))

    frames = list(
        sse_frames(web.post(f"{RUNS}/{run_id}/resume", streaming=True, session_id="r-3", last_event_index=-1))
    )

    assert frames == [
        (
            "replay",
            {
                "event": "replay",
                "run_id": run_id,
                "status": "COMPLETED",
                "total_events": 0,
                "message": "Run COMPLETED with no stored events: a run submitted without streaming keeps only its "
                "final output.",
            },
        )
    ]


def test_resume_of_an_unknown_run_is_an_error_frame_and_needs_a_session(start_web):
    web = start_web()
    unknown = "00000000-0000-4000-8000-000000000000"

    frames = list(sse_frames(web.post(f"{RUNS}/{unknown}/resume", streaming=True, session_id="nobody")))
    missing = web.post(f"{RUNS}/{unknown}/resume", last_event_index=3)

    assert frames == [("error", {"event": "error", "error": f"Run {unknown} not found in buffer or database"})]
    assert (missing.status_code, missing.json()) == (400, {"detail": "session_id is required for this action"})


def test_resume_while_thousands_of_chunks_are_published_is_exact(start_web, start_worker):
    start_worker()
    a, b = start_web(), start_web()
    message = f"{words(3000)} pace=0.001 sleep=0"
    first, resumed = stream_then_resume(a, b, message, "fast-1", disconnect_after=500)

    assert resumed[0][0] == "catch_up"  # still publishing when the resume came
    assert indices(resumed) == list(range(501, final_index(message) + 1))
    assert resumed[-1][0] == "RunCompleted"


def test_a_burst_of_two_thousand_events_reaches_a_connected_client_complete(start_web, start_worker):
    start_worker()
    web = start_web()
    message = f"{words(2000)} sleep=0.5"  # the client is connected before the burst starts

    frames = list(sse_frames(web.post(RUNS, streaming=True, message=message, session_id="burst-1", background="true")))

    assert indices(frames) == list(range(final_index(message) + 1))
    assert [name for name, _ in frames].count("RunContent") == final_index(message) - 1


def test_two_hundred_open_streams_hold_no_thread_or_connection_each(start_web, start_worker):
    psutil = pytest.importorskip("psutil")
    start_worker()
    web = start_web(AGENTOS_STREAM_KEEPALIVE_SECONDS="0.5")  # the streams ask the database while they are counted
    # Long enough to be still running when polled, however loaded the machine is; cancelled at the end.
    run_id = web.post(RUNS, message="long sleep=30", session_id="many-1", background="true", stream="false").json()[
        "run_id"
    ]
    process = psutil.Process(web.pid)
    threads_before = process.num_threads()  # uvicorn, the hub's and the publishers' threads
    streams = [
        web.post(f"{RUNS}/{run_id}/resume", streaming=True, session_id="many-1", last_event_index=-1, timeout=60)
        for _ in range(200)
    ]
    first_frames = [next(sse_frames(stream))[0] for stream in streams]
    time.sleep(1.5)
    database_port = int(connection.settings_dict["PORT"])

    threads = process.num_threads()
    connections = [c for c in process.net_connections("tcp") if c.raddr and c.raddr.port == database_port]
    started = time.monotonic()
    body = web.poll(run_id, "many-1")
    poll_seconds = time.monotonic() - started
    for stream in streams:
        stream.close()
    web.post(f"{RUNS}/{run_id}/cancel", session_id="many-1")

    assert first_frames == ["catch_up"] * 200
    request_threads = current().server.web_threads  # the web server's too: it runs with the same environment
    assert threads <= threads_before + request_threads + 4, (threads_before, threads)  # the shared pools, at most
    assert len(connections) <= request_threads + 4  # the idle pool of the request threads and the streams' checks
    assert body["status"] == "RUNNING"
    assert poll_seconds < 1.0


def test_cancel_through_replica_b_ends_a_stream_on_replica_a(start_web, start_worker):
    start_worker()
    a, b = start_web(), start_web()
    response = a.post(
        RUNS, streaming=True, message=f"{words(500)} pace=0.02 sleep=0", session_id="c-1", background="true"
    )
    frames = sse_frames(response)
    head = read_until(frames, lambda name, data: data and data["event_index"] == 5)
    run_id = head[0][1]["run_id"]

    cancelled_at = time.monotonic()
    answer = b.post(f"{RUNS}/{run_id}/cancel")
    rest = list(frames)
    ended = time.monotonic() - cancelled_at
    run = b.poll(run_id, "c-1")
    follow_up = b.post(RUNS, message="next sleep=0", session_id="c-1", background="true", stream="false").json()

    assert (answer.status_code, answer.json()) == (200, {})
    assert rest[-1][0] == "RunCancelled"
    assert "RunCompleted" not in [name for name, _ in rest]
    assert (run["status"], run["cancellation_stage"]) == ("CANCELLED", "EXECUTING")
    assert run["content"].startswith("echo: w0 w1 w2 w3")  # partial content kept
    assert rest[-1][1]["content"] == run["content"]
    assert ended < 2.0
    wait_until(lambda: b.poll(follow_up["run_id"], "c-1")["status"] == "COMPLETED", timeout=20, what="the next run")


def test_cancel_of_a_queued_run_is_immediate_and_its_session_goes_on(start_web, start_worker):
    start_worker()
    web = start_web()
    head, cancelled, after = (web.submitted("q-1", m) for m in ("head sleep=2", "second sleep=0", "third sleep=0"))
    answer = web.post(f"{RUNS}/{cancelled}/cancel", timeout=5)
    right_away = web.poll(cancelled, "q-1")
    wait_until(lambda: web.poll(after, "q-1")["status"] == "COMPLETED", timeout=20, what="the third run")
    head_run, after_run = web.poll(head, "q-1"), web.poll(after, "q-1")

    assert (answer.status_code, answer.json()) == (200, {})
    assert (right_away["status"], right_away["cancellation_stage"], right_away["content"]) == (
        "CANCELLED",
        "PENDING",
        "cancelled before execution",
    )
    assert right_away["queue_attempt"] == 0
    assert head_run["status"] == "COMPLETED"
    assert after_run["started_at"] >= head_run["completed_at"]
    assert after_run["content"] == "echo: third sleep=0 (history: 2 messages)"  # the cancelled run left no turn


def test_a_streamed_submit_behind_a_head_gets_only_keepalives_until_the_head_ends(start_web, start_worker):
    start_worker()
    web = start_web(AGENTOS_STREAM_KEEPALIVE_SECONDS="0.3")
    head = web.post(RUNS, message="head sleep=2", session_id="k-1", background="true", stream="false").json()

    frames, arrived = [], []
    for frame in sse_frames(
        web.post(RUNS, streaming=True, message="tail sleep=0", session_id="k-1", background="true")
    ):
        frames.append(frame)
        arrived.append(time.time())
    head_run = web.poll(head["run_id"], "k-1")

    names = [name for name, _ in frames]
    first_event = names.index("RunStarted")
    head_end = Run.objects.get(pk=head["run_id"]).completed_at.timestamp()
    assert head_run["status"] == "COMPLETED"
    assert set(names[:first_event]) == {"keepalive"} and first_event >= 4
    assert arrived[first_event] >= head_end
    assert names[-1] == "RunCompleted"


def test_once_its_hub_listens_a_web_process_streams_submits_through_its_inbox_exactly(start_web, start_worker):
    start_worker(concurrency=4)
    web = start_web()
    submit = {"streaming": True, "background": "true"}
    first = list(sse_frames(web.post(RUNS, message="first sleep=0", session_id="inbox-1", **submit)))
    message = f"{words(60)} pace=0.005 sleep=0"

    frames = [list(sse_frames(web.post(RUNS, message=message, session_id=f"inbox-{n}", **submit))) for n in (2, 3)]

    assert first[-1][0] == "RunCompleted"
    for run_frames in frames:
        run = Run.objects.get(pk=run_frames[0][1]["run_id"])
        assert run.stream_inbox is not None and run.stream_inbox.startswith(publish.inbox(""))
        assert indices(run_frames) == list(range(final_index(message) + 1))
        assert [name for name, _ in run_frames][-1] == "RunCompleted"
    assert Run.objects.get(session_id="inbox-1").stream_inbox is None, "the first stream started the hub"


def test_an_inline_stream_whose_client_goes_away_is_cancelled(start_web):
    web = start_web()
    response = web.post(RUNS, streaming=True, message="inline sleep=10", session_id="i-1")
    started = next(sse_frames(response))
    response.close()
    run_id = started[1]["run_id"]

    run = wait_until(
        lambda: Run.objects.filter(pk=run_id, status="CANCELLED").first(), timeout=5, what="the run to be cancelled"
    )

    assert started[0] == "RunStarted"
    assert (run.cancellation_stage, run.queued, run.background) == ("EXECUTING", False, False)


def test_an_inline_run_whose_client_goes_away_before_its_body_is_cancelled(start_web):
    web = start_web()

    with pytest.raises(requests.ConnectionError, match="Read timed out"):
        web.post(RUNS, message="inline sleep=10", session_id="i-3", stream="false", timeout=1)

    run = wait_until(
        lambda: Run.objects.filter(session_id="i-3", status="CANCELLED").first(), timeout=5, what="the cancel"
    )
    assert (run.cancellation_stage, run.queued, run.background) == ("EXECUTING", False, False)


def test_an_inline_run_answers_its_body_when_done_and_is_not_queued(start_web):
    web = start_web()

    response = web.post(RUNS, message="inline sleep=0", session_id="i-2", stream="false")

    body = response.json()
    assert response.status_code == 200
    assert (body["status"], body["content"], body["agent_id"]) == (
        "COMPLETED",
        "echo: inline sleep=0 (history: 0 messages)",
        "stub-agent",
    )
    assert Run.objects.get(pk=body["run_id"]).queued is False


def test_non_durable_runs_stream_and_wait_for_a_slot_where_they_can_be_cancelled(start_web):
    web = start_web(AGENTOS_QUEUE_DURABLE="false", AGENTOS_MAX_CONCURRENCY="1")
    busy = web.post(RUNS, message="busy sleep=3", session_id="nd-1", background="true", stream="false").json()
    response = web.post(RUNS, streaming=True, message="waiting sleep=0", session_id="nd-2", background="true")
    frames = sse_frames(response)
    waiting_id = Run.objects.get(session_id="nd-2").run_id

    before = web.poll(str(waiting_id), "nd-2")
    web.post(f"{RUNS}/{waiting_id}/cancel", session_id="nd-2")
    rest = list(frames)
    after = web.poll(str(waiting_id), "nd-2")

    assert before["status"] == "PENDING"
    assert rest[-1][0] == "RunCancelled"
    assert (after["status"], after["cancellation_stage"]) == ("CANCELLED", "PENDING")
    wait_until(lambda: web.poll(busy["run_id"], "nd-1")["status"] == "COMPLETED", timeout=20, what="the busy run")


def test_a_team_stream_ends_with_the_teams_end_not_a_members(start_web, start_worker):
    start_worker()
    web = start_web()

    frames = list(
        sse_frames(web.post("/teams/stub-team/runs", streaming=True, message="hi team sleep=0", background="true"))
    )

    names = [name for name, _ in frames]
    assert names[0] == "TeamRunStarted" and names[-1] == "TeamRunCompleted"
    assert names.count("RunCompleted") == 2  # the members', which did not close the stream
    assert indices(frames) == list(range(len(frames)))


def test_event_indices_go_on_increasing_when_a_killed_attempt_is_re_executed(start_web, start_worker, start_sweeper):
    grace = {"AGENTOS_LOCK_GRACE_SECONDS": "3", "AGENTOS_POLL_INTERVAL": "0.5", "AGENTOS_MAX_ATTEMPTS": "2"}
    doomed = start_worker(concurrency=2, **grace)
    start_sweeper(**grace)
    web = start_web(**grace)
    response = web.post(
        RUNS, streaming=True, message=f"{words(40)} pace=0.05 sleep=0", session_id="re-1", background="true"
    )
    frames = sse_frames(response)
    first = read_until(frames, lambda name, data: data and data["event_index"] == 10)

    doomed.signal(signal.SIGKILL)
    start_worker(concurrency=2, **grace)
    rest = list(frames)

    seen = indices(first + rest)
    assert seen == sorted(set(seen))  # strictly increasing, across the two attempts
    assert [name for name, _ in first + rest].count("RunStarted") == 2
    restarted = [data["event_index"] for name, data in rest if name == "RunStarted"][0]
    assert restarted > 10
    assert rest[-1][0] == "RunCompleted"
    assert Run.objects.get(session_id="re-1").attempt == 2
