"""Human in the loop with real web replicas and workers (CONTRACT 11): a paused run holds its session until it is
continued through the queue; a continuation leg that is lost is parked back to paused."""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime

import pytest

from queueing.models import Ticket
from tests.support.http import sse_frames
from tests.support.runs import HITL_AGENT

pytestmark = pytest.mark.django_db(transaction=True)
HITL = f"{HITL_AGENT}/runs"


def paused_run(web, session_id: str, message: str = "please delete scratch sleep=0", *, prefix: str = HITL_AGENT):
    """A background run submitted and seen PAUSED: its id and its poll body."""
    run_id = web.submitted(session_id, message, prefix=prefix)
    return run_id, web.wait_status(run_id, session_id, "PAUSED", prefix=prefix)


def decide(body: dict, confirmed: bool) -> str:
    return json.dumps([{**tool, "confirmed": confirmed} for tool in body["tools"]])


def test_a_paused_run_holds_its_session_until_it_is_continued(start_web, start_worker):
    start_worker()
    web = start_web()
    run_id, paused = paused_run(web, "h-1")
    follow_up = web.post(HITL, message="and then sleep=0", session_id="h-1", background="true", stream="false").json()[
        "run_id"
    ]
    ticket = Ticket.objects.get(pk=run_id)
    waiting = web.poll(follow_up, "h-1", prefix=HITL_AGENT)

    answer = web.post(
        f"{HITL}/{run_id}/continue", session_id="h-1", background="true", stream="false", tools=decide(paused, True)
    )
    done = web.wait_status(run_id, "h-1", "COMPLETED", prefix=HITL_AGENT)
    after = web.wait_status(follow_up, "h-1", "COMPLETED", prefix=HITL_AGENT)

    assert (paused["queue_attempt"], ticket.status, ticket.attempt, ticket.max_attempts) == (1, "paused", 1, 1)
    assert [(t["tool_name"], t["tool_args"], t["requires_confirmation"], t["confirmed"]) for t in paused["tools"]] == [
        ("delete_temp_files", {"directory": "/tmp"}, True, None)
    ]
    assert (waiting["status"], waiting["waiting_on"]) == ("PENDING", run_id)
    assert answer.status_code == 202
    assert (done["content"], done["queue_attempt"]) == ("done: tool result received", 2)
    final = Ticket.objects.get(pk=run_id)
    assert (final.status, final.attempt, final.max_attempts, final.session_seq) == (
        "completed",
        2,
        2,
        ticket.session_seq,
    )
    assert after["started_at"] >= done["completed_at"]
    assert after["content"] == "echo: and then sleep=0 (history: 4 messages)"
    print(
        f"\nheld follow-up start after the continued leg's end: "
        f"{(_ts(after['started_at']) - _ts(done['completed_at'])) * 1000:.1f} ms"
    )


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_a_rejected_call_is_reported_to_the_model(start_web, start_worker):
    start_worker()
    web = start_web()
    run_id, paused = paused_run(web, "h-2")

    web.post(
        f"{HITL}/{run_id}/continue", session_id="h-2", background="true", stream="false", tools=decide(paused, False)
    )
    done = web.wait_status(run_id, "h-2", "COMPLETED", prefix=HITL_AGENT)

    assert done["content"] == "not done: The user rejected this tool call; it was not executed."


def test_two_pauses_in_one_run_with_stream_indices_going_on(start_web, start_worker):
    start_worker()
    web = start_web()
    first = list(
        sse_frames(
            web.post(HITL, streaming=True, message="please delete twice sleep=0", session_id="h-3", background="true")
        )
    )
    run_id = first[0][1]["run_id"]
    paused = web.poll(run_id, "h-3", prefix=HITL_AGENT)
    sent = time.monotonic()
    response = web.post(
        f"{HITL}/{run_id}/continue", streaming=True, session_id="h-3", background="true", tools=decide(paused, True)
    )
    frames = sse_frames(response)
    second = [next(frames)]
    print(f"\ncontinue sent to the leg's first event at the client: {(time.monotonic() - sent) * 1000:.1f} ms")
    second += list(frames)
    paused_again = web.poll(run_id, "h-3", prefix=HITL_AGENT)
    third = list(
        sse_frames(
            web.post(
                f"{HITL}/{run_id}/continue",
                streaming=True,
                session_id="h-3",
                background="true",
                tools=decide(paused_again, True),
            )
        )
    )

    names = [[name for name, _ in leg] for leg in (first, second, third)]
    assert names[0] == ["RunStarted", "RunPaused"]
    assert names[1] == ["RunContinued", "ToolCallStarted", "ToolCallCompleted", "RunPaused"]
    assert names[2][:3] == ["RunContinued", "ToolCallStarted", "ToolCallCompleted"] and names[2][-1] == "RunCompleted"
    indices = [data["event_index"] for leg in (first, second, third) for _, data in leg]
    assert indices == list(range(len(indices)))
    assert paused["tools"][0]["tool_call_id"] != paused_again["tools"][0]["tool_call_id"]
    done = web.poll(run_id, "h-3", prefix=HITL_AGENT)
    assert (done["status"], done["content"], done["queue_attempt"]) == ("COMPLETED", "done: tool result received", 3)


def test_a_lost_continuation_leg_that_ran_no_tool_is_parked_back_to_paused_and_continues_again(
    start_web, start_worker, start_sweeper
):
    grace = {"AGENTOS_LOCK_GRACE_SECONDS": "3", "AGENTOS_POLL_INTERVAL": "0.5"}
    start_sweeper(**grace)
    doomed = start_worker(**grace)
    web = start_web(**grace)
    run_id, paused = paused_run(web, "h-4", "please delete scratch sleep=2")
    # rejected: the leg runs no tool, then the model thinks for 2 s, and its worker is killed meanwhile
    web.post(
        f"{HITL}/{run_id}/continue", session_id="h-4", background="true", stream="false", tools=decide(paused, False)
    )
    web.wait_status(run_id, "h-4", "RUNNING", prefix=HITL_AGENT)

    doomed.signal(signal.SIGKILL)
    parked = web.wait_status(run_id, "h-4", "PAUSED", timeout=15, prefix=HITL_AGENT)
    ticket = Ticket.objects.get(pk=run_id)
    start_worker(**grace)
    web.post(
        f"{HITL}/{run_id}/continue", session_id="h-4", background="true", stream="false", tools=decide(parked, True)
    )
    done = web.wait_status(run_id, "h-4", "COMPLETED", timeout=20, prefix=HITL_AGENT)

    assert (ticket.status, ticket.attempt, ticket.max_attempts) == ("paused", 2, 2)
    assert parked["tools"] == paused["tools"]
    assert (done["content"], done["queue_attempt"]) == ("done: tool result received", 3)
    assert [[tool["confirmed"] for tool in leg] for leg in done["tool_decisions"]] == [[False], [True]]


@pytest.mark.parametrize(
    ("prefix", "content"),
    [
        ("/teams/stub-team", "echo: please delete scratch sleep=0 (history: 0 messages)"),
        ("/workflows/stub-workflow", "echo: done: tool result received (history: 0 messages)"),
    ],
)
def test_teams_and_workflows_pause_on_a_members_or_steps_tool(start_web, start_worker, prefix, content):
    start_worker()
    web = start_web()
    kind = prefix.split("/")[1][:-1]
    runs = f"{prefix}/runs"
    run_id, paused = paused_run(web, "h-5", prefix=prefix)
    answer = web.post(
        f"{runs}/{run_id}/continue", session_id="h-5", background="true", stream="false", tools=decide(paused, True)
    )
    done = web.wait_status(run_id, "h-5", "COMPLETED", prefix=prefix)

    assert [t["tool_name"] for t in paused["tools"]] == ["delete_temp_files"]
    assert answer.status_code == 202
    assert (done["content"], done["queue_attempt"], done[f"{kind}_id"]) == (content, 2, prefix.split("/")[2])


def test_an_inline_paused_run_continues_inline(start_web):
    web = start_web()
    paused = web.post(HITL, message="please delete scratch sleep=0", session_id="h-6", stream="false").json()

    done = web.post(
        f"{HITL}/{paused['run_id']}/continue", session_id="h-6", stream="false", tools=decide(paused, True)
    ).json()

    assert paused["status"] == "PAUSED"
    assert (done["status"], done["content"], done["queue_attempt"]) == ("COMPLETED", "done: tool result received", 2)
