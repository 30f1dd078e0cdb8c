"""A headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven through Selenium.

``make test`` installs both packages when missing and sets ``COMPACTOR_REQUIRE_BROWSER=1``, so there a
missing browser fails the run; elsewhere the browser tests are skipped with the reason.
Screenshots go to ``out/browser/`` (path printed) so a person can look at what the tests saw.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("COMPACTOR_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("COMPACTOR_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "out" / "browser"
REBOUND_NAME = "rebound.test"
"""A name of another site the browser resolves to 127.0.0.1, as a DNS rebinding attack makes it."""


@pytest.fixture(autouse=True)
def _pages_use_the_bundled_catalog(bundled_catalog: None) -> None:
    """The pages are built with the bundled offline offers, whatever an earlier test configured."""


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        message = f"no {' or '.join(missing)} (apt-get install chromium chromium-driver; make test does)"
        if os.environ.get("COMPACTOR_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager look for downloads
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1600", "--force-prefers-reduced-motion",
                 f"--host-resolver-rules=MAP {REBOUND_NAME} 127.0.0.1"):  # DNS rebinding, for test_serve_cross_site
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the pages' script errors, for the tests to read
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def screenshot(browser: Any, request: pytest.FixtureRequest) -> Any:
    """``screenshot(name)`` saves the whole page as ``out/browser/<test>-<name>.png`` and prints the path."""

    def take(name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{request.node.name}-{name}.png"
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1280, min(max(int(height), 800), 4000))
        browser.save_screenshot(str(path))
        print(f"screenshot: {path}")
        return path

    return take
