"""Headless Chromium for the dashboard's browser tests: started, or one clear line
saying how to get it.

Debian's ``chromium`` and ``chromium-driver`` (``tests/setup-browser.sh``, run as root
by ``make test``), driven by Selenium (the ``test`` extra). Selenium is pointed at the
driver on the ``PATH``, so it never tries to download one (there may be no network).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

NO_BROWSER = (
    "no chromedriver for the dashboard's browser tests: as root, sh tests/setup-browser.sh "
    "(make test runs it) installs Debian's chromium and chromium-driver"
)


def start_chromium() -> webdriver.Chrome:
    """A headless Chromium with a 1280x900 window, its console log kept.

    :raises RuntimeError: with :data:`NO_BROWSER` when there is no driver.
    """
    driver = shutil.which("chromedriver")
    if driver is None:
        raise RuntimeError(NO_BROWSER)
    options = webdriver.ChromeOptions()
    for argument in (
        "--headless=new",
        "--window-size=1280,900",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run as root otherwise
    browser = shutil.which("chromium")
    if browser is not None:
        options.binary_location = browser
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


@contextlib.contextmanager
def chromium_session() -> Iterator[webdriver.Chrome]:
    """:func:`start_chromium` for a module's tests, quit after them; without a driver the
    test fails with :data:`NO_BROWSER` alone, no traceback."""
    try:
        driver = start_chromium()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield driver
    finally:
        driver.quit()
