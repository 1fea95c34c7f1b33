"""`/ui/` in a real browser (headless Chromium driven by Selenium, tests/e2e/conftest.py) against a real `serve`:
the seed scenario submitted through the page's form and drawn in order, and a paused run continued from its bar.
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from .conftest import needs_browser

pytestmark = [pytest.mark.slow, needs_browser]

BARS = """return [...document.querySelectorAll('.bar[data-run-id]')].map((bar) => {
  const box = bar.getBoundingClientRect();
  return {text: bar.dataset.text, status: bar.dataset.status, start: Number(bar.dataset.start),
          end: Number(bar.dataset.end), left: box.left, right: box.right,
          session: bar.closest('.lane').dataset.session};
});"""


def bars(browser) -> dict[str, dict]:
    """The drawn bars by their label's first word (A, B, …), measured in one go (the page redraws every 250 ms)."""
    return {bar["text"].split(" ")[0]: bar for bar in browser.execute_script(BARS)}


def submit(browser, component: str, session: str, message: str) -> None:
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
        submit(browser, "agent:stub-agent", session, f"{label} sleep=1")
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

    submit(browser, "agent:hitl-agent", "chat-3", "please delete scratch")
    submit(browser, "agent:hitl-agent", "chat-3", "after sleep=0")  # a session belongs to its component
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
