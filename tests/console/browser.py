"""Headless Chromium from Debian's packages, driven through selenium and Debian's chromedriver
(`scripts/setup.sh` installs both): a real browser for the console's tests and screenshots.

The flags are what Chromium needs here: headless as root (`--no-sandbox`), no GPU, no
/dev/shm, and none of its background network traffic (this machine's network is closed, and
Chromium stalls on it otherwise); a fresh profile each time.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def binaries() -> tuple[str, str]:
    """The Chromium and chromedriver executables; a clear error when they are missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        raise RuntimeError(
            "the console's browser tests need Debian's chromium and chromium-driver "
            "(scripts/setup.sh installs them)"
        )
    return chromium, driver


@contextmanager
def chromium(*, width: int = 1440, height: int = 1000) -> Iterator[webdriver.Chrome]:
    binary, driver = binaries()
    profile = tempfile.mkdtemp(prefix="osrdyne-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    # The browser's console messages, read by the tests (a CSP violation shows there).
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)
