"""The run page says when a run's supervisor is gone (issue 29: a killed supervisor's run read
"running", live): a real daemon, a run recorded by another supervisor (a real process, as a
foreground `airvisor start` is) that is then killed, the page in a real headless Chromium."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from airvisor._paths import DATABASE_NAME
from airvisor.policy import Phase
from airvisor.store import Store

from .conftest import LiveDaemon
from .test_page_browser import CHROMIUM, browser

__all__ = ["browser"]  # the fixture, shared with the page's other browser tests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason=f"{CHROMIUM} missing: run scripts/setup.d/50-chromium.sh"),
]


def test_the_page_says_the_supervisor_is_gone(live: LiveDaemon, browser: object) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    live.start()
    store = Store(live.tmp / "state" / DATABASE_NAME)
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        store.create_run(run_id="orphan-1", name="orphan", profile_path=None, profile={},
                         run_dir=str(live.tmp / "orphan"), gpus=[],
                         supervisor_pid=supervisor.pid)
        store.update_run("orphan-1", supervisor_kind="foreground",
                         supervisor_started=psutil.Process(supervisor.pid).create_time())
        store.set_phase("orphan-1", Phase.PREFLIGHT, previous=Phase.PENDING)
        state = store.get_run("orphan-1")
        assert state is not None and state.live
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(f"{live.url}/#run=orphan-1")
        expect(page.locator("#run-state")).to_have_text(state.state, timeout=20_000)
        expect(page.locator("#stop-btn")).to_be_enabled()
        supervisor.kill()
        supervisor.wait()
        expect(page.locator("#run-state")).to_have_text(
            f"{state.state} · not live: supervisor gone", timeout=20_000)
        expect(page.locator("#run-state")).to_have_attribute(
            "title", f"its supervisor (pid {supervisor.pid}) is not running")
        expect(page.locator("#stop-btn")).to_be_disabled()
        assert not errors, errors
    finally:
        supervisor.kill()
        supervisor.wait()
        store.set_phase("orphan-1", Phase.FAILED, last_error="test over")
