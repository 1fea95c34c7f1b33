"""The heartbeat thread refreshes the leases of the attempts its worker executes, and only those."""

import time

import pytest

from queueing.heartbeat import Heartbeat

from .conftest import accept, backdate, claim, set_budget, snapshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_heartbeat_thread_keeps_its_workers_leases_fresh():
    mine, theirs = accept(session_id="hb-1"), accept(session_id="hb-2")
    set_budget(theirs, 2)
    claim(mine, "me")
    claim(theirs, "them")
    backdate(mine)
    backdate(theirs)
    stale_theirs = snapshot(theirs)["locked_at"]

    heartbeat = Heartbeat(worker_id="me", interval=0.05, claims=lambda: [(mine, 1), (theirs, 1)])
    heartbeat.start()
    time.sleep(0.3)
    heartbeat.stop()
    heartbeat.join(2)

    assert not heartbeat.is_alive()
    assert claim(mine, "thief", grace=60) is None, "a refreshed lease is not stale"
    assert snapshot(theirs)["locked_at"] == stale_theirs
    assert claim(theirs, "thief", grace=60) is not None


def test_heartbeat_leaves_a_lease_its_worker_abandoned_to_go_stale():
    abandoned = accept(session_id="hb-3")
    claim(abandoned, "me")
    backdate(abandoned)
    before = snapshot(abandoned)["locked_at"]

    heartbeat = Heartbeat(worker_id="me", interval=0.05, claims=lambda: [])
    heartbeat.start()
    time.sleep(0.2)
    heartbeat.stop()
    heartbeat.join(2)

    assert snapshot(abandoned)["locked_at"] == before
