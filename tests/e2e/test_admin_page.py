"""The Django admin under a real `serve`: its static files are collected at start and served by the web, and an
operator in a real browser (tests/e2e/conftest.py) requeues a dead letter from a styled ticket list."""

from __future__ import annotations

import time
from pathlib import Path

import django.contrib.admin
import pytest
import requests
from django.contrib.auth import get_user_model
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.support.waiting import wait_until

from .conftest import needs_browser

pytestmark = pytest.mark.slow
ADMIN_STATIC = Path(django.contrib.admin.__file__).parent / "static"
GRACE = 3  # AGENTOS_LOCK_GRACE_SECONDS: the least there is, so a dead letter may be requeued without force soon
# What the admin's stylesheets draw, read from the page: the header's colour (base.css, --header-bg) and the theme
# toggle's icons (dark_mode.css: only the current theme's, 1.5rem square; unstyled, all three at the SVG default).
STYLE = """const icons = [...document.querySelectorAll('.theme-toggle svg')];
return {header: getComputedStyle(document.getElementById('header')).backgroundColor,
        icons: icons.filter((icon) => getComputedStyle(icon).display !== 'none').map((icon) => {
          const box = icon.getBoundingClientRect();
          return [box.width, box.height];
        })};"""


def test_the_admin_stylesheet_is_served_under_serve(start_serve):
    serve = start_serve()

    response = requests.get(f"{serve.url}/static/admin/css/base.css", timeout=10)
    missing = requests.get(f"{serve.url}/static/admin/css/no-such.css", timeout=10)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == 'text/css; charset="utf-8"'
    assert response.headers["Content-Encoding"] == "gzip", "collected with its gzipped copy beside"
    assert response.content == (ADMIN_STATIC / "admin" / "css" / "base.css").read_bytes()
    assert missing.status_code == 404
    assert requests.get(f"{serve.url}/health", timeout=10).status_code == 200


def dead_letter(serve) -> dict:
    """A run whose only attempt failed (the stub model explodes): its ticket, once failed."""
    run_id = serve.submit("dead-letters", "explode sleep=0").json()["run_id"]
    return wait_until(
        lambda: (job := serve.get(f"/queue/jobs/{run_id}")) and job["status"] == "failed" and job,
        timeout=30,
        what="the run's ticket to fail",
    )


def log_in(browser, serve, *, then: str) -> None:
    get_user_model().objects.create_superuser("operator", "operator@example.com", "correct horse")
    browser.get(f"{serve.url}/admin/login/?next={then}")
    browser.find_element(By.ID, "id_username").send_keys("operator")
    browser.find_element(By.ID, "id_password").send_keys("correct horse")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()


@needs_browser
def test_an_operator_requeues_a_dead_letter_from_the_styled_ticket_list(start_serve, browser, tmp_path):
    serve = start_serve(AGENTOS_LOCK_GRACE_SECONDS=str(GRACE))
    job = dead_letter(serve)

    log_in(browser, serve, then="/admin/queueing/ticket/?status__exact=failed")
    row = WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.CSS_SELECTOR, f"#result_list input[name=_selected_action][value='{job['id']}']")
    )
    row.click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("requeue")
    browser.save_screenshot(str(tmp_path / "admin-tickets.png"))
    drawn = browser.execute_script(STYLE)

    assert drawn == {"header": "rgb(65, 118, 144)", "icons": [[24, 24]]}, "the admin's stylesheets applied"
    assert "stub model exploded" in browser.find_element(By.ID, "result_list").text
    assert (tmp_path / "admin-tickets.png").stat().st_size > 20_000
    time.sleep(max(0.0, job["completed_at"] + GRACE + 1 - time.time()))  # past the lease grace: no force needed
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    message = WebDriverWait(browser, 10).until(lambda b: b.find_element(By.CSS_SELECTOR, "ul.messagelist li"))
    assert message.text == f"Requeued {job['id']} (attempt budget now 2)"
    assert "success" in message.get_attribute("class")
    again = lambda: (now := serve.get(f"/queue/jobs/{job['id']}")) and now["attempt"] == 2  # noqa: E731
    wait_until(again, timeout=30, what="the requeued run to run again")
