"""compose.yaml, the image and the proxy, read as files (no Docker engine here): the connection budget of
`docker compose up --scale worker=4 --scale web=2` fits PostgreSQL, migrate waits for TCP, the image carries no
test or benchmark package, and streams pass the proxy unbuffered."""

from __future__ import annotations

import re

import yaml

from tests.support.processes import ROOT

SUPERUSER_RESERVED = 3
HEARTBEAT_RESERVE = {"worker": 1}  # the lease heartbeat may open one connection beyond a worker's pool
SCALE = {"worker": 4, "web": 2}


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def max_connections(services: dict) -> int:
    command = services["postgres"]["command"]
    return int(command[command.index("-c") + 1].removeprefix("max_connections="))


def budget(services: dict, scale: dict[str, int]) -> int:
    total = 0
    for name, service in services.items():
        pool = service.get("environment", {}).get("AGENTOS_DB_POOL_SIZE")
        if pool is not None:
            total += scale.get(name, 1) * (int(pool) + HEARTBEAT_RESERVE.get(name, 0))
    return total


def test_four_workers_and_two_web_replicas_fit_the_connection_budget():
    services = compose()["services"]
    room = max_connections(services) - SUPERUSER_RESERVED

    assert budget(services, SCALE) == 4 * 9 + 2 * 16 + 2 + 1
    assert budget(services, SCALE) <= room
    assert budget(services, {"worker": 6, "web": 2}) <= room < budget(services, {"worker": 7, "web": 2})


def test_every_agentos_service_has_a_pool_size():
    services = compose()["services"]
    agentos = [name for name, service in services.items() if service.get("build")]

    assert sorted(agentos) == ["beat", "migrate", "web", "worker"]
    assert all("AGENTOS_DB_POOL_SIZE" in services[name]["environment"] for name in agentos)


def test_migrate_waits_for_postgres_over_tcp():
    services = compose()["services"]

    assert "pg_isready -h 127.0.0.1" in services["postgres"]["healthcheck"]["test"][1]
    assert services["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


def test_web_replicas_share_one_port_behind_the_proxy():
    services = compose()["services"]
    nginx = (ROOT / "deploy" / "nginx.conf").read_text()

    assert "ports" not in services["web"]
    assert services["proxy"]["ports"] == ["7777:7777"]
    assert re.search(r"set \$web http://web:7777;\s+proxy_pass \$web;", nginx)
    assert "proxy_buffering off;" in nginx
    assert "resolver 127.0.0.11" in nginx


def test_the_runtime_image_leaves_out_tests_benchmarks_and_their_packages():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    dockerfile = (ROOT / "Dockerfile").read_text()
    runtime = (ROOT / "requirements.txt").read_text()

    assert {"tests", "bench", ".venv", ".run", ".git", "requirements-dev.txt"} <= ignored
    assert "-r requirements-dev" not in dockerfile
    assert "DJANGO_SETTINGS_MODULE=agentos_project.settings.production" in dockerfile
    for package in ("pytest", "ruff", "matplotlib", "psutil", "agno"):
        assert not re.search(rf"^{package}==", runtime, re.MULTILINE), package
