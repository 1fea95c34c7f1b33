"""`python manage.py serve` (what `make serve` runs): web + worker + sweeper answer, run, replay the seed
scenario for `manage.py demo`, and stop together."""

import io
import signal
import socket
import subprocess
import sys

import psutil
import pytest
import requests
from django.core.management import call_command

from ..conftest import ROOT, process_env, wait_until

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get_json(url: str, **params):
    try:
        response = requests.get(url, params=params, timeout=2)
    except requests.ConnectionError:
        return None
    return response.json() if response.status_code == 200 else None


def test_serve_answers_health_runs_a_stub_run_and_stops_every_child_on_sigint(transactional_db, redis_db, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=process_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        assert wait_until(lambda: get_json(f"{base}/health"), timeout=40, what="/health")["status"] == "ok"
        children = psutil.Process(serve.pid).children()
        assert len(children) == 3, "web, worker and sweeper"
        wait_until(lambda: " ready." in (tmp_path / "serve.log").read_text(), timeout=30, what="worker ready")

        accepted = requests.post(
            f"{base}/agents/stub-agent/runs",
            data={"message": "served sleep=0", "background": "true", "stream": "false", "session_id": "srv"},
            timeout=5,
        )
        assert accepted.status_code == 202
        run_id = accepted.json()["run_id"]
        done = wait_until(
            lambda: (
                (body := get_json(f"{base}/agents/stub-agent/runs/{run_id}", session_id="srv"))
                and body["status"] == "COMPLETED"
                and body
            ),
            timeout=20,
            what="the run to complete",
        )
        assert done["content"] == "echo: served sleep=0 (history: 0 messages)"

        out = io.StringIO()
        call_command("demo", url=base, png=str(tmp_path / "demo.png"), sleep=0.5, stdout=out)
        lines = {line.split()[0]: line for line in out.getvalue().splitlines()[2:6]}
        assert "waited on" not in out.getvalue().splitlines()[0]
        assert lines["A"].split()[4] == "-" and lines["D"].split()[4] == "-"
        assert lines["B"].split()[4] == "A"
        assert lines["C"].split()[4:6] == ["A,", "B"]
        assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"

        serve.send_signal(signal.SIGINT)
        assert serve.wait(60) == 0
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert alive == []
    finally:
        if serve.poll() is None:
            serve.kill()
        log.close()
