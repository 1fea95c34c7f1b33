"""Through a real `celery worker` process: many runs, session history, duplicate messages."""

import contextlib
import re
import threading

import psutil
import pytest
import redis
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

from agentos_project.celery import app
from agentos_project.core.conf import current
from queueing.models import Ticket
from queueing.router import EXECUTE_TASK, publish, publisher, task_message
from runs.models import FINISHED, Run, RunEvent
from tests.support.runs import submit_background
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def wait_all_finished(run_ids, timeout: float):
    wait_until(
        lambda: Run.objects.filter(pk__in=run_ids, status__in=FINISHED).count() == len(run_ids),
        timeout=timeout,
        interval=0.2,
        what=f"{len(run_ids)} runs to finish",
    )


def test_200_runs_over_20_sessions_complete_with_their_session_history(start_worker):
    start_worker(concurrency=8)
    submitted: dict[str, list[tuple[str, str]]] = {}

    def client_session(number: int):
        client, session = APIClient(), f"e2e-{number}"
        try:
            submitted[session] = [
                (submit_background(client, session, f"turn {k} of {session} sleep=0"), f"turn {k} of {session} sleep=0")
                for k in range(10)
            ]
        finally:
            connection.close()

    threads = [threading.Thread(target=client_session, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run_ids = [run_id for runs in submitted.values() for run_id, _ in runs]
    assert len(set(run_ids)) == 200

    wait_all_finished(run_ids, timeout=90)

    runs = {str(run.run_id): run for run in Run.objects.filter(pk__in=run_ids)}
    for runs_of_session in submitted.values():
        for k, (run_id, message) in enumerate(runs_of_session):
            run = runs[run_id]
            assert run.status == "COMPLETED", (run_id, run.content)
            assert run.content == f"echo: {message} (history: {2 * k} messages)"
            assert run.attempt == 1
    assert Ticket.objects.filter(pk__in=run_ids, status="completed").count() == 200


def test_duplicated_messages_execute_the_run_once(start_worker):
    api = APIClient()
    generous = current().replace("queue", max_attempts=3)
    with override_settings(AGENTOS=generous):
        queued_first = submit_background(api, "dup-1", "queued twice sleep=0")
        publish(queued_first)
        publish(queued_first)
        worker = start_worker(concurrency=4)
        running = submit_background(api, "dup-2", "duplicated while running sleep=2")
        wait_until(lambda: Run.objects.get(pk=running).status == "RUNNING", timeout=10, what="run to start")
        publish(running)
        publish(running)

    wait_all_finished([queued_first, running], timeout=20)
    wait_until(lambda: worker.log().count("not claimable") >= 4, timeout=10, what="duplicates to be dropped")

    for run_id in (queued_first, running):
        run, ticket = Run.objects.get(pk=run_id), Ticket.objects.get(pk=run_id)
        assert (run.status, run.attempt, ticket.status, ticket.attempt) == ("COMPLETED", 1, "completed", 1)
        assert RunEvent.objects.filter(run_id=run_id, event="RunStarted").count() == 1
        assert (
            len(re.findall(rf"ticket\.(?:re)?claim run_id={run_id} session_id=\S+ status=running", worker.log())) == 1
        )


def test_an_answer_postgres_cannot_store_as_is_ends_at_once_and_its_successor_completes(start_worker):
    start_worker(concurrency=2)
    api = APIClient()
    head = submit_background(api, "nul-e2e", "a \\u0000 b sleep=0")
    successor = submit_background(api, "nul-e2e", "after sleep=0")

    wait_all_finished([head, successor], timeout=10)

    runs = {str(r.run_id): r for r in Run.objects.filter(pk__in=[head, successor])}
    assert (runs[head].status, runs[head].content) == ("COMPLETED", "echo: a \ufffd b sleep=0 (history: 0 messages)")
    assert (runs[successor].status, runs[successor].content) == (
        "COMPLETED",
        "echo: after sleep=0 (history: 2 messages)",
    )


def test_plain_messages_take_the_lean_way_and_each_frees_its_thread(start_worker):
    """The reader takes as many messages as the pool has free threads (2): had a thread of the fast path not been
    given back, the worker would have stopped taking messages after two of the six. No Celery request is made for
    them, so Celery's remote control lists none active while one runs."""
    start_worker(concurrency=2)
    api = APIClient()
    running = submit_background(api, "lean-running", "lean sleep=1.5")
    wait_until(lambda: Run.objects.get(pk=running).status == "RUNNING", timeout=10, what="the run to start")
    assert list(app.control.inspect(timeout=1).active().values()) == [[]]
    run_ids = [submit_background(api, f"lean-{n}", "lean sleep=0") for n in range(6)]

    wait_all_finished([running, *run_ids], timeout=20)

    assert list(Run.objects.filter(pk__in=[running, *run_ids]).values_list("status", flat=True)) == ["COMPLETED"] * 7


def consumed_queues() -> list[list[str]]:
    """The queues Celery's consumer reads, per worker."""
    replies = app.control.inspect(timeout=1).active_queues() or {}
    return [sorted(queue["name"] for queue in queues) for queues in replies.values()]


def test_the_reader_takes_the_execute_queue_and_celerys_consumer_reads_its_own(start_worker):
    worker = start_worker(concurrency=2)
    run_id = submit_background(APIClient(), "reader-queues", "read sleep=0")

    wait_all_finished([run_id], timeout=20)
    assert consumed_queues() == [["agentos.celery"]]
    assert "reading agentos with the agentos reader (2 threads)" in worker.log()


def test_after_a_broker_connection_loss_the_reader_reads_again_and_still_counts_the_busy_thread(start_worker, redis_db):
    """Celery restarts its consumer (and so the reader) when its broker connection breaks: the execute queue stays
    the reader's, and the run that holds the only thread meanwhile still holds it (the next message waits)."""
    worker = start_worker(concurrency=1)
    api = APIClient()
    long_run = submit_background(api, "restart-long", "long sleep=8")
    wait_until(lambda: Run.objects.get(pk=long_run).status == "RUNNING", timeout=10, what="the long run to start")
    broker_port = redis_db.connection_pool.connection_kwargs["port"]
    sockets = psutil.Process(worker.pid).net_connections("tcp")
    ports = {c.laddr.port for c in sockets if c.raddr and c.raddr.port == broker_port}
    for client in redis_db.client_list():  # every connection of the worker to Redis, the broker's among them
        if int(client["addr"].rsplit(":", 1)[1]) in ports:
            with contextlib.suppress(redis.ResponseError):  # "No such client": the worker closed it meanwhile
                redis_db.client_kill(client["addr"])
    wait_until(lambda: worker.log().count("reading agentos with the agentos reader") == 2, timeout=20, what="restart")

    after = submit_background(api, "restart-after", "after sleep=0")
    threading.Event().wait(1)
    assert Run.objects.get(pk=long_run).status == "RUNNING"
    assert (Run.objects.get(pk=after).status, redis_db.llen(app.conf.task_default_queue)) == ("PENDING", 1)
    wait_all_finished([long_run, after], timeout=30)
    assert consumed_queues() == [["agentos.celery"]]


def test_with_task_events_on_from_the_start_celerys_consumer_reads_both_queues(start_worker):
    worker = start_worker(concurrency=2, AGENTOS_TASK_EVENTS="true")
    run_id = submit_background(APIClient(), "reader-events", "watched sleep=0")

    wait_all_finished([run_id], timeout=20)
    assert consumed_queues() == [["agentos", "agentos.celery"]]
    assert "agentos reader" not in worker.log()


def test_a_message_with_an_eta_takes_celerys_way(start_worker, redis_db):
    api = APIClient()
    run_id = submit_background(api, "lean-eta", "later sleep=0")
    assert publisher.flush()
    redis_db.delete(app.conf.task_default_queue)  # the message accept sent: only the one with an ETA is left
    publish(run_id, countdown=3)
    start_worker(concurrency=2)

    def scheduled():
        replies = app.control.inspect(timeout=1).scheduled() or {}
        return [entry["request"]["args"] for entries in replies.values() for entry in entries]

    assert wait_until(scheduled, timeout=10, what="the worker to hold the message for its ETA") == [[run_id]]
    wait_all_finished([run_id], timeout=20)
    assert Run.objects.get(pk=run_id).status == "COMPLETED"


def test_once_a_monitor_turns_task_events_on_messages_take_celerys_way(start_worker):
    """Flower's `enable_events` adds the task group to a running worker: from then on Celery builds its request,
    so its remote control lists the running task."""
    start_worker(concurrency=2)
    assert list(app.control.enable_events(reply=True, timeout=2)[0].values()) == [{"ok": "task events enabled"}]
    run_id = submit_background(APIClient(), "lean-events", "watched sleep=1.5")
    wait_until(lambda: Run.objects.get(pk=run_id).status == "RUNNING", timeout=10, what="the run to start")

    [active] = app.control.inspect(timeout=1).active().values()

    assert [entry["args"] for entry in active] == [[run_id]]
    wait_all_finished([run_id], timeout=20)


def test_a_message_whose_execution_raises_is_logged_and_acknowledged(start_worker, redis_db):
    """Prefetch 1: the next run starts only once the failed message was acknowledged."""
    worker = start_worker(concurrency=1)
    redis_db.lpush(app.conf.task_default_queue, task_message("not-a-ticket"))
    wait_until(lambda: "ticket=not-a-ticket execute raised" in worker.log(), timeout=10, what="the failure logged")

    run_id = submit_background(APIClient(), "lean-after", "after sleep=0")

    wait_all_finished([run_id], timeout=20)
    assert Run.objects.get(pk=run_id).status == "COMPLETED"
    assert "ERROR agentos.queue ticket=not-a-ticket execute raised" in worker.log()
    assert "celery.app.trace" not in worker.log()


AMQP = "amqp://guest:guest@127.0.0.1:5672//"


def test_the_lean_way_acknowledges_on_a_rabbitmq_broker_too(start_worker):
    """RabbitMQ holds a message unacknowledged until the worker says so: with prefetch 1, the second run of this
    test starts only once the first one's message was acknowledged through the consumer's event loop."""
    try:
        broker = app.connection_for_write(AMQP)
        broker.ensure_connection(max_retries=1)
    except Exception as error:  # noqa: BLE001 - any failure to connect means there is no broker to test against
        pytest.skip(f"RabbitMQ not answering at {AMQP}: {error}")
    worker = start_worker(concurrency=1, CELERY_BROKER_URL=AMQP)
    api = APIClient()
    run_ids = [submit_background(api, f"lean-amqp-{n}", "over amqp sleep=0") for n in range(2)]
    with broker:
        queue = app.conf.task_default_queue
        broker.default_channel.queue_purge(queue)  # what an earlier test left
        for run_id in run_ids:
            app.send_task(EXECUTE_TASK, args=[run_id], connection=broker, exchange="", routing_key=queue)

    wait_all_finished(run_ids, timeout=20)
    assert list(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True)) == ["COMPLETED"] * 2
    assert "celery.app.trace" not in worker.log()
