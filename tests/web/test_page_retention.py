"""The run page says what the state directory keeps and what its last pruning pass removed
(issue 33), in a real headless Chromium against a real `airvisor daemon`."""

from __future__ import annotations

import re

import httpx
import pytest

from airvisor._paths import DATABASE_NAME
from airvisor.store import Store

from .conftest import LiveDaemon, store_recovered_run, wait_for
from .test_page_browser import CHROMIUM, browser

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason=f"{CHROMIUM} missing: run scripts/setup.d/50-chromium.sh"),
]
__all__ = ["browser"]  # the fixture, shared with the page's other browser tests


def test_the_page_says_what_was_pruned(live: LiveDaemon, browser: object) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    state = live.tmp / "state"
    store = Store(state / DATABASE_NAME)
    older = store_recovered_run(store, "older-1")
    newer = store_recovered_run(store, "newer-1")
    (state / "runs" / older).mkdir(parents=True)
    (state / "settings.toml").write_text("[state]\nkeep_runs = 1\nkeep_days = 0\n")
    live.start()  # its first pass prunes the older finished run
    wait_for("the pass recorded", lambda: httpx.get(f"{live.url}/state").json()["pruned"])

    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(f"{live.url}/#run={newer}")
    retention = page.locator("#retention")
    expect(retention).to_contain_text("keeps 1 finished runs", timeout=20_000)
    expect(retention).to_contain_text(re.compile(r"last pruned .*: pruned 1 finished run"))
    expect(retention).to_have_attribute("title", re.compile(f"^{older}: beyond the newest 1"))
    assert not (state / "runs" / older).exists()
    assert not errors, errors
