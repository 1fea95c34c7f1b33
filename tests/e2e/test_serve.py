"""`python manage.py serve` (what `make serve` runs): web + worker + sweeper answer, run, replay the seed
scenario for `manage.py demo`, and stop together on Ctrl-C."""

import io
import signal

import psutil
import pytest
from django.core.management import call_command

from ..conftest import wait_until

pytestmark = pytest.mark.slow


def test_serve_answers_health_runs_a_stub_run_and_stops_every_child_on_sigint(start_serve, tmp_path):
    serve = start_serve()
    assert serve.get("/health")["status"] == "ok"
    children = psutil.Process(serve.pid).children()
    assert len(children) == 3, "web, worker and sweeper"

    accepted = serve.submit("srv", "served sleep=0")
    assert accepted.status_code == 202
    run_id = accepted.json()["run_id"]
    done = wait_until(
        lambda: (
            (body := serve.get(f"/agents/stub-agent/runs/{run_id}", session_id="srv"))
            and body["status"] == "COMPLETED"
            and body
        ),
        timeout=20,
        what="the run to complete",
    )
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
