"""A real browser for the console's tests: Debian's ``chromium`` driven by Playwright (no browser
download). Without chromium the tests skip, except in CI (``CI=true``), where they fail."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def chromium() -> str:
    """The chromium executable, or the test skips (fails under CI)."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail(
                "chromium is needed: the console tests drive a real browser (apt-get install chromium)"
            )
        pytest.skip("chromium is not installed: the console tests drive a real browser")
    return CHROMIUM


@asynccontextmanager
async def browser() -> AsyncIterator[Browser]:
    """A headless chromium, shared by a module's tests (each opens a context of its own)."""
    executable = chromium()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


async def log_in(page: Page, base: str, name: str, token: str | None) -> None:
    """Log in at the console's form as ``name`` (with the serve token, when one is set)."""
    await page.goto(f"{base}/console/login")
    await page.fill("#name", name)
    if token is not None:
        await page.fill("#token", token)
    await page.click("form.login button[type=submit]")
    await page.wait_for_url(f"{base}/console/")
