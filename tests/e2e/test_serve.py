"""`python manage.py serve` (what `make serve` runs): web + worker + sweeper answer, run, replay the seed
scenario for `manage.py demo`, survive a dead child, refuse a second start, and stop together on Ctrl-C."""

import io
import json
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime

import psutil
import pytest
import requests
from django.core.management import call_command

from agentos_project.embedded import FolderLock
from queueing.tickets import SWEEP_ERROR
from tests.support.http import free_port, metric_samples
from tests.support.processes import ROOT, embedded_env, process_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
GRACE = {"AGENTOS_LOCK_GRACE_SECONDS": "3", "AGENTOS_POLL_INTERVAL": "0.5"}


def children_named(serve, word: str) -> list[psutil.Process]:
    return [p for p in psutil.Process(serve.pid).children() if word in " ".join(p.cmdline())]


def test_serve_answers_health_runs_a_stub_run_and_stops_every_child_on_sigint(start_serve, tmp_path):
    serve = start_serve()
    assert serve.get("/health")["status"] == "ok"
    supervisor = psutil.Process(serve.pid)
    children = supervisor.children()
    assert sorted(child.cmdline()[2] for child in children) == ["celery", "uvicorn"], "web, and a worker that sweeps"
    assert supervisor.cmdline()[1].endswith("supervisor.py"), "serve became a supervisor without Django"
    assert supervisor.memory_info().rss < 40 * 2**20

    accepted = serve.submit("srv", "served sleep=0")
    assert accepted.status_code == 202
    done = serve.wait_status(accepted.json()["run_id"], "srv", "COMPLETED", timeout=20, through_errors=True)
    assert done["content"] == "echo: served sleep=0 (history: 0 messages)"

    out = io.StringIO()
    call_command("demo", url=serve.url, png=str(tmp_path / "demo.png"), sleep=0.5, stdout=out)
    lines = {line.split()[0]: line for line in out.getvalue().splitlines()[2:6]}
    assert lines["A"].split()[4] == "-" and lines["D"].split()[4] == "-"
    assert lines["B"].split()[4] == "A"
    assert lines["C"].split()[4:6] == ["A,", "B"]
    assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"

    serve.signal(signal.SIGINT)
    assert serve.process.wait(60) == 0
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == []


@pytest.mark.parametrize(("attempts", "ending"), [(1, "ERROR"), (2, "COMPLETED")])
def test_a_worker_killed_under_serve_is_restarted_and_the_service_goes_on(start_serve, attempts, ending):
    serve = start_serve(AGENTOS_MAX_ATTEMPTS=str(attempts), **GRACE)
    victim = serve.submit("kill-serve", "victim sleep=5").json()["run_id"]
    successor = serve.submit("kill-serve", "next sleep=0").json()["run_id"]
    serve.wait_status(victim, "kill-serve", "RUNNING", timeout=20, through_errors=True)
    [worker] = children_named(serve, "celery")

    worker.send_signal(signal.SIGKILL)
    killed, killed_at = time.monotonic(), time.time()
    bystander = serve.submit("kill-serve-2", "bystander sleep=0").json()["run_id"]
    while time.monotonic() - killed < 2:
        assert serve.get("/health")["status"] == "ok", "the web server answers throughout"
        time.sleep(0.2)
    [replacement] = wait_until(
        lambda: [p for p in children_named(serve, "celery") if p.pid != worker.pid], timeout=10, what="a new worker"
    )
    first_claim = serve.wait_status(bystander, "kill-serve-2", "COMPLETED", timeout=20, through_errors=True)[
        "started_at"
    ]
    print(
        f"\nSIGKILL to the new worker's first claim: {datetime.fromisoformat(first_claim).timestamp() - killed_at:.2f}s"
    )

    run = serve.wait_status(victim, "kill-serve", "ERROR", "COMPLETED", timeout=20, through_errors=True)
    assert run["status"] == ending
    if ending == "ERROR":
        assert (run["content"], run["queue_attempt"]) == (SWEEP_ERROR, 1)
    else:
        assert (run["content"], run["queue_attempt"]) == ("echo: victim sleep=5 (history: 0 messages)", 2)
    assert (
        serve.wait_status(successor, "kill-serve", "COMPLETED", timeout=20, through_errors=True)["status"]
        == "COMPLETED"
    )
    assert re.search(rf"worker \(pid {worker.pid}\) was killed by SIGKILL; restarting it in 1s", serve.log())
    assert replacement.is_running() and serve.process.poll() is None


TERMINAL = ("COMPLETED", "ERROR", "CANCELLED")


def test_a_worker_killed_again_and_again_is_restarted_for_ever_while_the_api_serves(start_serve):
    """Six SIGKILLs, each to a worker that had become ready, at least 2 s apart (the back-off makes them 1, 2, 4, 8,
    16 and 30 s apart at best): the web answers and accepts throughout, every accepted run ends, and `/metrics`
    counts the restarts."""
    serve = start_serve(**GRACE)
    accepted, killed = [], []
    last_kill = time.monotonic()
    while len(killed) < 6 or serve.log().count(" ready.") < 7:
        assert (serve.get("/health") or {}).get("status") == "ok", f"the web answers throughout:\n{serve.log()}"
        session = f"storm-{len(accepted)}"
        response = serve.submit(session, "storm sleep=0")
        assert response.status_code == 202, response.text
        accepted.append((response.json()["run_id"], session))
        workers = children_named(serve, "celery")
        ready = serve.log().count(" ready.") == len(killed) + 1
        if workers and ready and len(killed) < 6 and time.monotonic() - last_kill >= 2:
            workers[0].send_signal(signal.SIGKILL)
            killed.append(workers[0].pid)
            last_kill = time.monotonic()
        time.sleep(0.25)

    for run_id, session in accepted:
        serve.wait_status(run_id, session, *TERMINAL, timeout=30, through_errors=True)
    delays = [
        re.search(rf"worker \(pid {pid}\) was killed by SIGKILL; restarting it in (\d+)s", serve.log())[1]
        for pid in killed
    ]
    assert delays == ["1", "2", "4", "8", "16", "30"]
    metrics = requests.get(f"{serve.url}/metrics", timeout=10)
    restarts = {labels: value for (name, labels), value in metric_samples(metrics.text).items() if "restarts" in name}
    assert restarts == {(("child", "web"),): 0.0, (("child", "worker"),): 6.0}
    assert serve.process.poll() is None
    print(f"\n{len(accepted)} runs accepted while the worker was killed 6 times, all ended")


# What Celery prints itself, not through logging: its notice of a warm shutdown, and (as root) a SecurityWarning.
CELERY_PRINTS = re.compile(
    r"|worker: Warm shutdown \(MainProcess\)|.*SecurityWarning: You're running the worker with superuser.*"
    r"|absolutely not recommended!|Please specify a different user using the --uid option\."
    r"|User information: uid=\d+ euid=\d+ gid=\d+ egid=\d+|  _warn_or_raise_security_error\(egid, euid, gid, uid,"
)


def test_json_logs_cover_serve_uvicorn_and_the_supervisor(start_serve):
    serve = start_serve(AGENTOS_LOG_FORMAT="json")
    [web], [worker] = children_named(serve, "uvicorn"), children_named(serve, "celery")
    worker.send_signal(signal.SIGKILL)
    wait_until(lambda: serve.log().count(" ready.") == 2, timeout=30, what="the worker restarted")
    serve.signal(signal.SIGINT)
    assert serve.process.wait(60) == 0

    lines = serve.log().splitlines()
    assert [line for line in lines if not line.startswith("{") and not CELERY_PRINTS.fullmatch(line)] == []
    said = [(o["logger"], o["level"], o["message"]) for o in map(json.loads, filter(lambda x: x[:1] == "{", lines))]
    assert ("agentos.serve", "INFO", f"agentos serving on {serve.url} (web, worker); Ctrl-C stops it") in said
    assert ("agentos.serve", "WARNING", f"worker (pid {worker.pid}) was killed by SIGKILL; restarting it in 1s") in said
    assert [message for logger, _, message in said if logger == "uvicorn.access"] == [], "serve: --no-access-log"
    assert [message for logger, _, message in said if logger == "uvicorn.error"] == [
        f"Started server process [{web.pid}]",
        "Waiting for application startup.",
        "Application startup complete.",
        f"Uvicorn running on {serve.url} (Press CTRL+C to quit)",
        "Shutting down",
        "Waiting for application shutdown.",
        "Application shutdown complete.",
        f"Finished server process [{web.pid}]",
    ]


AMQP_WRONG_PASSWORD = "amqp://guest:wrong-password@127.0.0.1:5672//"


def test_a_worker_that_never_becomes_ready_stops_serve_at_its_fifth_try_printing_its_last_lines(start_serve):
    """A configuration error only the worker meets (RabbitMQ refuses its password: Celery exits before it is
    ready) stops serve after 5 tries, and the worker's last lines of output are the last thing serve writes."""
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=2):
            pass
    except OSError as error:
        pytest.skip(f"RabbitMQ not answering on 127.0.0.1:5672: {error}")
    serve = start_serve(ready=False, CELERY_BROKER_URL=AMQP_WRONG_PASSWORD)

    assert serve.process.wait(120) == 1

    log = serve.log()
    assert len(re.findall(r"worker \(pid \d+\) exited with status 1 before it was ready \(try \d of 5\)", log)) == 4
    assert re.search(
        r"\nagentos serve: worker \(pid \d+\) exited with status 1 before it was ever ready, 5 times in a row; "
        r"stopping everything\n",
        log,
    )
    lines = log.splitlines()
    report = lines.index("agentos serve: worker's last lines of output:")
    tail = lines[report + 1 :]
    assert 0 < len(tail) <= 20 and all(line.startswith("agentos serve: | ") for line in tail), "the last lines"
    assert "ACCESS_REFUSED" in tail[-1], tail


def refusal(command_port: int, **env) -> subprocess.CompletedProcess:
    command = [sys.executable, "manage.py", "serve", "--port", str(command_port)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_a_second_serve_of_the_checkout_refuses_at_once_and_leaves_the_first_untouched(start_serve):
    try:
        FolderLock(ROOT / ".run").acquire().file.close()
    except Exception:
        pytest.skip("a serve of this checkout is running (it holds .run/)")
    first = start_serve(embedded=True)

    same_port = refusal(first.port, **embedded_env())
    other_port = refusal(free_port(), **embedded_env())

    assert same_port.returncode == 1
    assert same_port.stdout == ""
    assert same_port.stderr == (
        f"agentos: cannot serve on 127.0.0.1:{first.port}: address already in use (is another agentos running?)\n"
    )
    assert other_port.returncode == 1
    assert other_port.stderr == (
        f"agentos: another agentos (pid {first.pid}) is using {ROOT / '.run'}; stop it first, "
        "or set DATABASE_URL and REDIS_URL to run beside it\n"
    )
    assert first.get("/health")["status"] == "ok"
    run_id = first.submit("after-refusals", "still here sleep=0").json()["run_id"]
    assert (
        first.wait_status(run_id, "after-refusals", "COMPLETED", timeout=20, through_errors=True)["status"]
        == "COMPLETED"
    )


@pytest.mark.parametrize(
    ("name", "url", "reason"),
    [
        ("DATABASE_URL", "postgresql://postgres:s3cret@127.0.0.1:{port}/agentos", "connection to server at"),
        ("REDIS_URL", "redis://:s3cret@127.0.0.1:{port}/0", "Error 111 connecting to 127.0.0.1:{port}"),
    ],
)
def test_an_unreachable_service_url_is_one_line_naming_it(name, url, reason):
    port = free_port()
    env = {**process_env(), name: url.format(port=port)}

    result = refusal(free_port(), **env)

    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    masked_url = url.format(port=port).replace(":s3cret@", ":***@")
    assert result.stderr.startswith(f"agentos: cannot reach {name} {masked_url}: {reason.format(port=port)}")
