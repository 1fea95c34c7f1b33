"""The heartbeat thread refreshes the leases of the attempts its worker executes, and only those."""

import time

import pytest

from queueing.heartbeat import Heartbeat

from .conftest import accept, backdate, claim, snapshot

pytestmark = pytest.mark.django_db(transaction=True)


def beat_for(worker_id: str, attempts: list[tuple[str, int]], seconds: float = 0.6) -> None:
    heartbeat = Heartbeat(worker_id=worker_id, interval=0.05, attempts=lambda: attempts)
    heartbeat.start()
    time.sleep(seconds)
    heartbeat.stop()
    heartbeat.join(2)
    assert not heartbeat.is_alive()


def test_heartbeat_thread_keeps_its_workers_leases_fresh():
    mine, theirs = accept(session_id="hb-1", max_attempts=2), accept(session_id="hb-2", max_attempts=2)
    claim(mine, "me")
    claim(theirs, "them")
    backdate(mine)
    backdate(theirs)
    stale_mine, stale_theirs = snapshot(mine)["locked_at"], snapshot(theirs)["locked_at"]

    beat_for("me", [(mine, 1), (theirs, 1)])

    assert snapshot(mine)["locked_at"] > stale_mine
    assert claim(mine, "thief", grace=60) is None, "a refreshed lease is not stale, though budget is left"
    assert snapshot(theirs)["locked_at"] == stale_theirs, "another worker's lease is not this heartbeat's"
    assert claim(theirs, "thief", grace=60) is not None


def test_heartbeat_leaves_a_lease_its_worker_abandoned_to_go_stale():
    abandoned, running = accept(session_id="hb-3", max_attempts=2), accept(session_id="hb-4")
    claim(abandoned, "me")
    claim(running, "me")
    backdate(abandoned)
    backdate(running)
    before, stale_running = snapshot(abandoned)["locked_at"], snapshot(running)["locked_at"]

    beat_for("me", [(running, 1)])

    assert snapshot(running)["locked_at"] > stale_running, "the heartbeat did beat"
    assert snapshot(abandoned)["locked_at"] == before, "but not for the attempt it no longer executes"
    assert claim(abandoned, "thief", grace=60) is not None
