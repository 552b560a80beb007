"""Fixtures of the console's tests: a controller's HTTP API served in the test's event loop,
and one headless Chromium shared by each test module, driven from worker threads (selenium
blocks; the API it talks to runs in this event loop, which must stay free to answer)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By

from osrdyne.ops import ApiServer, make_app
from tests.conftest import Running
from tests.console.browser import chromium
from tests.waiting import eventually

#: Finds and clicks of an element the page redrew meanwhile (`Page.click`).
STALE_TRIES = 5

Serve = Callable[..., Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Serve a running controller's API on a free port; returns its base URL."""
    servers: list[ApiServer] = []

    async def start(running: Running, *, token: str | None = None) -> str:
        server = ApiServer(make_app(running.controller, token=token), host="127.0.0.1", port=0)
        await server.start()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}"

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


class Page:
    """The shared browser, driven without blocking the event loop."""

    def __init__(self, browser: webdriver.Chrome) -> None:
        self.browser = browser

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    async def open(self, url: str) -> None:
        await self.call(self.browser.get, url)

    async def js(self, script: str, *args: Any) -> Any:
        return await self.call(self.browser.execute_script, script, *args)

    async def texts(self, css: str) -> list[str]:
        """The text content of every element matching `css` (what the page shows)."""
        return list(
            await self.js(
                "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)", css
            )
        )

    async def count(self, css: str) -> int:
        return int(await self.js("return document.querySelectorAll(arguments[0]).length", css))

    async def wait_for(self, css: str, *, what: str | None = None, timeout: float = 30) -> None:
        async def present() -> bool:
            return await self.count(css) > 0

        await eventually(present, timeout=timeout, what=what or f"{css} on the page")

    async def click(self, css: str) -> None:
        """Click the element `css` finds. The page redraws its tables as figures arrive: an
        element found just before a redraw is stale by the click, and is found again (a few
        tries, as a person would click again)."""

        def click() -> None:
            for tries_left in reversed(range(STALE_TRIES)):
                try:
                    self.browser.find_element(By.CSS_SELECTOR, css).click()
                    return
                except StaleElementReferenceException:
                    if not tries_left:
                        raise

        await self.call(click)

    async def type(self, css: str, text: str, *, clear: bool = True) -> None:
        def type_() -> None:
            element = self.browser.find_element(By.CSS_SELECTOR, css)
            if clear:
                element.clear()
            element.send_keys(text)

        await self.call(type_)

    async def sign_in(self, base: str, token: str) -> None:
        await self.open(f"{base}/console/")
        await self.wait_for("#token", what="the sign-in form")
        await self.type("#token", token)
        await self.click("#sign-in button")
        await self.wait_for("#groups", what="the groups table after signing in")

    async def errors(self) -> list[str]:
        """Severe messages of the browser's console: script errors and Content-Security-Policy
        violations (answers such as the 401 before signing in are expected, and left out)."""
        logs = await self.call(self.browser.get_log, "browser")
        return [
            entry["message"]
            for entry in logs
            if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]
        ]


@pytest.fixture
async def page(browser: webdriver.Chrome, serve: Serve) -> AsyncIterator[Page]:
    """The module's browser, on a blank page again after the test (before its API stops)."""
    shown = Page(browser)
    yield shown
    try:
        await shown.open("about:blank")
        await shown.call(browser.get_log, "browser")  # drop this test's messages
    except WebDriverException:
        pass
