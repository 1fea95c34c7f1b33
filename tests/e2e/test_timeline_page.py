"""`/ui/` in a real browser (headless Chromium driven by Selenium, tests/e2e/conftest.py) against a real `serve`:
the seed scenario submitted through the page's form and drawn in order, a paused run continued from its bar, and
runs submitted elsewhere shown as they go, or why they cannot be.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.support.runs import HITL_AGENT, STUB_AGENT

from .conftest import needs_browser

pytestmark = [pytest.mark.slow, needs_browser]

BARS = """return [...document.querySelectorAll('.bar[data-run-id]')].map((bar) => {
  const box = bar.getBoundingClientRect();
  return {text: bar.dataset.text, status: bar.dataset.status, start: Number(bar.dataset.start),
          end: Number(bar.dataset.end), left: box.left, right: box.right, top: box.top, bottom: box.bottom,
          session: bar.closest('.lane').dataset.session};
});"""
# What the page fetched: the browser's resource timings (each request once its answer has ended), kept past the
# default 250 entries.
REQUESTS_KEPT = "performance.setResourceTimingBufferSize(100000); performance.clearResourceTimings();"
REQUESTS_MADE = "return performance.getEntriesByType('resource').map((entry) => entry.name);"


def bars(browser) -> dict[str, dict]:
    """The drawn bars by their label's first word (A, B, …), measured in one go (the page redraws every 250 ms)."""
    return {bar["text"].split(" ")[0]: bar for bar in browser.execute_script(BARS)}


def submit_from_page(browser, component: str, session: str, message: str) -> None:
    """Fill the page's form and send it; returns once the run's bar is drawn (so the next is accepted after it)."""
    drawn = len(browser.execute_script(BARS))
    Select(browser.find_element(By.ID, "component")).select_by_value(component)
    for field, value in (("session", session), ("message", message)):  # set at once: typing takes 1 s for four runs
        browser.execute_script("document.getElementById(arguments[0]).value = arguments[1]", field, value)
    browser.find_element(By.ID, "send").click()
    WebDriverWait(browser, 10, poll_frequency=0.02).until(lambda b: len(b.execute_script(BARS)) == drawn + 1)


def open_page(browser, serve) -> None:
    browser.get(f"{serve.url}/ui/")
    WebDriverWait(browser, 10).until(lambda b: len(Select(b.find_element(By.ID, "component")).options) >= 5)


def test_the_seed_scenario_submitted_from_the_page_is_drawn_in_order(start_serve, browser, tmp_path):
    serve = start_serve()
    open_page(browser, serve)

    for label, session in (("A", "chat-1"), ("B", "chat-1"), ("C", "chat-1"), ("D", "chat-2")):
        submit_from_page(browser, "agent:stub-agent", session, f"{label} sleep=1")
    WebDriverWait(browser, 30).until(lambda b: [bar["status"] for bar in bars(b).values()] == ["COMPLETED"] * 4)
    drawn = bars(browser)
    browser.save_screenshot(str(tmp_path / "timeline.png"))

    a, b, c, d = (drawn[label] for label in "ABCD")
    assert [bar["session"] for bar in (a, b, c, d)] == ["chat-1", "chat-1", "chat-1", "chat-2"]
    assert b["start"] >= a["end"] and c["start"] >= b["end"], "one at a time, in order, on chat-1"
    # D is sent after C is accepted: beside A on a quick machine, beside B on a slow one; beside chat-1 always.
    beside = [bar for bar in (a, b, c) if d["start"] < bar["end"] and d["end"] > bar["start"]]
    assert beside, "chat-2 ran beside chat-1"
    assert b["left"] >= a["right"] - 1 and c["left"] >= b["right"] - 1, "the bars say so too"
    assert all(d["left"] < bar["right"] and d["right"] > bar["left"] for bar in beside)
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    summary = browser.find_element(By.ID, "summary").text
    assert "completed:" in summary and "oldest queued:" in summary and "sessions held:" in summary


def test_a_paused_run_holds_its_session_and_is_continued_from_its_bar(start_serve, browser):
    serve = start_serve()
    open_page(browser, serve)

    submit_from_page(browser, "agent:hitl-agent", "chat-3", "please delete scratch")
    submit_from_page(browser, "agent:hitl-agent", "chat-3", "after sleep=0")  # a session belongs to its component
    WebDriverWait(browser, 20).until(lambda b: bars(b)["please"]["status"] == "PAUSED")
    held = bars(browser)
    paused_bar = browser.find_element(By.CSS_SELECTOR, ".bar.PAUSED")

    assert held["please"]["text"] == "please delete scratch · holds chat-3"
    assert held["after"]["status"] == "PENDING"
    paused_bar.find_element(By.CSS_SELECTOR, "button.continue").click()
    WebDriverWait(browser, 20).until(
        lambda b: [bars(b)[label]["status"] for label in ("please", "after")] == ["COMPLETED", "COMPLETED"]
    )
    done = bars(browser)
    assert done["after"]["start"] >= done["please"]["end"]
    browser.find_element(By.ID, "bar-" + paused_bar.get_attribute("data-run-id")).click()
    WebDriverWait(browser, 10).until(lambda b: "done: tool result received" in b.find_element(By.ID, "detail").text)


def submitted(serve, session_id: str, message: str, *, prefix: str = STUB_AGENT, until: str | None = None) -> str:
    """Submit a background run over HTTP, not from the page; returns its run_id once it is `until`, when given."""
    run_id = serve.submitted(session_id, message, prefix=prefix)
    if until is not None:
        serve.wait_status(run_id, session_id, until, prefix=prefix, timeout=30)
    return run_id


def drawn_states(browser) -> dict[str, tuple[str, str]]:
    return {label: (bar["status"], bar["text"]) for label, bar in bars(browser).items()}


def summary_count(browser, status: str) -> str | None:
    counts = browser.find_elements(By.CSS_SELECTOR, f"#summary b[data-status='{status}']")
    return counts[0].text if counts else None


def test_runs_submitted_elsewhere_are_shown_with_their_states_and_kept_current(start_serve, browser):
    serve = start_serve()
    paused = submitted(serve, "held", "please delete scratch sleep=4", prefix=HITL_AGENT, until="PAUSED")
    submitted(serve, "held", "after sleep=0", prefix=HITL_AGENT)  # waits behind the paused run
    running = submitted(serve, "busy", "long sleep=60", until="RUNNING")

    open_page(browser, serve)
    browser.execute_script(REQUESTS_KEPT)
    expected = {
        "please": ("PAUSED", "please delete scratch sleep=4 · holds held"),
        "after": ("PENDING", f"after sleep=0 · waiting on {paused[:8]}"),
        "long": ("RUNNING", "long sleep=60"),
    }
    WebDriverWait(browser, 10).until(lambda b: drawn_states(b) == expected)
    shown = bars(browser)
    assert [shown[label]["session"] for label in expected] == ["held", "held", "busy"]
    assert shown["after"]["top"] >= shown["please"]["bottom"], "the waiting run has a row of its own"
    paused_bar = browser.find_element(By.ID, f"bar-{paused}")
    assert [button.text for button in paused_bar.find_elements(By.TAG_NAME, "button")] == ["Continue", "Cancel"]
    WebDriverWait(browser, 10).until(
        lambda b: [summary_count(b, s) for s in ("queued", "running", "paused")] == ["1"] * 3
    )
    assert browser.find_element(By.ID, "list-problem").text == ""

    # Runs submitted afterwards, elsewhere, appear without a reload: one the page sees queued or running, and one
    # that has finished before the page's next look at the live runs.
    started = time.monotonic()
    submitted(serve, "late", "late sleep=3")
    WebDriverWait(browser, 10).until(lambda b: bars(b).get("late", {}).get("status") in ("PENDING", "RUNNING"))
    submitted(serve, "quick", "quick sleep=0")
    WebDriverWait(browser, 20).until(lambda b: bars(b).get("quick", {}).get("status") == "COMPLETED")
    WebDriverWait(browser, 10).until(lambda b: bars(b)["late"]["status"] == "COMPLETED")

    # Continued and cancelled elsewhere: the page follows. The continuation runs 4 s; a stream that closes while it
    # runs (as a resume of a run with two legs does today, issue 27) is resumed after 1 s, then 2 s, then 4 s.
    tools = [{**tool, "confirmed": True} for tool in serve.poll(paused, "held", prefix=HITL_AGENT)["tools"]]
    continued = requests.post(
        f"{serve.url}/agents/hitl-agent/runs/{paused}/continue",
        data={"session_id": "held", "tools": json.dumps(tools), "background": "true", "stream": "false"},
        timeout=10,
    )
    assert continued.status_code == 202, continued.text
    WebDriverWait(browser, 30).until(
        lambda b: [bars(b)[label]["status"] for label in ("please", "after")] == ["COMPLETED", "COMPLETED"]
    )
    requests.post(f"{serve.url}/agents/stub-agent/runs/{running}/cancel", params={"session_id": "busy"}, timeout=10)
    WebDriverWait(browser, 10).until(lambda b: bars(b)["long"]["status"] == "CANCELLED")
    requests_made = browser.execute_script(REQUESTS_MADE)
    elapsed = time.monotonic() - started

    assert drawn_states(browser)["please"] == ("COMPLETED", "please delete scratch sleep=4")
    # Without hammering: the list and the summary at their cadence (3 requests every 2 s, the recent runs every
    # 10 s), and each run polled or resumed when something changed: here 1 to 5 times, 10 for the run with two legs
    # (per leg a resume and its polls).
    looks = [name for name in requests_made if "/queue/" in name or name.endswith("/metrics")]
    per_run = Counter(name.split("/runs/")[1].split("?")[0].split("/")[0] for name in requests_made if "/runs/" in name)
    assert len(looks) / elapsed <= 2.5, f"{len(looks)} looks in {elapsed:.1f}s"
    assert max(per_run.values()) <= 12, per_run
    assert len([name for name in requests_made if name.endswith(f"{paused}/resume")]) <= 3


def list_problem(browser) -> str:
    return browser.find_element(By.ID, "list-problem").text


def type_token(browser, token: str) -> None:
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token, Keys.TAB)


def test_the_page_says_which_token_the_run_list_needs_and_lists_the_runs_once_given_it(start_serve, browser):
    serve = start_serve(AGENTOS_SECURITY_KEY="the-key", AGENTOS_ADMIN_TOKEN="the-admin-token")
    submitted = serve.submit("gated", "elsewhere sleep=0", headers={"Authorization": "Bearer the-key"})
    assert submitted.status_code == 202, submitted.text

    browser.get(f"{serve.url}/ui/")
    WebDriverWait(browser, 10).until(lambda b: "the list needs a bearer token" in list_problem(b))
    assert bars(browser) == {}
    assert browser.find_element(By.ID, "empty").text == "No runs submitted from this page yet."
    type_token(browser, "the-key")
    WebDriverWait(browser, 15).until(lambda b: "Job queue operations require an admin scope" in list_problem(b))
    assert list_problem(browser) == (
        "Only runs submitted from this page are shown: Job queue operations require an admin scope: the list needs"
        " AGENTOS_ADMIN_TOKEN (or, when no admin token is set, AGENTOS_SECURITY_KEY)."
    )
    assert len(Select(browser.find_element(By.ID, "component")).options) >= 5, "the key opens the rest of the API"
    assert "queue summary unavailable (403" in browser.find_element(By.ID, "summary").text
    type_token(browser, "the-admin-token")
    WebDriverWait(browser, 15).until(lambda b: bars(b).get("elsewhere", {}).get("status") == "COMPLETED")
    assert list_problem(browser) == ""
    WebDriverWait(browser, 10).until(lambda b: summary_count(b, "completed") == "1")


def test_without_the_durable_queue_the_page_says_so_and_shows_its_own_runs(start_serve, browser):
    serve = start_serve(AGENTOS_QUEUE_DURABLE="false")
    open_page(browser, serve)

    WebDriverWait(browser, 10).until(lambda b: list_problem(b))
    assert list_problem(browser) == (
        "Only runs submitted from this page are shown: the durable queue is off (AGENTOS_QUEUE_DURABLE=false), so"
        " there is no queue to list."
    )
    submit_from_page(browser, "agent:stub-agent", "own", "mine sleep=0")
    WebDriverWait(browser, 10).until(lambda b: bars(b)["mine"]["status"] == "COMPLETED")
    assert "queue summary unavailable (503" in browser.find_element(By.ID, "summary").text
