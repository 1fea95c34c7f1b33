"""Durable steps (the step journal) through real processes: a web replica, Celery workers that are SIGKILLed or
SIGSTOPped inside a tool, a sweeper, and a fake OpenAI-compatible server. The agent's three tools count their side
effects in a table of the test's own (`user_modules/ledger.py`)."""

from __future__ import annotations

import datetime
import json
import re
import signal
import time

import pytest
import requests
from django.db import connection
from django.db.models import F

from agents_registry.journal import INTERRUPTED_FAILS, OUTCOME_UNKNOWN
from queueing.models import Ticket
from queueing.shutdown import INTERRUPTED
from runs.models import AgentSession, Run, RunEvent, Step
from tests.support.http import metric_samples
from tests.support.waiting import wait_until

from ..agents_registry.user_modules.ledger import EFFECTS, INSTRUCTIONS
from ..fake_openai import Answer

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
LEDGER = "/agents/ledger"
MODULE = "tests.agents_registry.user_modules.ledger"
GRACE = {"AGENTOS_LOCK_GRACE_SECONDS": "3", "AGENTOS_POLL_INTERVAL": "0.5"}
TRIP = [
    Answer(tool_calls=[("call_1", "reserve_seat", {"flight": "LH 400"})], usage={"input": 10, "output": 5}),
    Answer(tool_calls=[("call_2", "charge_card", {"amount": 420})], usage={"input": 20, "output": 5}),
    Answer(tool_calls=[("call_3", "send_email", {"to": "ada@example.com"})], usage={"input": 30, "output": 5}),
    Answer(text="Booked: seat 12A, card charged.", usage={"input": 40, "output": 8}),
]


@pytest.fixture
def effects():
    """The table the ledger's tools write a row to per side effect; `effects()` counts them by tool."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {EFFECTS} (tool text, run_id text, attempt int)")
        cursor.execute(f"TRUNCATE {EFFECTS}")

    def counted() -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT tool, count(*) FROM {EFFECTS} GROUP BY tool")
            return dict(cursor.fetchall())

    yield counted
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {EFFECTS}")


@pytest.fixture
def ledger(start_web, start_worker, start_sweeper, fake_openai, tmp_path):
    """A web replica and a sweeper serving the ledger agent (`components` names the module's function), and a
    worker of one slot whose `send_email` hangs while the file `hang` exists; the fake model scripted with TRIP."""

    def start(components: str = "components", max_attempts: int = 2, **more: str):
        hang = tmp_path / "hang"
        hang.touch()
        env = {
            "AGENTOS_COMPONENTS": f"{MODULE}:{components}",
            "FAKE_OPENAI_URL": fake_openai.url,
            "AGENTOS_MAX_ATTEMPTS": str(max_attempts),
            "LEDGER_HANG": str(hang),
            **GRACE,
            **more,
        }
        fake_openai.answer(*TRIP)
        web = start_web(**env)
        start_sweeper(**env)
        return web, start_worker(concurrency=1, **env), env, hang

    return start


def killed_inside_the_third_tool(web, worker, effects, hang, session_id: str) -> str:
    """Submit the trip, wait until the worker is inside `send_email` (its two tools before it completed), SIGKILL
    it, and stop the hang for whatever runs next; the run's id."""
    run_id = web.submitted(session_id, "book my trip", prefix=LEDGER)
    wait_until(lambda: effects().get("send_email") == 1, timeout=30, what="the worker to be inside send_email")
    worker.signal(signal.SIGKILL)
    hang.unlink()
    return run_id


def replay_counters(web) -> tuple[float, ...]:
    """What /metrics counts of the journal: replayed model calls, replayed tool calls, interrupted tool calls."""
    samples = metric_samples(requests.get(f"{web.url}/metrics", timeout=10).text)
    names = ("replayed_model_calls", "replayed_tool_calls", "interrupted_tool_calls")
    return tuple(samples.get((f"agentos_runs_{name}_total", ()), 0.0) for name in names)


def requests_seen(fake_openai) -> list[int]:
    """For each request the fake model received: how many tool results its messages carried (which turn it is)."""
    return [sum(1 for m in request["messages"] if m["role"] == "tool") for request in fake_openai.requests]


def test_a_run_killed_inside_its_third_tool_resumes_after_the_second(ledger, start_worker, effects, fake_openai):
    web, worker, env, hang = ledger()
    run_id = killed_inside_the_third_tool(web, worker, effects, hang, "trip-1")
    start_worker(concurrency=1, **env)

    polled = web.wait_status(run_id, "trip-1", "COMPLETED", prefix=LEDGER, timeout=40)

    assert polled["content"] == "Booked: seat 12A, card charged."
    assert effects() == {"reserve_seat": 1, "charge_card": 1, "send_email": 1}
    assert requests_seen(fake_openai) == [0, 1, 2, 3], "no journaled model call was asked again"
    told = fake_openai.requests[-1]["messages"][-1]
    assert told == {
        "role": "tool",
        "tool_call_id": "call_3",
        "content": OUTCOME_UNKNOWN.format(tool="send_email", call_id="call_3"),
    }
    assert polled["queue_attempt"] == 2
    assert [(s["kind"], s["tool"], s["status"], s["attempt"], s["replays"]) for s in polled["steps"]] == [
        ("model", None, "completed", 1, 1),
        ("tool", "reserve_seat", "completed", 1, 1),
        ("model", None, "completed", 1, 1),
        ("tool", "charge_card", "completed", 1, 1),
        ("model", None, "completed", 1, 1),
        ("tool", "send_email", "completed", 2, 0),
        ("model", None, "completed", 2, 0),
    ]
    assert polled["steps_replayed"] == 5
    wait_until(lambda: replay_counters(web) == (3, 2, 1), timeout=10, what="/metrics to count the replay")
    print("\npoll of a run killed inside its third tool:", polled)
    completed = [e.data["tool"]["tool_name"] for e in RunEvent.objects.filter(run_id=run_id, event="ToolCallCompleted")]
    assert completed == ["reserve_seat", "charge_card", "send_email"], "each call completed once in the stream"
    replayed = RunEvent.objects.get(run_id=run_id, event="CustomEvent").data
    assert (replayed["name"], replayed["attempt"], replayed["model_calls"], replayed["tool_calls"]) == (
        "StepsReplayed",
        2,
        3,
        2,
    )


def test_an_idempotent_tool_interrupted_runs_again(ledger, start_worker, effects, fake_openai):
    web, worker, env, hang = ledger("idempotent")
    run_id = killed_inside_the_third_tool(web, worker, effects, hang, "trip-2")
    start_worker(concurrency=1, **env)

    polled = web.wait_status(run_id, "trip-2", "COMPLETED", prefix=LEDGER, timeout=40)

    assert effects() == {"reserve_seat": 1, "charge_card": 1, "send_email": 2}
    assert requests_seen(fake_openai) == [0, 1, 2, 3]
    assert fake_openai.requests[-1]["messages"][-1]["content"] == "sent to ada@example.com"
    assert polled["content"] == "Booked: seat 12A, card charged."


def test_an_interrupted_tool_that_must_not_guess_fails_the_run_naming_it(ledger, start_worker, effects, fake_openai):
    web, worker, env, hang = ledger("failing")
    run_id = killed_inside_the_third_tool(web, worker, effects, hang, "trip-3")
    start_worker(concurrency=1, **env)

    polled = web.wait_status(run_id, "trip-3", "ERROR", prefix=LEDGER, timeout=40)

    assert polled["content"] == INTERRUPTED_FAILS.format(tool="send_email", call_id="call_3", attempt=1)
    assert effects() == {"reserve_seat": 1, "charge_card": 1, "send_email": 1}
    assert requests_seen(fake_openai) == [0, 1, 2]
    assert [s["status"] for s in polled["steps"]][-1] == "interrupted"
    job = web.get(f"/queue/jobs/{run_id}")
    assert (job["status"], job["error"]) == ("failed", polled["content"]), "a dead letter an operator can requeue"

    Ticket.objects.filter(pk=run_id).update(completed_at=F("completed_at") - datetime.timedelta(hours=1))
    assert requests.post(f"{web.url}/queue/jobs/{run_id}/requeue", timeout=10).status_code == 200
    again = web.wait_status(run_id, "trip-3", "COMPLETED", prefix=LEDGER, timeout=40)
    assert again["queue_attempt"] == 3
    assert effects() == {"reserve_seat": 1, "charge_card": 1, "send_email": 2}, "the operator's requeue runs it again"
    assert requests_seen(fake_openai) == [0, 1, 2, 3]
    assert fake_openai.requests[-1]["messages"][-1]["content"] == "sent to ada@example.com"


def test_a_changed_component_replays_nothing_past_the_first_step_that_differs(
    ledger, start_worker, effects, fake_openai
):
    web, worker, env, hang = ledger()
    run_id = killed_inside_the_third_tool(web, worker, effects, hang, "trip-4")
    fake_openai.answer(*TRIP)  # the reworded agent's model answers the same
    start_worker(concurrency=1, **{**env, "AGENTOS_COMPONENTS": f"{MODULE}:reworded"})

    web.wait_status(run_id, "trip-4", "COMPLETED", prefix=LEDGER, timeout=40)

    systems = [request["messages"][0]["content"] for request in fake_openai.requests]
    assert systems[:3] == [INSTRUCTIONS] * 3
    assert set(systems[3:]) == {"Book the trip, and be quick about it."}
    assert requests_seen(fake_openai)[3:] == [0, 1, 2, 3], "the first model call differs: all runs live again"
    assert effects() == {"reserve_seat": 2, "charge_card": 2, "send_email": 2}
    steps = list(Step.objects.filter(run_id=run_id).values_list("attempt", "replays"))
    assert steps == [(2, 0)] * 7


def test_a_frozen_attempt_that_wakes_writes_nothing_into_its_successors_journal(
    ledger, start_worker, effects, fake_openai, tmp_path
):
    web, zombie, env, hang = ledger()
    run_id = web.submitted("trip-5", "book my trip", prefix=LEDGER)
    wait_until(lambda: effects().get("send_email") == 1, timeout=30, what="the worker to be inside send_email")
    zombie.signal(signal.SIGSTOP)
    start_worker(concurrency=1, **env)
    web.wait_status(run_id, "trip-5", "COMPLETED", prefix=LEDGER, timeout=40)
    journal = list(Step.objects.filter(run_id=run_id).values())
    events = list(RunEvent.objects.filter(run_id=run_id).values_list("event_index", "event", "attempt"))

    hang.unlink()  # the zombie's send_email returns when it wakes, and its journal write is refused
    zombie.signal(signal.SIGCONT)
    wait_until(lambda: re.search(rf"run={run_id} attempt=1 fenced", zombie.log()), timeout=15, what="the refusal")
    time.sleep(1)

    assert list(Step.objects.filter(run_id=run_id).values()) == journal
    assert list(RunEvent.objects.filter(run_id=run_id).values_list("event_index", "event", "attempt")) == events
    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert effects()["send_email"] == 1, "the successor reported the call it found unfinished, and ran it not"


def continued_into_the_slow_model_call(web, fake_openai, session_id: str) -> str:
    """Submit the refund, confirm it when the run pauses, and wait until its continuation, the refund done, waits
    on the model's next answer (60 s); the run's id."""
    fake_openai.answer(
        Answer(tool_calls=[("call_r", "refund", {"amount": 30})]),
        Answer(text="never seen: the worker stops while waiting for it", delay=60),
        Answer(text="Refunded 30 EUR."),
    )
    run_id = web.submitted(session_id, "refund my 30 EUR", prefix=LEDGER)
    paused = web.wait_status(run_id, session_id, "PAUSED", prefix=LEDGER, timeout=30)
    confirmed = json.dumps([{**call, "confirmed": True} for call in paused["tools"]])
    answer = requests.post(
        f"{web.url}{LEDGER}/runs/{run_id}/continue",
        data={"tools": confirmed, "session_id": session_id, "background": "true", "stream": "false"},
        timeout=30,
    )
    assert answer.status_code == 202, answer.text
    wait_until(lambda: len(fake_openai.requests) == 2, timeout=30, what="the model call after the refund")
    return run_id


def test_a_continuation_killed_after_its_confirmed_tool_resumes_after_it(ledger, start_worker, effects, fake_openai):
    web, worker, env, hang = ledger("refunds", max_attempts=1)
    run_id = continued_into_the_slow_model_call(web, fake_openai, "refund-1")
    worker.signal(signal.SIGKILL)
    start_worker(concurrency=1, **env)

    polled = web.wait_status(run_id, "refund-1", "COMPLETED", prefix=LEDGER, timeout=40)

    assert polled["content"] == "Refunded 30 EUR."
    assert effects() == {"refund": 1}, "the confirmed tool ran once"
    assert [(s["leg"], s["kind"], s["tool"], s["attempt"], s["replays"]) for s in polled["steps"]] == [
        (1, "tool", "refund", 2, 1),
        (1, "model", None, 3, 0),
    ]
    assert polled["queue_attempt"] == 3, "the lost continuation was queued once more, not failed"
    told = [m for m in fake_openai.requests[2]["messages"] if m["role"] == "tool"]
    assert told == [{"role": "tool", "tool_call_id": "call_r", "content": "refunded 30 EUR"}]


def test_a_continuation_a_warm_shutdown_stops_after_its_confirmed_tool_resumes_after_it(
    ledger, start_worker, effects, fake_openai
):
    stop_soon = {"AGENTOS_STOP_TIMEOUT_SECONDS": "1", "AGENTOS_RETRY_DELAY_SECONDS": "0"}
    web, worker, env, hang = ledger("refunds", max_attempts=1, **stop_soon)
    run_id = continued_into_the_slow_model_call(web, fake_openai, "refund-2")
    worker.signal(signal.SIGTERM)  # drains 1 s, then settles the attempt blocked in its model call, and exits
    assert worker.process.wait(timeout=20) == 0
    job = web.get(f"/queue/jobs/{run_id}")
    assert (job["status"], job["error"], job["attempt"], job["max_attempts"]) == ("queued", INTERRUPTED, 2, 3)
    start_worker(concurrency=1, **env)

    polled = web.wait_status(run_id, "refund-2", "COMPLETED", prefix=LEDGER, timeout=40)

    assert polled["content"] == "Refunded 30 EUR."
    assert effects() == {"refund": 1}, "the confirmed tool ran once: a SIGTERM saves what a SIGKILL saves"
    assert polled["queue_attempt"] == 3


def test_a_run_killed_after_its_tools_changed_the_session_state_ends_with_that_state(
    ledger, start_worker, effects, fake_openai
):
    web, worker, env, hang = ledger()
    run_id = killed_inside_the_third_tool(web, worker, effects, hang, "trip-6")
    start_worker(concurrency=1, **env)

    web.wait_status(run_id, "trip-6", "COMPLETED", prefix=LEDGER, timeout=40)

    state = AgentSession.objects.get(pk="trip-6").session_state
    print("\nsession state after a kill inside send_email and the retry:", state)
    assert state == {"seat": "12A on LH 400", "charged": [420]}, "the replayed tools' changes, each made once"
    assert effects() == {"reserve_seat": 1, "charge_card": 1, "send_email": 1}


def by_turn(request: dict) -> Answer:
    """The trip's next answer, by how many tool results the request carries after its last user message."""
    messages = request["messages"]
    last_user = max(number for number, message in enumerate(messages) if message["role"] == "user")
    return TRIP[min(sum(1 for message in messages[last_user:] if message["role"] == "tool"), len(TRIP) - 1)]


def test_a_requeue_after_later_runs_of_its_session_completed_repeats_no_completed_tool(
    ledger, start_worker, effects, fake_openai
):
    web, worker, env, hang = ledger(max_attempts=1)
    fake_openai.respond(by_turn)
    first = killed_inside_the_third_tool(web, worker, effects, hang, "trip-7")
    start_worker(concurrency=1, **env)
    web.wait_status(first, "trip-7", "ERROR", prefix=LEDGER, timeout=40)
    later = web.submitted("trip-7", "and book my way back", prefix=LEDGER)
    web.wait_status(later, "trip-7", "COMPLETED", prefix=LEDGER, timeout=40)
    asked = len(fake_openai.requests)

    requeued = requests.post(f"{web.url}/queue/jobs/{first}/requeue", params={"force": "true"}, timeout=10)
    assert requeued.status_code == 200, requeued.text
    polled = web.wait_status(first, "trip-7", "COMPLETED", prefix=LEDGER, timeout=40)

    ledger_of_first = effects_of(first)
    print("\nside effects of a run requeued after a later run of its session completed:", ledger_of_first)
    assert ledger_of_first == {"reserve_seat": 1, "charge_card": 1, "send_email": 1}
    assert len(fake_openai.requests) - asked == 1, "its three model calls replayed; only the one after send_email"
    assert polled["steps_replayed"] == 5
    assert effects_of(later) == {"reserve_seat": 1, "charge_card": 1, "send_email": 1}


def effects_of(run_id: str) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tool, count(*) FROM {EFFECTS} WHERE run_id = %s GROUP BY tool", [run_id])
        return dict(cursor.fetchall())
