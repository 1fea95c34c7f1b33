"""Fixtures of the end-to-end tests: a throwaway PostgreSQL, and a headless Chromium driven by Selenium.

Chromium and its driver are Debian packages (`chromium`, `chromium-driver`) that `.ci/run` installs; without them
the browser tests are skipped, unless AGENTOS_REQUIRE_BROWSER is set (as `.ci/run` sets it), where they fail instead.
"""

import os
import shutil

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

from agentos_project.embedded import SHARED, EmbeddedPostgres

from ..conftest import free_port

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    not (CHROMIUM and DRIVER) and not os.environ.get("AGENTOS_REQUIRE_BROWSER"),
    reason="needs the Debian packages chromium and chromium-driver",
)
# Without the networking flags Chromium floods the closed network (a fresh profile, each test its own).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,900",
]


@pytest.fixture
def throwaway_postgres(tmp_path):
    """A started embedded PostgreSQL of the test's own (its own port and data), stopped and removed afterwards."""
    postgres = EmbeddedPostgres(tmp_path / "run", f"postgresql://postgres@127.0.0.1:{free_port()}/agentos")
    postgres.start()
    yield postgres
    postgres.stop()
    remove_data(postgres)


def remove_data(postgres: EmbeddedPostgres) -> None:
    """A stopped embedded PostgreSQL's data. As root it may be under /var/lib/agentos-embedded/<digest>/postgres:
    the digest's folder goes too."""
    shutil.rmtree(
        postgres.pgdata.parent if postgres.pgdata.is_relative_to(SHARED) else postgres.pgdata, ignore_errors=True
    )


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium (mark the test `needs_browser`); fails when AGENTOS_REQUIRE_BROWSER is set and Chromium
    or its driver is missing."""
    if not (CHROMIUM and DRIVER):
        pytest.fail("AGENTOS_REQUIRE_BROWSER is set but chromium / chromedriver are not installed")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    yield driver
    driver.quit()
