"""Fair share (CONTRACT 17) in the queue alone: the per-user cap, the round robin window, held tickets let in, and
deadlines; the races proved with real, separate connections."""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time

import pytest
from django.db.models import F
from django.db.models.functions import Now

from agentos_project.core.conf import current
from queueing import router, selectors, tickets
from queueing.models import Ticket
from queueing.seam import Outcome
from queueing.sweeper import sweep_once
from tests.support.conf import with_conf
from tests.support.waiting import in_threads

from .conftest import accept, backdate, broker_messages, claim, finish, snapshot

pytestmark = pytest.mark.django_db(transaction=True)


def _accepts(user_id: str | None, count: int, **fields) -> list[str]:
    return [accept(session_id=f"{user_id}-{n}-{time.monotonic_ns()}", user_id=user_id, **fields) for n in range(count)]


def _held(ids: list[str]) -> list[bool]:
    held = {str(ticket_id): held for ticket_id, held in Ticket.objects.filter(pk__in=ids).values_list("pk", "held")}
    return [held[ticket_id] for ticket_id in ids]


def _published(redis_db) -> list[str]:
    assert router.publisher.flush()
    return [message["args"][0] for message in broker_messages(redis_db)]


@with_conf("queue", round_robin_window=2, max_running_per_user=0)
def test_an_accept_beyond_its_users_window_is_held_and_sends_no_message(redis_db):
    big = _accepts("big", 4)
    small = _accepts("small", 1)
    anonymous = _accepts(None, 3)

    assert _held(big) == [False, False, True, True]
    assert _held(small) == [False]
    assert _held(anonymous) == [False, False, False], "a run without a user takes no turn"
    assert _published(redis_db) == [*big[:2], *small, *anonymous]
    assert [snapshot(ticket_id)["turn"] for ticket_id in big] == ["w", "w", "h", "h"]


@with_conf("queue", round_robin_window=2, max_running_per_user=0)
def test_each_claim_lets_its_users_oldest_held_ticket_in_at_the_back_of_the_line(redis_db):
    big = _accepts("big", 5)
    small = _accepts("small", 2)
    assert _published(redis_db) == [*big[:2], *small]

    claim(big[0])
    claim(big[1])

    assert _held(big) == [False, False, False, False, True]
    assert _published(redis_db) == [*big[:2], *small, big[2], big[3]], "behind the other user's runs"
    assert snapshot(big[0])["turn"] == "r"


@with_conf("queue", round_robin_window=0, max_running_per_user=0)
def test_with_both_rules_off_nothing_is_held(redis_db):
    big = _accepts("big", 5)

    assert _held(big) == [False] * 5
    assert _published(redis_db) == big


@with_conf("queue", round_robin_window=0, max_running_per_user=2)
def test_the_cap_holds_a_users_third_run_until_one_of_the_two_ends(redis_db):
    first, second, third = _accepts("capped", 3)
    assert _held([first, second, third]) == [False, False, True], "no room: two wait for a worker already"
    assert _published(redis_db) == [first, second]

    one, two = claim(first), claim(second)
    assert claim(third) is None, "a stray message cannot start a third"
    assert snapshot(third)["attempt"] == 0, "a held run spends no attempt"

    finish(one, "completed")

    assert _held([third]) == [False]
    assert _published(redis_db)[-1] == third, "the end of a run lets the held one in"
    assert claim(third) is not None
    assert claim(accept(session_id="capped-late", user_id="capped")) is None
    finish(two, "completed")


@with_conf("queue", round_robin_window=0, max_running_per_user=1)
def test_a_claim_refused_by_the_cap_holds_the_ticket_and_a_paused_run_does_not_count(redis_db):
    with with_conf("queue", round_robin_window=0, max_running_per_user=0):
        first, second = _accepts("pauser", 2)
    owner = claim(first)

    assert claim(second) is None
    assert snapshot(second)["held"] is True

    finish(owner, "paused")

    assert snapshot(second)["held"] is False, "a paused run does not count against the cap"
    assert claim(second) is not None


@with_conf("queue", round_robin_window=0, max_running_per_user=1)
def test_a_stale_lease_is_reclaimed_at_the_cap():
    (ticket_id,) = _accepts("reclaimer", 1, max_attempts=2)
    claim(ticket_id, "w1")
    backdate(ticket_id)

    again = claim(ticket_id, "w2")

    assert again is not None and again.attempt == 2


@with_conf("queue", round_robin_window=0, max_running_per_user=2)
def test_claims_racing_for_the_last_place_under_the_cap_have_one_winner():
    for round_ in range(10):
        with with_conf("queue", round_robin_window=0, max_running_per_user=0):
            ids = _accepts(f"racer-{round_}", 6)
        owner = claim(ids[0])

        claims = in_threads(5, lambda i, ids=ids: claim(ids[i + 1], f"worker-{i}"))

        assert sum(c is not None for c in claims) == 1, f"round {round_}"
        assert Ticket.objects.filter(user_id=f"racer-{round_}", status="running").count() == 2
        finish(owner, "completed")


@with_conf("queue", round_robin_window=0, max_running_per_user=1)
def test_a_retry_lets_a_held_ticket_in():
    first, second = _accepts("retrier", 2, max_attempts=2)
    owner = claim(first)
    assert _held([second]) == [True]

    assert tickets.ticket_retry(claim=owner, outcome=Outcome("failed", error="boom", retryable=True), delay_seconds=30)

    assert _held([second]) == [False]


@with_conf("queue", round_robin_window=2, max_running_per_user=0)
def test_a_cancel_of_a_waiting_ticket_lets_a_held_one_in(redis_db):
    big = _accepts("canceller", 3)

    assert tickets.ticket_cancel(ticket_id=big[0], error="cancelled before execution") == "queued"

    assert _held(big[1:]) == [False, False]


@with_conf("queue", round_robin_window=2, max_running_per_user=0)
def test_the_sweeper_lets_in_what_the_claims_missed(redis_db):
    big = _accepts("missed", 3)
    Ticket.objects.filter(pk=big[0]).update(status="cancelled", is_head=False)  # as a race would leave it

    report = sweep_once(current().queue)

    assert report.released == 1
    assert _held(big) == [False, False, False]
    assert _published(redis_db)[-1] == big[2]


@with_conf("queue", round_robin_window=2, max_running_per_user=0)
def test_the_sweeper_lets_in_each_users_oldest_held_tickets_as_far_as_its_room_goes(redis_db):
    two_gone, one_gone, none_gone = _accepts("two-gone", 4), _accepts("one-gone", 5), _accepts("none-gone", 3)
    gone = [*two_gone[:2], one_gone[0]]
    Ticket.objects.filter(pk__in=gone).update(status="cancelled", is_head=False)  # as races would leave them
    redis_db.flushdb()

    report = sweep_once(current().queue)

    assert report.released == 3
    assert _held(two_gone[2:]) == [False, False]
    assert _held(one_gone[1:]) == [False, False, True, True], "one place: the oldest held ticket takes it"
    assert _held(none_gone) == [False, False, True]
    assert sorted(_published(redis_db)) == sorted([*two_gone[2:], one_gone[2]])


def test_held_tickets_are_let_in_once_both_rules_are_turned_off(redis_db):
    with with_conf("queue", round_robin_window=1, max_running_per_user=0):
        held = _accepts("turned-off", 3)
    assert _held(held) == [False, True, True]

    with with_conf("queue", round_robin_window=0, max_running_per_user=0):
        report = sweep_once(current().queue)

    assert report.released == 2
    assert _held(held) == [False, False, False]
    assert sorted(_published(redis_db)[-2:]) == sorted(held[1:])  # one statement lets both in: in no order


def test_the_sweeper_does_not_publish_a_held_ticket_as_a_lost_message(redis_db):
    with with_conf("queue", round_robin_window=1, max_running_per_user=0):
        big = _accepts("lost", 2)
    backdate(big[1], field="updated_at", seconds=60)
    backdate(big[1], field="available_at", seconds=60)
    redis_db.flushdb()

    with with_conf("queue", round_robin_window=1, max_running_per_user=0):
        report = sweep_once(dataclasses.replace(current().queue))

    assert report.lost_messages == 0 and report.released == 0
    assert _held(big) == [False, True]


# Deadlines.


def test_the_expiry_text_gives_the_seconds_as_written():
    assert [tickets.expired_text(s) for s in (2592000, 0.5, 123456.7, 30.0)] == [
        "expired after 2592000 s in the queue",
        "expired after 0.5 s in the queue",
        "expired after 123456.7 s in the queue",
        "expired after 30 s in the queue",
    ]


def test_a_queued_ticket_past_its_deadline_is_never_claimed_and_the_sweeper_expires_it(executor, redis_db):
    head = accept(session_id="late", ttl_seconds=30)
    behind = accept(session_id="late")
    assert snapshot(head)["ttl_seconds"] == 30.0
    expires_in = (snapshot(head)["expires_at"] - snapshot(head)["created_at"]).total_seconds()
    assert expires_in == pytest.approx(30, abs=0.01)
    Ticket.objects.filter(pk=head).update(expires_at=Now())

    assert claim(head) is None
    report = sweep_once(current().queue)

    assert report.expired == 1
    ended = snapshot(head)
    assert (ended["status"], ended["error"], ended["is_head"]) == (
        "cancelled",
        "expired after 30 s in the queue",
        False,
    )
    assert executor.settled(head) == [("cancelled", 0, "expired after 30 s in the queue")]
    assert snapshot(behind)["is_head"] is True
    assert _published(redis_db)[-1] == behind
    assert claim(behind) is not None


def test_a_ticket_waiting_behind_its_head_expires_too(executor):
    head = accept(session_id="line")
    behind = accept(session_id="line", ttl_seconds=0.5)
    owner = claim(head)
    Ticket.objects.filter(pk=behind).update(expires_at=F("expires_at") - datetime.timedelta(seconds=1))

    assert tickets.ticket_expire(ticket_id=behind)

    assert snapshot(behind)["error"] == "expired after 0.5 s in the queue"
    finish(owner, "completed")
    assert Ticket.objects.filter(session_id="line", status="queued").count() == 0


def test_a_started_ticket_never_expires(executor):
    ticket_id = accept(session_id="started", ttl_seconds=30)
    owner = claim(ticket_id)

    assert snapshot(ticket_id)["expires_at"] is None
    Ticket.objects.filter(pk=ticket_id).update(expires_at=Now())  # as if a deadline had been left on it
    assert not tickets.ticket_expire(ticket_id=ticket_id)
    finish(owner, "completed")
    assert snapshot(ticket_id)["status"] == "completed"


def test_a_requeue_gives_a_new_deadline(executor):
    ticket_id = accept(session_id="requeued", ttl_seconds=30)
    Ticket.objects.filter(pk=ticket_id).update(expires_at=Now())
    assert tickets.ticket_expire(ticket_id=ticket_id)
    backdate(ticket_id, field="created_at", seconds=600)

    assert tickets.ticket_requeue(ticket_id=ticket_id, grace_seconds=60) == tickets.RequeueResult.REQUEUED

    again = snapshot(ticket_id)
    assert again["status"] == "queued"
    assert 29 < (again["expires_at"] - again["updated_at"]).total_seconds() <= 30
    assert claim(ticket_id) is not None


def test_a_claim_at_the_moment_of_the_deadline_either_runs_or_expires_the_ticket(executor):
    outcomes = []
    for round_ in range(20):
        ticket_id = accept(session_id=f"moment-{round_}", ttl_seconds=0.05)
        start = threading.Barrier(2)

        def work(index, ticket_id=ticket_id, start=start, pause=0.05 - 0.01 * (round_ % 5)):
            start.wait()
            time.sleep(pause)  # around the deadline, from before it to after it
            if index == 0:
                return claim(ticket_id, "racer") is not None
            return tickets.ticket_expire(ticket_id=ticket_id)

        claimed, expired = in_threads(2, work)
        assert not (claimed and expired), f"round {round_}: both ran and expired"
        if not claimed:  # the claim lost: whatever the sweep's timing, the ticket ends expired, never started
            time.sleep(0.06)
            tickets.ticket_expire(ticket_id=ticket_id)
            assert snapshot(ticket_id)["status"] == "cancelled"
            assert [started for started in executor.started if started[0] == ticket_id] == []
        else:
            assert snapshot(ticket_id)["status"] == "running"
        outcomes.append("claimed" if claimed else "expired")
    assert set(outcomes) == {"claimed", "expired"}, outcomes


@with_conf("queue", round_robin_window=0, max_running_per_user=2)
def test_the_stats_count_running_per_user_the_runs_held_by_the_cap_and_expirations():
    capped = _accepts("alice", 4)
    claim(capped[0])
    claim(capped[1])
    _accepts("bob", 1)
    claim(_accepts("bob", 1)[0])
    late = accept(session_id="late-stats", user_id="carol", ttl_seconds=5)
    Ticket.objects.filter(pk=late).update(expires_at=Now())
    tickets.ticket_expire(ticket_id=late)

    fair = selectors.fair_share()

    assert fair == selectors.FairShare({"alice": 2, "bob": 1}, held_by_cap=2, held_for_turn=0, expired=1)
    waiting = selectors.ticket_user_cap(ticket_id=capped[3], cap=2)
    assert (waiting.user_id, waiting.running, waiting.longest) == ("alice", 2, capped[0])
    assert selectors.ticket_user_cap(ticket_id=capped[3], cap=3) is None
