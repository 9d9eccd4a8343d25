"""The dashboard in a real browser: headless Chromium driven by Selenium.

What a user sees: the overview's numbers are those of ``stats()``, a publish shows
within the refresh interval, a script in a body is text, the actions are absent when
read-only and work (purge empties, redrive moves) with ``admin=True``. No page may
trip the Content-Security-Policy (the browser's console is read for violations).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import vsqs
from vsqs.dashboard import Dashboard
from vsqs.dashboard import _format as fmt

from .browser import chromium_session
from .dashboard_http import serving

EVERY = 1.0  # seconds between samples and between refreshes of an open page
XSS = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium_session() as driver:
        yield driver


def _console_errors(browser: webdriver.Chrome) -> list[str]:
    """Errors the page logged (a Content-Security-Policy violation is one)."""
    log = browser.get_log("browser")  # type: ignore[no-untyped-call]  # unannotated in selenium
    return [e["message"] for e in log if e["level"] == "SEVERE"]


def _row(browser: webdriver.Chrome, name: str) -> dict[str, str]:
    """The overview's cells of queue *name*, by column key (read in one script: a
    refresh may replace the rows between two calls of the driver)."""
    cells = browser.execute_script(
        """
        const keys = Array.from(document.querySelectorAll("#overview th"), (th) => th.dataset.key);
        const row = Array.from(document.querySelectorAll("#overview tbody tr"))
            .find((tr) => tr.dataset.name === arguments[0]);
        if (!row) return null;
        return Object.fromEntries(keys.map((k, i) => [k, row.cells[i].innerText.trim()]));
        """,
        name,
    )
    assert isinstance(cells, dict), f"no row for {name}"
    return cells


def _order(browser: webdriver.Chrome) -> list[str]:
    names = browser.execute_script(
        "return Array.from(document.querySelectorAll('#overview tbody tr'), "
        "(tr) => tr.dataset.name)"
    )
    assert isinstance(names, list)
    return [str(name) for name in names]


def _wait(browser: webdriver.Chrome, seconds: float) -> WebDriverWait[webdriver.Chrome]:
    # A page being replaced (a form submitted) makes the elements found a moment ago stale.
    return WebDriverWait(
        browser, seconds, poll_frequency=0.1,
        ignored_exceptions=[StaleElementReferenceException, NoSuchElementException],
    )  # fmt: skip


def test_overview_shows_stats_and_follows_a_publish(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    root = vsqs.QueueRoot(tmp_path / "root")
    dlq = root.create("orders.dlq")
    orders = root.create("orders", dead_letter="orders.dlq", max_receives=3)
    orders.publish_batch([b"a", b"b", b"c"])
    orders.publish(b"later", delay=600)
    assert orders.receive(timeout=0) is not None
    events = root.create("events")
    events.publish_batch([b"e"] * 1234)
    expected = {"orders": orders.stats(), "events": events.stats(), "orders.dlq": dlq.stats()}
    with Dashboard(root, sample_every=EVERY) as dashboard, serving(dashboard) as url:
        browser.get(url + "/")
        assert browser.title == f"vsqs: {root.path}"
        for name, stats in expected.items():
            row = _row(browser, name)
            assert row["ready"] == fmt.count(stats.ready), name
            assert row["held"] == fmt.count(stats.held), name
            assert row["delayed"] == fmt.count(stats.delayed), name
            assert row["new"] == fmt.count(stats.new), name
            assert row["shutdown"] == "open"
        assert _row(browser, "events")["ready"] == "1,234"
        assert _row(browser, "orders")["dead_letter"] == "orders.dlq (0)"

        # Sorting: by Ready, largest first.
        browser.find_element(By.CSS_SELECTOR, 'th[data-key="ready"] button').click()
        assert _order(browser) == ["events", "orders", "orders.dlq"]

        # 100 more messages show within the refresh interval (a sample, then a refresh:
        # two intervals at most, plus the time the browser takes).
        orders.publish_batch([b"n"] * 100)
        orders.close()  # its counters written now (another process's within a second)
        _wait(browser, 4 * EVERY + 2).until(lambda b: _row(b, "orders")["ready"] == "102")
        assert browser.current_url == url + "/"  # refreshed in place, not reloaded
        assert _order(browser) == ["events", "orders", "orders.dlq"]  # still sorted by Ready
        assert _console_errors(browser) == []


def test_a_script_body_renders_as_text(browser: webdriver.Chrome, tmp_path: Path) -> None:
    root = vsqs.QueueRoot(tmp_path / "root")
    root.create("xss").publish(XSS.encode(), attributes={"note": XSS})
    with Dashboard(root, sample_every=EVERY) as dashboard, serving(dashboard) as url:
        browser.get(url + "/ui/queue/xss")
        bodies = [pre.text for pre in browser.find_elements(By.CSS_SELECTOR, "table.messages pre")]
        assert bodies == [XSS]
        cell = browser.find_element(By.CSS_SELECTOR, "table.messages td:nth-child(4)").text
        assert cell == f"note = {XSS}"
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - raising is the point
        # The charts load (images from this server), the live numbers refresh.
        _wait(browser, 10).until(
            lambda b: all(
                b.execute_script("return arguments[0].naturalWidth", img) == 640
                for img in b.find_elements(By.CSS_SELECTOR, ".charts img")
            )
        )
        assert _console_errors(browser) == []


def test_actions_absent_when_read_only(browser: webdriver.Chrome, tmp_path: Path) -> None:
    root = vsqs.QueueRoot(tmp_path / "root")
    root.create("q").publish(b"x")
    with Dashboard(root, sample_every=EVERY) as dashboard, serving(dashboard) as url:
        browser.get(url + "/ui/queue/q")
        assert browser.find_elements(By.TAG_NAME, "form") == []
        assert browser.find_elements(By.TAG_NAME, "button") == []
        assert "Actions" not in browser.find_element(By.TAG_NAME, "main").text


def _act(browser: webdriver.Chrome, action: str, fill: dict[str, str] | None = None) -> str:
    """Submit *action*'s form on the current page, confirm, return the result text."""
    form = browser.find_element(By.CSS_SELECTOR, f"form:has(button.{action})")
    for field, value in (fill or {}).items():
        form.find_element(By.NAME, field).send_keys(value)
    form.find_element(By.CSS_SELECTOR, f"button.{action}").click()
    _wait(browser, 10).until(lambda b: _text(b, "h1").startswith("Confirm"))
    browser.find_element(By.CSS_SELECTOR, f"button.{action}").click()
    return str(_wait(browser, 10).until(lambda b: _text(b, "#result")))


def _text(browser: webdriver.Chrome, selector: str) -> str:
    """The rendered text of the element *selector* ("" if there is none yet), read in one
    script: an element found by one call and read by the next may belong to a page the
    browser replaced meanwhile (Chrome then says "Node ... does not belong to the
    document", not that it is stale)."""
    text = browser.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", selector
    )
    return str(text)


def test_admin_purge_and_redrive(browser: webdriver.Chrome, tmp_path: Path) -> None:
    root = vsqs.QueueRoot(tmp_path / "root")
    dlq = root.create("orders.dlq")
    orders = root.create("orders", dead_letter="orders.dlq", max_receives=1)
    orders.publish_batch([b"m%d" % i for i in range(5)])
    for message in orders.receive_batch(5, timeout=0):
        orders.change_visibility(message, 0)
    orders.requeue_expired()
    assert dlq.counts().ready == 5
    with Dashboard(root, admin=True, sample_every=EVERY) as dashboard, serving(dashboard) as url:
        browser.get(url + "/ui/queue/orders.dlq")
        sources = browser.find_elements(
            By.CSS_SELECTOR, 'table.messages a[href="/ui/queue/orders"]'
        )
        assert len(sources) == 5
        result = _act(browser, "redrive")
        assert (
            result
            == "Moved 5 messages from orders.dlq each to the queue it was dead-lettered from."
        )
        assert dlq.counts().ready == 0 and orders.counts().ready == 5

        browser.set_window_size(1280, 1500)
        browser.get(url + "/ui/queue/orders")
        assert _act(browser, "purge") == "Purged 5 messages from orders."
        assert orders.counts().ready == 0

        browser.set_window_size(1280, 1500)
        browser.get(url + "/ui/queue/orders")
        select = browser.find_element(By.CSS_SELECTOR, 'select[name="key"]')
        select.find_element(By.CSS_SELECTOR, 'option[value="visibility_timeout"]').click()
        result = _act(browser, "configure", {"value": "45"})
        assert result.startswith("orders: visibility_timeout is now 45.0.")
        assert orders.settings()["visibility_timeout"] == 45.0
        assert _console_errors(browser) == []


def test_the_screenshot_script_runs(tmp_path: Path) -> None:
    """``docs/screenshot_dashboard.py`` (which made docs/_static/dashboard.png) still works."""
    out = tmp_path / "dashboard.png"
    script = Path(__file__).resolve().parent.parent / "docs" / "screenshot_dashboard.py"
    done = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_an_operator_sees_flags_unknowns_and_units(
    browser: webdriver.Chrome, tmp_path: Path
) -> None:
    """After a live refresh (the script renders the rows): a dead-letter queue holding
    messages is flagged, a queue that cannot be read shows em dashes (the reason on
    hover), settings read in human units; a screenshot of each page is taken."""
    root = vsqs.QueueRoot(tmp_path / "root")
    dlq = root.create("orders.dlq")
    orders = root.create("orders", dead_letter="orders.dlq", max_receives=1, retention=345600)
    orders.publish_batch([b"a", b"b"])
    for message in orders.receive_batch(2, timeout=0):
        orders.change_visibility(message, 0)
    orders.requeue_expired()
    assert dlq.counts().ready == 2
    broken = root.create("broken", visibility_timeout=10)
    (Path(broken.path) / ".vsqs" / "settings.json").write_text("{not json", encoding="utf-8")
    with Dashboard(root, sample_every=EVERY) as dashboard, serving(dashboard) as url:
        browser.set_window_size(1280, 600)
        browser.get(url + "/")
        first = dashboard.sampler.snapshot
        _wait(browser, 4 * EVERY + 2).until(lambda b: dashboard.sampler.snapshot is not first)
        time.sleep(2 * EVERY)  # the page's own refresh has replaced the server's rows
        assert "2 dead letters" in _row(browser, "orders.dlq")["name"]
        assert _row(browser, "orders")["dead_letter"] == "orders.dlq 2"
        row = _row(browser, "broken")
        assert row["name"] == "broken cannot be read (InvalidSettings)"
        assert row["ready"] == row["held"] == row["oldest_age"] == "\u2014"
        title = browser.execute_script(
            "return document.querySelector('tr[data-name=\"broken\"] td:nth-child(2) span').title"
        )
        assert str(title).startswith("Unknown: InvalidSettings")
        browser.save_screenshot(str(tmp_path / "overview.png"))

        browser.set_window_size(1280, 1500)
        browser.get(url + "/ui/queue/orders")
        settings = browser.find_element(By.CSS_SELECTOR, "h2 + p + table.pairs").text
        assert "retention 4 days" in settings and "345600" not in settings
        flags = [flag.text for flag in browser.find_elements(By.CSS_SELECTOR, ".flag")]
        assert flags == ["2 dead letters in orders.dlq", "2 messages"], flags
        browser.save_screenshot(str(tmp_path / "orders.png"))

        browser.get(url + "/ui/queue/broken")
        time.sleep(2 * EVERY)  # a live refresh of the numbers keeps them unknown
        ready = browser.find_element(By.CSS_SELECTOR, '[data-field="ready"]')
        assert ready.text == "\u2014" and str(ready.get_attribute("title")).startswith("Unknown")
        browser.save_screenshot(str(tmp_path / "broken.png"))
        assert _console_errors(browser) == []
    for name in ("overview", "orders", "broken"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
